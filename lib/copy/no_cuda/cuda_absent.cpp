// The CUDA runtime of a build without the CUDA toolkit: no device is ever usable.

#include <memory>
#include <new>
#include <string>

#include "copy/copy_engine.hpp"
#include "copy/cuda/cuda_api.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::cuda {

namespace {
constexpr const char* kReason = "ferry was built without CUDA";
}

bool built() noexcept { return false; }
int device_count() noexcept { return 0; }
std::string unavailable_reason() { return kReason; }
std::string device_problem(int /*index*/) { return kReason; }
void* host_alloc(std::size_t /*nbytes*/) {
  throw DeviceError(std::string("cudaHostAlloc: ") + kReason);
}
void host_free(void* /*ptr*/) noexcept {}
std::unique_ptr<CopyEngine> make_engine(int index) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kReason);
}

CopyEngine& engine(int index) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kReason);
}

}  // namespace ferry::detail::cuda
