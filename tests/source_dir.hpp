// Where the checkout is, for the tests that run its scripts or read its fixtures. The path is
// compiled into tests/source_dir.cpp alone, not defined on each test's command line, where
// ccache hashes it as written (one of the two causes of test objects missing in a clone at
// another path; the precompiled header is the other, still open: docs/CI.md).
#pragma once

namespace ferry::testing {

/// The checkout's root, absolute, without a trailing slash.
const char* source_dir() noexcept;

}  // namespace ferry::testing

#define FERRY_SOURCE_DIR (::ferry::testing::source_dir())
