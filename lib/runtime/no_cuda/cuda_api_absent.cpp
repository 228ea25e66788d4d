// The CUDA runtime of a build without the CUDA toolkit: no device is ever usable.

#include <string>

#include "ferry/error.hpp"
#include "runtime/cuda_api.hpp"

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
void* device_alloc(int index, std::size_t /*nbytes*/) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kReason);
}
void device_free(void* /*ptr*/) noexcept {}

}  // namespace ferry::detail::cuda
