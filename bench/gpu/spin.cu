// A kernel that keeps one SM busy for a fixed number of clock cycles: the stand-in for a
// training step of known length in bench/gpu_loader.

#include <cuda_runtime_api.h>

#include "spin.hpp"

namespace {

__global__ void spin_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

}  // namespace

cudaError_t launch_spin(long long cycles, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(cycles);
  return cudaGetLastError();
}
