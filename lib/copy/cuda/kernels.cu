// ferry's CUDA kernels: image normalization and layout, and dtype conversion. Each has a CPU
// twin (core/image_ops.cpp, ferry::convert) that gives the same bits; tests/cuda compares them.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "copy/cuda/kernels.hpp"
#include "core/convert_rules.hpp"
#include "runtime/cuda/cuda_handles.hpp"

// kernel<<<grid, block, 0, stream>>>(args...) is written FERRY_LAUNCH(grid, block, stream,
// kernel)(args...), so that cudasim (tests/cudasim/cudasim_device.hpp, which defines it first) can
// run these same kernels on the CPU.
#ifndef FERRY_LAUNCH
#define FERRY_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<grid, block, 0, stream>>>
#endif
// Every load and store of device memory is written FERRY_LD(p) and FERRY_ST(p, value): plain
// accesses under nvcc; under cudasim each is checked for its alignment and bounds, faulting as a
// GPU does (cudaErrorMisalignedAddress, cudaErrorIllegalAddress).
#ifndef FERRY_LD
#define FERRY_LD(p) (*(p))
#define FERRY_ST(p, ...) (*(p) = (__VA_ARGS__))
#endif

namespace ferry::detail::cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for `n` items, `per_block` to a block (the grid strides over more than 65535 * 32).
unsigned blocks_for(std::int64_t n, std::int64_t per_block = kThreads) {
  const std::int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

template <class Out>
__device__ Out from_f32(float v) {
  if constexpr (std::is_same_v<Out, float>) {
    return v;
  } else if constexpr (std::is_same_v<Out, Half>) {
    return Half{__half_as_ushort(__float2half_rn(v))};
  } else {
    return BFloat16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
  }
}

struct Geometry {
  std::int64_t n, plane, c;
  bool to_chw;
};

// Per-channel factors by value, in registers: the loops over channels below are unrolled, so
// every index into them is a constant.
struct Factors {
  float mul[4];
  float add[4];
};

// One thread per pixel of one image: blockIdx.y picks the image (the grid strides over more),
// x strides over the plane. No division per element: the image's base is computed once per
// block row, the channels are an unrolled loop, and CHW writes stay coalesced per channel.
template <class Out, int C>
__global__ void normalize_kernel(const std::uint8_t* src, Out* dst, std::int64_t n,
                                 std::int64_t plane, bool to_chw, Factors f) {
  for (std::int64_t image = blockIdx.y; image < n; image += gridDim.y) {
    const std::uint8_t* in = src + image * plane * C;
    Out* out = dst + image * plane * C;
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         p < plane; p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
#pragma unroll
      for (int ch = 0; ch < C; ++ch) {
        const float x = static_cast<float>(FERRY_LD(in + (p * C + ch)));
        const Out v = from_f32<Out>(__fmaf_rn(x, f.mul[ch], f.add[ch]));
        if (to_chw) {
          FERRY_ST(out + (ch * plane + p), v);
        } else {
          FERRY_ST(out + (p * C + ch), v);
        }
      }
    }
  }
}

// Blocks for one image's plane, and images per launch row (the grid's y).
dim3 image_grid(std::int64_t n, std::int64_t plane) {
  const std::int64_t x = (plane + kThreads - 1) / kThreads;
  const std::int64_t y = n < 65535 ? n : 65535;
  return {static_cast<unsigned>(x < 65535 ? x : 65535), static_cast<unsigned>(y), 1};
}

template <class Out, int C>
void launch_normalize_c(const ImageConvert& a, cudaStream_t stream) {
  Factors f{};
  for (int ch = 0; ch < 4; ++ch) {
    f.mul[ch] = a.mul[static_cast<std::size_t>(ch)];
    f.add[ch] = a.add[static_cast<std::size_t>(ch)];
  }
  const std::int64_t plane = a.h * a.w;
  FERRY_LAUNCH(image_grid(a.n, plane), kThreads, stream, normalize_kernel<Out, C>)
  (static_cast<const std::uint8_t*>(a.src), static_cast<Out*>(a.dst), a.n, plane, a.to_chw, f);
}

template <class Out>
void launch_normalize(const ImageConvert& a, cudaStream_t stream) {
  switch (a.c) {
    case 1:
      return launch_normalize_c<Out, 1>(a, stream);
    case 2:
      return launch_normalize_c<Out, 2>(a, stream);
    case 3:
      return launch_normalize_c<Out, 3>(a, stream);
    default:
      return launch_normalize_c<Out, 4>(a, stream);
  }
}

// [H, W, C] to [C, H, W], laid out as the normalize kernel: blockIdx.y picks the image (the grid
// strides over more), x strides over the plane, each thread moves one pixel's channels. No
// division per element, and the writes of each channel are coalesced.
template <class T>
__global__ void transpose_kernel(const T* src, T* dst, Geometry g) {
  for (std::int64_t image = blockIdx.y; image < g.n; image += gridDim.y) {
    const T* in = src + image * g.plane * g.c;
    T* out = dst + image * g.plane * g.c;
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
         p < g.plane; p += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      for (std::int64_t ch = 0; ch < g.c; ++ch) {
        FERRY_ST(out + (ch * g.plane + p), FERRY_LD(in + (p * g.c + ch)));
      }
    }
  }
}

