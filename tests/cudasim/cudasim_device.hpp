#pragma once

// What nvcc gives a .cu file implicitly, for cudasim: lib/copy/cuda/kernels.cu is compiled as C++
// with this header included first (-include), so that ferry's own kernels run, unchanged, on the
// CPU. A launch (FERRY_LAUNCH) is queued on its stream like any cudasim work; when it runs, every
// block and thread of its grid runs the kernel in turn, one at a time, with blockIdx, threadIdx,
// blockDim and gridDim set, and every pointer argument translated from device memory to the
// host memory behind it (a pointer outside live device or page-locked memory faults).
// ferry's kernels share nothing between threads (no shared memory, no __syncthreads), so running
// the threads one after another computes what the GPU computes.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cudasim.hpp"

#define __global__
#define __device__

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

namespace ferry_cudasim::device {

inline thread_local uint3 block_idx;
inline thread_local uint3 thread_idx;
inline thread_local dim3 block_dim;
inline thread_local dim3 grid_dim;

/// A kernel's load of `*p`, checked for alignment and bounds (FERRY_LD).
template <class T>
T load(const T* p) {
  T value;
  std::memcpy(static_cast<void*>(&value), device_access(p, sizeof(T), alignof(T)), sizeof(T));
  return value;
}

/// A kernel's store of `value` to `*p`, checked for alignment and bounds (FERRY_ST).
template <class T, class V>
void store(T* p, const V& value) {
  const T v = static_cast<T>(value);
  std::memcpy(device_access(p, sizeof(T), alignof(T)), static_cast<const void*>(&v), sizeof(T));
}

/// `kernel` over `grid` x `block` on `stream`: FERRY_LAUNCH(grid, block, stream, kernel)(args...).
template <class... Params>
class Launch {
 public:
  Launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
         std::size_t shared_bytes = 0)
      : kernel_(kernel), grid_(grid), block_(block), stream_(stream), shared_(shared_bytes) {}

  /// As kernel<<<grid, block, shared_bytes, stream>>>(args...): an error stays for
  /// cudaGetLastError.
  template <class... Args>
  void operator()(Args&&... args) const {
    const std::tuple<Params...> params(static_cast<Params>(std::forward<Args>(args))...);
    (void)launch(stream_, grid_, block_, shared_,
                 [kernel = kernel_, grid = grid_, block = block_, params] {
                   grid_dim = grid;
                   block_dim = block;
                   for (unsigned bz = 0; bz < grid.z; ++bz) {
                     for (unsigned by = 0; by < grid.y; ++by) {
                       for (unsigned bx = 0; bx < grid.x; ++bx) {
                         block_idx = uint3{bx, by, bz};
                         for (unsigned tz = 0; tz < block.z; ++tz) {
                           for (unsigned ty = 0; ty < block.y; ++ty) {
                             for (unsigned tx = 0; tx < block.x; ++tx) {
                               thread_idx = uint3{tx, ty, tz};
                               std::apply(kernel, params);
                             }
                           }
                         }
                       }
                     }
                   }
                 });
  }

 private:
  void (*kernel_)(Params...);
  dim3 grid_, block_;
  cudaStream_t stream_;
  std::size_t shared_;
};

template <class... Params>
Launch(void (*)(Params...), dim3, dim3, cudaStream_t) -> Launch<Params...>;
template <class... Params>
Launch(void (*)(Params...), dim3, dim3, cudaStream_t, std::size_t) -> Launch<Params...>;

}  // namespace ferry_cudasim::device

#define blockIdx ::ferry_cudasim::device::block_idx
#define threadIdx ::ferry_cudasim::device::thread_idx
#define blockDim ::ferry_cudasim::device::block_dim
#define gridDim ::ferry_cudasim::device::grid_dim
#define FERRY_LAUNCH(grid, block, stream, ...) \
  ::ferry_cudasim::device::Launch(__VA_ARGS__, grid, block, stream)
#define FERRY_LD(p) ::ferry_cudasim::device::load(p)
#define FERRY_ST(p, ...) ::ferry_cudasim::device::store(p, __VA_ARGS__)

inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
