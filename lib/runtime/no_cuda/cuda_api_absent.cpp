// The CUDA runtime of a build without the CUDA toolkit: no device is ever usable.

#include <string>

#include "ferry/error.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry::detail::cuda {

namespace {
constexpr const char* kReason = "ferry was built without CUDA";

[[noreturn]] void unusable(int index) {
  throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + kReason);
}
}  // namespace

bool built() noexcept { return false; }
int device_count() noexcept { return 0; }
std::string unavailable_reason() { return kReason; }
std::string device_problem(int /*index*/) { return kReason; }
void* host_alloc(std::size_t /*nbytes*/) {
  throw DeviceError(std::string("cudaHostAlloc: ") + kReason);
}
void host_free(void* /*ptr*/) noexcept {}
void host_register(void* /*ptr*/, std::size_t /*nbytes*/) {
  throw DeviceError(std::string("cudaHostRegister: ") + kReason);
}
void host_unregister(void* /*ptr*/) noexcept {}
void* device_alloc(int index, std::size_t /*nbytes*/, Stream /*stream*/) { unusable(index); }
void device_free(void* /*ptr*/, Stream /*stream*/) noexcept {}
DeviceCacheStats device_cache_stats(int index) { unusable(index); }
void device_cache_trim(int index) { unusable(index); }
void join_streams(int index, Stream /*waiter*/, Stream /*waited*/) { unusable(index); }
void synchronize_stream(int index, Stream /*stream*/) { unusable(index); }
bool device_reads_host(int /*index*/, const void* /*ptr*/) noexcept { return false; }
Event record_event(int index, Stream /*stream*/) { unusable(index); }
void stream_wait_event(int index, Stream /*stream*/, const Event& /*event*/) { unusable(index); }

}  // namespace ferry::detail::cuda
