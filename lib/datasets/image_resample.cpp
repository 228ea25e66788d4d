#include "datasets/image_resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "datasets/image_internal.hpp"

namespace ferry::detail::image {
namespace {

constexpr std::int32_t kOne = 1 << kWeightBits;
constexpr std::int32_t kHalf = 1 << (kWeightBits - 1);

// The bilinear filter: a triangle of support 1.
double triangle(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}

// Taps a window can have for a box of `box` source pixels onto `out`: 2 × support, rounded
// up, plus one for the window's rounding.
double taps_bound(double box, int out) { return 2 * std::ceil(std::max(1.0, box / out)) + 1; }

// Per output pixel of a horizontal pass: `Channels` channels, each the weighted sum of
// ax.taps source pixels. Writes ax.out pixels of each of `rows` rows.
template <int Channels>
void horizontal(const std::uint8_t* src, std::size_t src_stride, int left, int rows,
                const ResampleAxis& ax, bool flip, std::uint8_t* dst, std::size_t dst_stride) {
  const int taps = ax.taps;
  const int out = ax.out;
  const std::int32_t* start = ax.start.data();
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* row = src + static_cast<std::size_t>(y) * src_stride;
    std::uint8_t* to = dst + static_cast<std::size_t>(y) * dst_stride;
    const std::int16_t* w = ax.weights.data();
    for (int i = 0; i < out; ++i, w += taps) {
      const std::uint8_t* p = row + static_cast<std::ptrdiff_t>(start[i] - left) * Channels;
      std::int32_t acc[static_cast<std::size_t>(Channels)];
      for (int c = 0; c < Channels; ++c) acc[c] = kHalf;
      for (int k = 0; k < taps; ++k) {
        for (int c = 0; c < Channels; ++c) acc[c] += w[k] * p[k * Channels + c];
      }
      std::uint8_t* o = to + static_cast<std::ptrdiff_t>(flip ? out - 1 - i : i) * Channels;
      // Weights are non-negative and sum to kOne: the result is within 0 .. 255.
      for (int c = 0; c < Channels; ++c) o[c] = static_cast<std::uint8_t>(acc[c] >> kWeightBits);
    }
  }
}

void horizontal_pass(const std::uint8_t* src, std::size_t src_stride, int left, int rows,
                     int channels, const ResampleAxis& ax, bool flip, std::uint8_t* dst,
                     std::size_t dst_stride) {
  switch (channels) {
    case 1:
      horizontal<1>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
    case 3:
      horizontal<3>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
    default:
      horizontal<4>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
  }
}

// out[x] = sum over k of w[k] × rows[k][x], rounded, for n bytes: whole rows at a time, so the
// loops run over contiguous bytes (GCC vectorizes them: u8 widened, i16 weights, i32 sums).
void vertical_pass(const std::uint8_t* src, std::size_t src_stride, int top, std::size_t n,
                   const ResampleAxis& ay, std::uint8_t* dst, std::size_t dst_stride,
                   std::int32_t* __restrict acc) {
  const int taps = ay.taps;
  for (int i = 0; i < ay.out; ++i) {
    const std::int16_t* w = ay.weights.data() + static_cast<std::ptrdiff_t>(i) * taps;
    const std::uint8_t* base =
        src + static_cast<std::size_t>(ay.start[static_cast<std::size_t>(i)] - top) * src_stride;
    for (std::size_t x = 0; x < n; ++x) acc[x] = kHalf;
    int k = 0;
    for (; k + 1 < taps; k += 2) {
      const std::int32_t w0 = w[k];
      const std::int32_t w1 = w[k + 1];
      if ((w0 | w1) == 0) continue;  // padding of a narrower window
      const std::uint8_t* __restrict r0 = base + static_cast<std::size_t>(k) * src_stride;
      const std::uint8_t* __restrict r1 = r0 + src_stride;
      for (std::size_t x = 0; x < n; ++x) acc[x] += w0 * r0[x] + w1 * r1[x];
    }
    if (k < taps && w[k] != 0) {
      const std::int32_t w0 = w[k];
      const std::uint8_t* __restrict r0 = base + static_cast<std::size_t>(k) * src_stride;
      for (std::size_t x = 0; x < n; ++x) acc[x] += w0 * r0[x];
    }
    std::uint8_t* __restrict to = dst + static_cast<std::size_t>(i) * dst_stride;
    for (std::size_t x = 0; x < n; ++x) to[x] = static_cast<std::uint8_t>(acc[x] >> kWeightBits);
  }
}

// Mirrors `rows` rows of `width` pixels left-right, in place.
void mirror(std::uint8_t* px, std::size_t stride, std::size_t width, std::size_t rows,
            std::size_t c) {
  for (std::size_t y = 0; y < rows; ++y) {
    std::uint8_t* row = px + y * stride;
    for (std::size_t x = 0; x < width / 2; ++x) {
      std::swap_ranges(row + x * c, row + (x + 1) * c, row + (width - 1 - x) * c);
    }
  }
}

}  // namespace

