#pragma once

// The resampler's two passes written for AVX2 with i16 multiply-adds (vpmaddwd), which GCC
// does not find on its own: each pair of taps becomes one multiply-add of interleaved rows by
// interleaved weights, 32 bytes at a time. The horizontal pass runs as the vertical one over
// the image transposed. They compute exactly the sums of the portable loops in
// image_resample.cpp (the same i16 weights, i32 sums, rounding and shift), so the bytes out are
// the same on every CPU. Used where the CPU has AVX2 (checked once); x86-64 with GCC or Clang
// only. Internal to lib/datasets/image.

#include <cstddef>
#include <cstdint>

#include "datasets/image/image_resample.hpp"

namespace ferry::detail::image {

/// Whether the kernels below exist in this build and the CPU runs them, and the tests' switch
/// to turn them off (returns the previous setting).
bool resample_avx2_usable() noexcept;
bool set_resample_avx2(bool enabled) noexcept;

/// The horizontal pass from `in_channels` (4: RGBX, or 3: RGB) to `out_channels` (3 or 4) per
/// pixel, as horizontal<in_channels, out_channels, ...>: the rows' columns [left, ax.hi)
/// transposed (4 × 4 blocks of 4-byte pixels) into this thread's transpose scratch, the vertical
/// kernel run over them, and the result transposed back into `dst` (mirrored when `flip`).
void horizontal_avx2(const std::uint8_t* src, std::size_t src_stride, int left, int rows,
                     int in_channels, const ResampleAxis& ax, bool flip, int out_channels,
                     std::uint8_t* dst, std::size_t dst_stride);

/// The most taps vertical_avx2() takes.
inline constexpr int kResampleAvx2MaxTaps = 64;

/// The vertical pass over `n` bytes per row, as vertical_fixed / vertical_any.
void vertical_avx2(const std::uint8_t* src, std::size_t src_stride, int top, std::size_t n,
                   const ResampleAxis& ay, std::uint8_t* dst, std::size_t dst_stride);

}  // namespace ferry::detail::image
