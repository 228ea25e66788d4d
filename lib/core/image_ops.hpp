#pragma once

// Image layout and normalization: the work of the `.to(dtype)` half of `.to(device, dtype)`.
// The CPU twin lives here; the CUDA kernels (copy/cuda/kernels.cu) compute the same bits.

#include <array>
#include <cstdint>

#include "ferry/dtype.hpp"

namespace ferry {
struct Normalize;
}

namespace ferry::detail {

/// One conversion of N images [H, W, C] into [C, H, W] (to_chw) or [H, W, C].
/// With `normalize`: src is u8 and dst[c] = round_to(dst_dtype, fma(x, mul[c], add[c])) in f32.
/// Without: src and dst share `src_dtype` and elements are only moved.
struct ImageConvert {
  const void* src = nullptr;
  void* dst = nullptr;
  DType src_dtype = DType::u8;
  DType dst_dtype = DType::f32;
  std::int64_t n = 0, h = 0, w = 0, c = 0;
  bool to_chw = true;
  bool normalize = false;
  std::array<float, 4> mul{};  ///< scale / std[c]
  std::array<float, 4> add{};  ///< -mean[c] / std[c]
};

/// The CPU twin: runs on the calling thread. On x86-64 CPUs with AVX2 and FMA it runs a kernel
/// compiled for them (vectorized, hardware fused multiply-add), chosen once at run time.
void convert_image_cpu(const ImageConvert& args) noexcept;

/// The same, always through the portable kernel (std::fma in software where the build targets
/// no FMA hardware): the same bits, slower. For tests and measurements.
void convert_image_cpu_portable(const ImageConvert& args) noexcept;

/// Sets `args` up to normalize u8 images of `args.c` channels into [C, H, W] of norm.dtype:
/// dtypes, mul and add. \throws ConfigError, its message starting with `where`, for an output
/// dtype other than f32/f16/bf16, channels outside 1..4, mean/std not 1 or C values, a zero std
/// or a non-finite factor.
void set_normalize(const Normalize& norm, const char* where, ImageConvert& args);

}  // namespace ferry::detail