void plan_axis(double b0, double b1, int size, int out, ResampleAxis& a) {
  b1 = std::min(b1, static_cast<double>(size));
  b0 = std::clamp(b0, 0.0, b1);
  const double scale = (b1 - b0) / out;
  const double support = std::max(scale, 1.0);  // the triangle's 1, widened when shrinking
  a.out = out;
  a.start.resize(static_cast<std::size_t>(out));
  // First each window, trimmed of its zero weights: start[i] and its width (kept in the
  // weights vector for now), and the widest.
  thread_local std::vector<std::int32_t> widths;
  widths.resize(static_cast<std::size_t>(out));
  int taps = 1;
  for (int i = 0; i < out; ++i) {
    const double center = b0 + (i + 0.5) * scale;
    int lo = std::max(0, static_cast<int>(std::floor(center - support + 0.5)));
    int hi = std::min(size, static_cast<int>(std::floor(center + support + 0.5)));
    while (lo < hi && triangle((lo + 0.5 - center) / support) == 0) ++lo;
    while (hi > lo && triangle((hi - 0.5 - center) / support) == 0) --hi;
    if (lo == hi) {  // no pixel within reach (only for a box at the very edge): the nearest
      lo = std::clamp(static_cast<int>(std::floor(center)), 0, size - 1);
      hi = lo + 1;
    }
    a.start[static_cast<std::size_t>(i)] = lo;
    widths[static_cast<std::size_t>(i)] = hi - lo;
    taps = std::max(taps, hi - lo);
  }
  a.taps = taps;
  a.weights.assign(static_cast<std::size_t>(out) * static_cast<std::size_t>(taps), 0);
  a.lo = size;
  a.hi = 0;
  bool identity = taps == 1;
  double w[64];
  for (int i = 0; i < out; ++i) {
    const double center = b0 + (i + 0.5) * scale;
    const int lo = a.start[static_cast<std::size_t>(i)];
    const int n = widths[static_cast<std::size_t>(i)];
    // Moved inward so that all `taps` pixels lie in the image; its weights shift along.
    const int first = std::min(lo, size - taps);
    std::int16_t* row = a.weights.data() + static_cast<std::ptrdiff_t>(i) * taps + (lo - first);
    double sum = 0;
    for (int k = 0; k < n; ++k) {
      const double v = triangle((lo + k + 0.5 - center) / support);
      if (k < 64) w[k] = v;
      sum += v;
    }
    std::int32_t total = 0;
    int largest = 0;
    for (int k = 0; k < n; ++k) {
      const double v = k < 64 ? w[k] : triangle((lo + k + 0.5 - center) / support);
      const auto q = static_cast<std::int16_t>(std::lround(v / sum * kOne));
      row[k] = q;
      total += q;
      if (q > row[largest]) largest = k;
    }
    // Rounded weights that sum to exactly one: flat areas stay flat, and no sum passes 255.
    row[largest] = static_cast<std::int16_t>(row[largest] + (kOne - total));
    a.start[static_cast<std::size_t>(i)] = first;
    a.lo = std::min(a.lo, first);
    a.hi = std::max(a.hi, first + taps);
    identity = identity && first == a.start[0] + i && row[0] == kOne;
  }
  a.identity = identity;
}

