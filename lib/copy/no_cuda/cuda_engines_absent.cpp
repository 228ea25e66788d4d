// The GPUs' copy engines of a build without the CUDA toolkit: no device is ever usable.

#include <memory>
#include <string>

#include "copy/cuda_engines.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::cuda {

namespace {
constexpr const char* kNoCuda = "ferry was built without CUDA";
}

CopyEngine& engine(int index) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kNoCuda);
}

std::unique_ptr<CopyEngine> make_engine(int index) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kNoCuda);
}

}  // namespace ferry::detail::cuda