// A block of kThreads threads as `width` threads across a row (a power of two, at most kThreads,
// at least the row's words where it can) by kThreads / width rows: narrow rows still fill the
// block, wide ones are strided across it, and no thread divides to find its row.
dim3 row_block(std::int64_t words) {
  unsigned width = 1;
  while (width < kThreads && width < words) width *= 2;
  return {width, kThreads / width, 1};
}

// Rows as words of W: threadIdx.y (and the grid's x) picks the row, threadIdx.x strides over its
// words, so consecutive threads read consecutive words of a row.
template <class W>
__global__ void gather_kernel(const W* src, W* dst, const std::uint64_t* indices,
                              std::int64_t count, std::int64_t words_per_row) {
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.y) + threadIdx.y;
       row < count; row += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
    const W* in = src + static_cast<std::int64_t>(FERRY_LD(indices + row)) * words_per_row;
    W* out = dst + row * words_per_row;
    for (std::int64_t w = threadIdx.x; w < words_per_row; w += blockDim.x) {
      FERRY_ST(out + w, FERRY_LD(in + w));
    }
  }
}

template <class W>
void launch_gather(const void* src, void* dst, const std::uint64_t* indices, std::int64_t count,
                   std::size_t row_bytes, cudaStream_t stream) {
  const auto words = static_cast<std::int64_t>(row_bytes / sizeof(W));
  const dim3 block = row_block(words);
  FERRY_LAUNCH(blocks_for(count, block.y), block, stream, gather_kernel<W>)
  (static_cast<const W*>(src), static_cast<W*>(dst), indices, count, words);
}

// Sample s (the grid's y), its padded row r (threadIdx.y and the grid's x), element k of the row
// (threadIdx.x): the sample's row while r < its length, else `pad`. No division per element.
template <class T>
__global__ void pad_rows_kernel(const T* src, T* dst, const std::int32_t* starts,
                                const std::int64_t* lengths, std::int64_t count, std::int64_t lmax,
                                std::int64_t per_row, T pad) {
  for (std::int64_t s = blockIdx.y; s < count; s += gridDim.y) {
    const std::int64_t length = FERRY_LD(lengths + s);
    const T* in = src + static_cast<std::int64_t>(FERRY_LD(starts + s)) * per_row;
    T* out = dst + s * lmax * per_row;
    for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.y) + threadIdx.y;
         r < lmax; r += static_cast<std::int64_t>(gridDim.x) * blockDim.y) {
      for (std::int64_t k = threadIdx.x; k < per_row; k += blockDim.x) {
        FERRY_ST(out + (r * per_row + k), r < length ? FERRY_LD(in + (r * per_row + k)) : pad);
      }
    }
  }
}

template <class T>
void launch_pad(const PadRows& a, cudaStream_t stream) {
  const auto per_row = static_cast<std::int64_t>(a.row_bytes / sizeof(T));
  T pad{};
  std::memcpy(&pad, &a.pad, sizeof(T));
  const dim3 block = row_block(per_row);
  const dim3 grid(blocks_for(a.lmax, block.y),
                  static_cast<unsigned>(a.count < 65535 ? a.count : 65535), 1);
  FERRY_LAUNCH(grid, block, stream, pad_rows_kernel<T>)
  (static_cast<const T*>(a.src), static_cast<T*>(a.dst), a.starts, a.lengths, a.count, a.lmax,
   per_row, pad);
}

template <class S, class D>
__global__ void convert_kernel(const S* src, D* dst, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    FERRY_ST(dst + i, rules::convert_one<S, D>(FERRY_LD(src + i)));
  }
}

template <class S, class D>
void launch_pair(const void* src, void* dst, std::int64_t n, cudaStream_t stream) {
  FERRY_LAUNCH(blocks_for(n), kThreads, stream, convert_kernel<S, D>)
  (static_cast<const S*>(src), static_cast<D*>(dst), n);
}

template <class S>
void launch_from(const void* src, DType to, void* dst, std::int64_t n, cudaStream_t stream) {
  switch (to) {
    case DType::u8:
      return launch_pair<S, std::uint8_t>(src, dst, n, stream);
    case DType::u16:
      return launch_pair<S, std::uint16_t>(src, dst, n, stream);
    case DType::u32:
      return launch_pair<S, std::uint32_t>(src, dst, n, stream);
    case DType::i32:
      return launch_pair<S, std::int32_t>(src, dst, n, stream);
    case DType::i64:
      return launch_pair<S, std::int64_t>(src, dst, n, stream);
    case DType::f16:
      return launch_pair<S, Half>(src, dst, n, stream);
    case DType::bf16:
      return launch_pair<S, BFloat16>(src, dst, n, stream);
    case DType::f32:
      return launch_pair<S, float>(src, dst, n, stream);
    case DType::f64:
      return launch_pair<S, double>(src, dst, n, stream);
    case DType::i8:
      return launch_pair<S, std::int8_t>(src, dst, n, stream);
    case DType::i16:
      return launch_pair<S, std::int16_t>(src, dst, n, stream);
    case DType::u64:
      return launch_pair<S, std::uint64_t>(src, dst, n, stream);
  }
}

}  // namespace

