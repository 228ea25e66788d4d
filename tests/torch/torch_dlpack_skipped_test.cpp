// Stands in for torch_dlpack_test.cpp where it cannot be built, so that ctest reports the
// libtorch round trip as skipped, with the reason, rather than silently absent.

#include <gtest/gtest.h>

#ifndef FERRY_TORCH_SKIP_REASON
#define FERRY_TORCH_SKIP_REASON "libtorch test not built"
#endif

TEST(TorchDLPack, RoundTripThroughLibtorch) { GTEST_SKIP() << FERRY_TORCH_SKIP_REASON; }
