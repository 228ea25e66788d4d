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

void* host_alloc(std::size_t nbytes) {
  void* p = nullptr;
  FERRY_CUDA_CHECK(cudaHostAlloc(&p, nbytes, cudaHostAllocPortable));
  return p;
}

void host_free(void* ptr) noexcept { (void)cudaFreeHost(ptr); }

void* device_alloc(int index, std::size_t nbytes) {
  DeviceGuard guard(index);
  void* p = nullptr;
  FERRY_CUDA_CHECK(cudaMalloc(&p, nbytes == 0 ? 1 : nbytes));
  return p;
}

void device_free(void* ptr) noexcept { (void)cudaFree(ptr); }

}  // namespace ferry::detail::cuda
