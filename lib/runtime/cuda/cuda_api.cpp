#include "runtime/cuda_api.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "runtime/cuda/cuda_handles.hpp"

namespace ferry::detail::cuda {
namespace {

struct Probe {
  int count = 0;
  std::string reason;  // why count is 0
};

const Probe& probe() noexcept {
  static const Probe result = [] {
    Probe p;
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();  // leave no error behind for the user's own CUDA calls
      p.reason = cudaGetErrorString(status);
      return p;
    }
    p.count = n;
    if (n == 0) p.reason = "no CUDA device was found";
    return p;
  }();
  return result;
}

}  // namespace

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  // The error is reported once, here: cleared, the next call on this thread does not report it
  // again as its own (sticky errors, a lost context, stay whatever is done).
  (void)cudaGetLastError();
  throw DeviceError(std::string(file) + ":" + std::to_string(line) + ": " + expr + ": " +
                    cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

bool built() noexcept { return true; }

int device_count() noexcept { return probe().count; }

std::string unavailable_reason() { return probe().reason; }

std::string device_problem(int index) {
  const Probe& p = probe();
  if (p.count == 0) return p.reason;
  if (index < 0 || index >= p.count) {
    return std::string(cudaGetErrorString(cudaErrorInvalidDevice)) + " (" +
           std::to_string(p.count) + " device" + (p.count == 1 ? "" : "s") + ")";
  }
  return {};
}

namespace {
// The device whose context pinned-memory calls run in: the thread's current one when it has a
// context, else the first device that has one, so that pinning never makes a context on cuda:0
// for a process that uses another GPU.
int context_device() {
  int current = 0;
  FERRY_CUDA_CHECK(cudaGetDevice(&current));
  if (has_context(current)) return current;
  for (int i = 0; i < device_count(); ++i) {
    if (has_context(i)) return i;
  }
  return current;
}
}  // namespace

void* host_alloc(std::size_t nbytes) {
  DeviceGuard guard(context_device());
  void* p = nullptr;
  FERRY_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable));
  return p;
}

void host_free(void* ptr) noexcept {
  try {
    DeviceGuard guard(context_device());
    ignore(cudaFreeHost(ptr));
  } catch (...) {  // the runtime is shutting down: it frees the memory itself
    (void)cudaGetLastError();
  }
}

void host_register(void* ptr, std::size_t nbytes) {
  DeviceGuard guard(context_device());
  FERRY_CUDA_CHECK(cudaHostRegister(ptr, nbytes, cudaHostRegisterPortable));
}

void host_unregister(void* ptr) noexcept {
  try {
    DeviceGuard guard(context_device());
    ignore(cudaHostUnregister(ptr));
  } catch (...) {  // the runtime is shutting down
    (void)cudaGetLastError();
  }
}

bool has_context(int index) noexcept {
  // cuDevicePrimaryCtxGetState through the runtime's door to the driver: no link to libcuda.
  using GetState = int (*)(int device, unsigned* flags, int* active);
  static const GetState get_state = []() -> GetState {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<GetState>(f);
  }();
  if (get_state == nullptr) return true;  // cannot tell: restore, as CUDA itself would
  unsigned flags = 0;
  int active = 0;
  if (get_state(index, &flags, &active) != 0) return true;
  return active != 0;
}

bool device_reads_host(int index, const void* ptr) noexcept {
  if (ptr == nullptr || !device_problem(index).empty()) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeHost && attributes.devicePointer == ptr;
}

}  // namespace ferry::detail::cuda