void launch_convert_image(const ImageConvert& args, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const Geometry g{args.n, args.h * args.w, args.c, args.to_chw};
  const std::int64_t total = g.n * g.plane * g.c;
  if (total == 0) return;
  if (args.normalize) {
    switch (args.dst_dtype) {
      case DType::f16:
        launch_normalize<Half>(args, s);
        break;
      case DType::bf16:
        launch_normalize<BFloat16>(args, s);
        break;
      default:
        launch_normalize<float>(args, s);
        break;
    }
  } else if (!args.to_chw) {
    FERRY_CUDA_CHECK(cudaMemcpyAsync(args.dst, args.src,
                                     static_cast<std::size_t>(total) * dtype_size(args.src_dtype),
                                     cudaMemcpyDeviceToDevice, s));
  } else {
    switch (dtype_size(args.src_dtype)) {
      case 1:
        FERRY_LAUNCH(image_grid(g.n, g.plane), kThreads, s, transpose_kernel<std::uint8_t>)
        (static_cast<const std::uint8_t*>(args.src), static_cast<std::uint8_t*>(args.dst), g);
        break;
      case 2:
        FERRY_LAUNCH(image_grid(g.n, g.plane), kThreads, s, transpose_kernel<std::uint16_t>)
        (static_cast<const std::uint16_t*>(args.src), static_cast<std::uint16_t*>(args.dst), g);
        break;
      case 4:
        FERRY_LAUNCH(image_grid(g.n, g.plane), kThreads, s, transpose_kernel<std::uint32_t>)
        (static_cast<const std::uint32_t*>(args.src), static_cast<std::uint32_t*>(args.dst), g);
        break;
      default:
        FERRY_LAUNCH(image_grid(g.n, g.plane), kThreads, s, transpose_kernel<std::uint64_t>)
        (static_cast<const std::uint64_t*>(args.src), static_cast<std::uint64_t*>(args.dst), g);
        break;
    }
  }
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_gather_rows(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                        std::size_t row_bytes, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (count == 0 || row_bytes == 0) return;
  const auto n = static_cast<std::int64_t>(count);
  const auto aligned = [&](std::size_t a) {
    return row_bytes % a == 0 && reinterpret_cast<std::uintptr_t>(src) % a == 0 &&
           reinterpret_cast<std::uintptr_t>(dst) % a == 0;
  };
  if (aligned(16)) {
    launch_gather<uint4>(src, dst, indices, n, row_bytes, s);
  } else if (aligned(4)) {
    launch_gather<std::uint32_t>(src, dst, indices, n, row_bytes, s);
  } else {
    launch_gather<std::uint8_t>(src, dst, indices, n, row_bytes, s);
  }
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_pad_rows(const PadRows& args, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  if (args.count == 0 || args.lmax == 0 || args.row_bytes == 0) return;
  switch (args.element) {
    case 8:
      launch_pad<std::uint64_t>(args, s);
      break;
    case 4:
      launch_pad<std::uint32_t>(args, s);
      break;
    case 2:
      launch_pad<std::uint16_t>(args, s);
      break;
    default:
      launch_pad<std::uint8_t>(args, s);
      break;
  }
  FERRY_CUDA_CHECK(cudaGetLastError());
}

void launch_convert(const void* src, DType from, void* dst, DType to, std::size_t count,
                    void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const auto n = static_cast<std::int64_t>(count);
  if (n == 0) return;
  if (from == to) {
    FERRY_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, count * dtype_size(from), cudaMemcpyDeviceToDevice, s));
    return;
  }
  switch (from) {
    case DType::u8:
      launch_from<std::uint8_t>(src, to, dst, n, s);
      break;
    case DType::u16:
      launch_from<std::uint16_t>(src, to, dst, n, s);
      break;
    case DType::u32:
      launch_from<std::uint32_t>(src, to, dst, n, s);
      break;
    case DType::i32:
      launch_from<std::int32_t>(src, to, dst, n, s);
      break;
    case DType::i64:
      launch_from<std::int64_t>(src, to, dst, n, s);
      break;
    case DType::f16:
      launch_from<Half>(src, to, dst, n, s);
      break;
    case DType::bf16:
      launch_from<BFloat16>(src, to, dst, n, s);
      break;
    case DType::f32:
      launch_from<float>(src, to, dst, n, s);
      break;
    case DType::f64:
      launch_from<double>(src, to, dst, n, s);
      break;
    case DType::i8:
      launch_from<std::int8_t>(src, to, dst, n, s);
      break;
    case DType::i16:
      launch_from<std::int16_t>(src, to, dst, n, s);
      break;
    case DType::u64:
      launch_from<std::uint64_t>(src, to, dst, n, s);
      break;
  }
  FERRY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ferry::detail::cuda
