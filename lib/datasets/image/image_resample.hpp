#pragma once

// The image decoder's resize: a separable, antialiased bilinear (triangle) resampler in fixed
// point, PIL's ImagingResample in meaning (each output pixel's window is [center - support,
// center + support) with the support widened by the downscale factor, weights by distance,
// truncated at the image's edges and normalized), so that Resize + CenterCrop stays within
// rounding of torchvision's. Weights are i16 with kWeightBits of fraction, accumulated in i32
// over u8 pixels: the vertical pass runs over whole rows, the horizontal one over each output
// pixel's few taps (both with AVX2 multiply-adds where the CPU has them:
// image_resample_avx2.hpp). Internal to lib/datasets/image.

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ferry::detail::image {

/// Fraction bits of the weights: 1.0 is 1 << kWeightBits (16384 fits an i16, and 255 × 16384 ×
/// any sum of weights that is 1 fits an i32).
inline constexpr int kWeightBits = 14;
/// One half in those fraction bits: a weighted sum starts there, so that the shift rounds.
inline constexpr std::int32_t kWeightHalf = 1 << (kWeightBits - 1);

/// One axis of a resize: output pixel i is the weighted sum of source pixels start[i] ..
/// start[i] + taps - 1 (the narrower windows padded with zero weights, moved inward at the
/// edges so that every window lies within the image).
struct ResampleAxis {
  int out = 0;   ///< output pixels
  int taps = 0;  ///< weights per output pixel
  int lo = 0;    ///< the source pixels read: [lo, hi) of the image
  int hi = 0;
  bool identity = false;              ///< output pixel i is source pixel lo + i
  std::vector<std::int32_t> start;    ///< per output pixel: its first source pixel
  std::vector<std::int16_t> weights;  ///< out × taps, each row summing to 1 << kWeightBits
};

/// The axis that maps the source box [b0, b1) (fractional, 0 <= b0 < b1 <= size) of an image
/// `size` pixels long onto `out` output pixels. Exact copies (the box is `out` whole pixels)
/// come out as identity.
void plan_axis(double b0, double b1, int size, int out, ResampleAxis& axis);

/// An upper bound of the bytes plan_axis() and resample() need for these sizes beyond the
/// images themselves (weights, starts, a row of sums), before anything is allocated: what an
/// absurd output of a tiny image would blow up. (The image between the passes is at most twice
/// the smaller of the source region and the output, in RGBX: of the order of what max_pixels
/// already admits.)
double resample_bytes(double box_x, double box_y, int src_w, int out_w, int out_h, int channels);

/// Whether resample() takes 4-channel RGBX for a 3-channel output on these axes (the
/// horizontal pass then computes a pixel's four lanes as one vector and drops the fourth): where
/// the horizontal pass comes last, so that the image between the passes stays the smaller one.
bool packs_rgbx(const ResampleAxis& ax, const ResampleAxis& ay);

/// Resizes: `src` holds the image's pixels from column `left`, row `top` on (HWC u8 of `in`
/// channels, rows `src_stride` bytes apart), covering at least [ax.lo, ax.hi) × [ay.lo,
/// ay.hi); writes ax.out × ay.out pixels of `channels` to `dst` (rows `dst_stride` bytes
/// apart), mirrored left-right when `flip`. `in` is `channels`, or 4 for 3 where packs_rgbx().
/// Its working memory comes from this thread's resize scratch.
void resample(const std::uint8_t* src, std::size_t src_stride, int left, int top, int in,
              int channels, const ResampleAxis& ax, const ResampleAxis& ay, bool flip,
              std::uint8_t* dst, std::size_t dst_stride);

}  // namespace ferry::detail::image
