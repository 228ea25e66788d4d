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
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cudasim.hpp"

#define __global__
#define __device__

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) noexcept  // NOLINT
      : x(x_), y(y_), z(z_) {}
};
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

template <class T>
T to_host(T value) {
  if constexpr (std::is_pointer_v<T>) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<T>>, const void*, void*>;
    return static_cast<T>(static_cast<Byte>(host_address(value, 0)));
  } else {
    return value;
  }
}

/// `kernel` over `grid` x `block` on `stream`: FERRY_LAUNCH(grid, block, stream, kernel)(args...).
template <class... Params>
class Launch {
 public:
  Launch(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream)
      : kernel_(kernel), grid_(grid), block_(block), stream_(stream) {}

  template <class... Args>
  void operator()(Args&&... args) const {
    const std::tuple<Params...> params(static_cast<Params>(std::forward<Args>(args))...);
    (void)launch(stream_, [kernel = kernel_, grid = grid_, block = block_, params] {
      const std::tuple<Params...> host =
          std::apply([](auto... p) { return std::tuple<Params...>(to_host(p)...); }, params);
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
                  std::apply(kernel, host);
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
};

template <class... Params>
Launch(void (*)(Params...), dim3, dim3, cudaStream_t) -> Launch<Params...>;

}  // namespace ferry_cudasim::device

#define blockIdx ::ferry_cudasim::device::block_idx
#define threadIdx ::ferry_cudasim::device::thread_idx
#define blockDim ::ferry_cudasim::device::block_dim
#define gridDim ::ferry_cudasim::device::grid_dim
#define FERRY_LAUNCH(grid, block, stream, ...) \
  ::ferry_cudasim::device::Launch(__VA_ARGS__, grid, block, stream)

inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