double resample_bytes(double box_x, double box_y, int src_w, int src_h, int out_w, int out_h,
                      int channels) {
  const double tx = taps_bound(box_x, out_w);
  const double ty = taps_bound(box_y, out_h);
  const double span_w = std::min<double>(src_w, box_x + tx);
  const double span_h = std::min<double>(src_h, box_y + ty);
  const double tables = out_w * (4 + 2 * tx) + out_h * (4 + 2 * ty);
  const double between = std::min(out_h * span_w, span_h * out_w) * channels;
  const double sums = std::max(span_w, static_cast<double>(out_w)) * channels * 4;
  return tables + between + sums;
}

void resample(const std::uint8_t* src, std::size_t src_stride, int left, int top, int channels,
              const ResampleAxis& ax, const ResampleAxis& ay, bool flip, std::uint8_t* dst,
              std::size_t dst_stride) {
  const auto c = static_cast<std::size_t>(channels);
  const auto span_w = static_cast<std::size_t>(ax.hi - ax.lo);
  const auto span_h = static_cast<std::size_t>(ay.hi - ay.lo);
  const auto out_w = static_cast<std::size_t>(ax.out);
  const auto out_h = static_cast<std::size_t>(ay.out);
  const std::uint8_t* from = src + static_cast<std::size_t>(ay.lo - top) * src_stride +
                             static_cast<std::size_t>(ax.lo - left) * c;
  if (ax.identity && ay.identity) {
    for (std::size_t y = 0; y < out_h; ++y) {
      std::memcpy(dst + y * dst_stride, from + y * src_stride, out_w * c);
    }
    if (flip) mirror(dst, dst_stride, out_w, out_h, c);
    return;
  }
  if (ax.identity && !flip) {
    // Columns kept as they are: the vertical pass alone, over the window's columns.
    const auto sums = reinterpret_cast<std::int32_t*>(resize_scratch().get(out_w * c * 4));
    vertical_pass(from, src_stride, ay.lo, out_w * c, ay, dst, dst_stride, sums);
    return;
  }
  if (ay.identity) {
    horizontal_pass(from, src_stride, ax.lo, ay.out, channels, ax, flip, dst, dst_stride);
    return;
  }
  // Both axes: the pass that leaves the smaller image between them goes first.
  if (out_h * span_w <= span_h * out_w) {
    const std::size_t row = span_w * c;
    std::uint8_t* mid = resize_scratch().get(out_h * row + row * 4 + 64);
    auto* sums = reinterpret_cast<std::int32_t*>(
        mid + (out_h * row + 63) / 64 * 64);  // 64-byte aligned, after the intermediate
    vertical_pass(from, src_stride, ay.lo, row, ay, mid, row, sums);
    horizontal_pass(mid, row, ax.lo, ay.out, channels, ax, flip, dst, dst_stride);
  } else {
    const std::size_t row = out_w * c;
    std::uint8_t* mid = resize_scratch().get(span_h * row + row * 4 + 64);
    auto* sums = reinterpret_cast<std::int32_t*>(mid + (span_h * row + 63) / 64 * 64);
    horizontal_pass(from, src_stride, ax.lo, static_cast<int>(span_h), channels, ax, flip, mid,
                    row);
    vertical_pass(mid, row, ay.lo, row, ay, dst, dst_stride, sums);
  }
}

}  // namespace ferry::detail::image
