#include "datasets/image/image_resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "datasets/image/image_internal.hpp"
#include "datasets/image/image_resample_avx2.hpp"

// The passes are compiled twice, for x86-64's baseline (SSE2) and for AVX2, and the loader
// picks one by the CPU (GCC's function multiversioning); elsewhere once.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define FERRY_RESAMPLE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define FERRY_RESAMPLE_CLONES
#endif

namespace ferry::detail::image {
namespace {

constexpr std::int32_t kOne = 1 << kWeightBits;

// The bilinear filter: a triangle of support 1.
double triangle(double x) {
  x = std::abs(x);
  return x < 1 ? 1 - x : 0;
}

// Taps a window can have for a box of `box` source pixels onto `out`: 2 × support, rounded
// up, plus one for the window's rounding.
double taps_bound(double box, int out) { return 2 * std::ceil(std::max(1.0, box / out)) + 1; }

// Per output pixel of a horizontal pass: `In` channels, each the weighted sum of ax.taps source
// pixels (`Taps` of them when it is not 0: the loops then unroll and the sums stay in
// registers), of which the first `Out` are written (4 to 3: RGBX, whose four lanes GCC
// computes as one vector, to RGB). Writes ax.out pixels of each of `rows` rows.
template <int In, int Out, int Taps>
FERRY_RESAMPLE_CLONES void horizontal(const std::uint8_t* src, std::size_t src_stride, int left,
                                      int rows, const ResampleAxis& ax, bool flip,
                                      std::uint8_t* dst, std::size_t dst_stride) {
  const int taps = Taps != 0 ? Taps : ax.taps;
  const int out = ax.out;
  const std::int32_t* start = ax.start.data();
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* row = src + static_cast<std::size_t>(y) * src_stride;
    std::uint8_t* to = dst + static_cast<std::size_t>(y) * dst_stride;
    const std::int16_t* w = ax.weights.data();
    for (int i = 0; i < out; ++i, w += taps) {
      const std::uint8_t* p = row + static_cast<std::ptrdiff_t>(start[i] - left) * In;
      std::uint8_t* o = to + static_cast<std::ptrdiff_t>(flip ? out - 1 - i : i) * Out;
      if constexpr (In == 4) {
        // A pixel's four lanes as one vector (GCC's generic vectors: SSE2 or AVX2 code).
        using V4 = std::int32_t __attribute__((vector_size(16)));
        V4 sum = {kWeightHalf, kWeightHalf, kWeightHalf, kWeightHalf};
        for (int k = 0; k < taps; ++k) {
          const std::uint8_t* q = p + static_cast<std::ptrdiff_t>(k) * 4;
          const V4 px = {q[0], q[1], q[2], q[3]};
          sum += px * static_cast<std::int32_t>(w[k]);
        }
        sum >>= kWeightBits;
        for (int c = 0; c < Out; ++c) o[c] = static_cast<std::uint8_t>(sum[c]);
        continue;
      }
      std::int32_t acc[static_cast<std::size_t>(In)];
      for (int c = 0; c < In; ++c) acc[c] = kWeightHalf;
      for (int k = 0; k < taps; ++k) {
        const std::int32_t wk = w[k];
        for (int c = 0; c < In; ++c) acc[c] += wk * p[k * In + c];
      }
      // Weights are non-negative and sum to kOne: the result is within 0 .. 255.
      for (int c = 0; c < Out; ++c) o[c] = static_cast<std::uint8_t>(acc[c] >> kWeightBits);
    }
  }
}

template <int In, int Out>
void horizontal_taps(const std::uint8_t* src, std::size_t src_stride, int left, int rows,
                     const ResampleAxis& ax, bool flip, std::uint8_t* dst, std::size_t dst_stride) {
  using Pass = void (*)(const std::uint8_t*, std::size_t, int, int, const ResampleAxis&, bool,
                        std::uint8_t*, std::size_t);
  // Downscales of up to about 3.5 times (ImageNet's 500 × 375 to 256 takes 4 taps).
  static constexpr Pass kByTaps[] = {
      horizontal<In, Out, 0>, horizontal<In, Out, 1>, horizontal<In, Out, 2>,
      horizontal<In, Out, 3>, horizontal<In, Out, 4>, horizontal<In, Out, 5>,
      horizontal<In, Out, 6>, horizontal<In, Out, 7>, horizontal<In, Out, 8>};
  const int taps = ax.taps < 9 ? ax.taps : 0;
  kByTaps[taps](src, src_stride, left, rows, ax, flip, dst, dst_stride);
}

// `in` channels to `channels` (the same, or 4 to 3).
void horizontal_pass(const std::uint8_t* src, std::size_t src_stride, int left, int rows, int in,
                     int channels, const ResampleAxis& ax, bool flip, std::uint8_t* dst,
                     std::size_t dst_stride) {
  if ((in == 4 || in == 3) && (channels == 3 || channels == 4) && ax.taps <= kResampleAvx2MaxTaps &&
      resample_avx2_usable()) {
    horizontal_avx2(src, src_stride, left, rows, in, ax, flip, channels, dst, dst_stride);
    return;
  }
  if (in == 4 && channels == 3) {
    horizontal_taps<4, 3>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
    return;
  }
  switch (channels) {
    case 1:
      horizontal_taps<1, 1>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
    case 3:
      horizontal_taps<3, 3>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
    default:
      horizontal_taps<4, 4>(src, src_stride, left, rows, ax, flip, dst, dst_stride);
      break;
  }
}

// out[x] = sum over k of w[k] × rows[k][x], rounded, for n bytes: whole rows at a time, so the
// loops run over contiguous bytes (GCC vectorizes them: u8 widened, i16 weights, i32 sums).
// The same for `Taps` taps known when compiling: one pass over each output row, its sums kept
// in registers (no accumulator row).
template <int Taps>
FERRY_RESAMPLE_CLONES void vertical_fixed(const std::uint8_t* src, std::size_t src_stride, int top,
                                          std::size_t n, const ResampleAxis& ay, std::uint8_t* dst,
                                          std::size_t dst_stride) {
  for (int i = 0; i < ay.out; ++i) {
    const std::int16_t* w = ay.weights.data() + static_cast<std::ptrdiff_t>(i) * Taps;
    const std::uint8_t* base =
        src + static_cast<std::size_t>(ay.start[static_cast<std::size_t>(i)] - top) * src_stride;
    const std::uint8_t* r[static_cast<std::size_t>(Taps)];
    std::int16_t wk[static_cast<std::size_t>(Taps)];
    for (int k = 0; k < Taps; ++k) {
      r[k] = base + static_cast<std::size_t>(k) * src_stride;
      wk[k] = w[k];
    }
    std::uint8_t* __restrict to = dst + static_cast<std::size_t>(i) * dst_stride;
    for (std::size_t x = 0; x < n; ++x) {
      std::int32_t sum = kWeightHalf;
      for (int k = 0; k < Taps; ++k) sum += wk[k] * static_cast<std::int16_t>(r[k][x]);
      to[x] = static_cast<std::uint8_t>(sum >> kWeightBits);
    }
  }
}

FERRY_RESAMPLE_CLONES void vertical_any(const std::uint8_t* src, std::size_t src_stride, int top,
                                        std::size_t n, const ResampleAxis& ay, std::uint8_t* dst,
                                        std::size_t dst_stride, std::int32_t* __restrict acc) {
  const int taps = ay.taps;
  for (int i = 0; i < ay.out; ++i) {
    const std::int16_t* w = ay.weights.data() + static_cast<std::ptrdiff_t>(i) * taps;
    const std::uint8_t* base =
        src + static_cast<std::size_t>(ay.start[static_cast<std::size_t>(i)] - top) * src_stride;
    for (std::size_t x = 0; x < n; ++x) acc[x] = kWeightHalf;
    int k = 0;
    for (; k + 1 < taps; k += 2) {
      // i16 weights times u8 widened to i16: products GCC computes with 16-bit multiplies.
      const std::int16_t w0 = w[k];
      const std::int16_t w1 = w[k + 1];
      if ((w0 | w1) == 0) continue;  // padding of a narrower window
      const std::uint8_t* __restrict r0 = base + static_cast<std::size_t>(k) * src_stride;
      const std::uint8_t* __restrict r1 = r0 + src_stride;
      for (std::size_t x = 0; x < n; ++x) {
        acc[x] += w0 * static_cast<std::int16_t>(r0[x]) + w1 * static_cast<std::int16_t>(r1[x]);
      }
    }
    if (k < taps && w[k] != 0) {
      const std::int16_t w0 = w[k];
      const std::uint8_t* __restrict r0 = base + static_cast<std::size_t>(k) * src_stride;
      for (std::size_t x = 0; x < n; ++x) acc[x] += w0 * static_cast<std::int16_t>(r0[x]);
    }
    std::uint8_t* __restrict to = dst + static_cast<std::size_t>(i) * dst_stride;
    for (std::size_t x = 0; x < n; ++x) to[x] = static_cast<std::uint8_t>(acc[x] >> kWeightBits);
  }
}

void vertical_pass(const std::uint8_t* src, std::size_t src_stride, int top, std::size_t n,
                   const ResampleAxis& ay, std::uint8_t* dst, std::size_t dst_stride,
                   std::int32_t* acc) {
  if (ay.taps <= kResampleAvx2MaxTaps && resample_avx2_usable()) {
    return vertical_avx2(src, src_stride, top, n, ay, dst, dst_stride);
  }
  switch (ay.taps) {
    case 2:
      return vertical_fixed<2>(src, src_stride, top, n, ay, dst, dst_stride);
    case 3:
      return vertical_fixed<3>(src, src_stride, top, n, ay, dst, dst_stride);
    case 4:
      return vertical_fixed<4>(src, src_stride, top, n, ay, dst, dst_stride);
    case 5:
      return vertical_fixed<5>(src, src_stride, top, n, ay, dst, dst_stride);
    case 6:
      return vertical_fixed<6>(src, src_stride, top, n, ay, dst, dst_stride);
    default:
      return vertical_any(src, src_stride, top, n, ay, dst, dst_stride, acc);
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

double resample_bytes(double box_x, double box_y, int src_w, int out_w, int out_h, int channels) {
  const double tx = taps_bound(box_x, out_w);
  const double ty = taps_bound(box_y, out_h);
  const double span_w = std::min<double>(src_w, box_x + tx);
  const double tables = out_w * (4 + 2 * tx) + out_h * (4 + 2 * ty);
  const double sums = std::max(span_w, static_cast<double>(out_w)) * std::max(channels, 4) * 4;
  return tables + sums;
}

// Whether the vertical pass goes first: the horizontal pass (a few taps per output pixel, the
// costlier) then runs over the output's rows only. Unless the image between the passes would be
// over twice as large as the other order's.
bool vertical_first(const ResampleAxis& ax, const ResampleAxis& ay) {
  const auto span_w = static_cast<std::size_t>(ax.hi - ax.lo);
  const auto span_h = static_cast<std::size_t>(ay.hi - ay.lo);
  return static_cast<std::size_t>(ay.out) * span_w <= 2 * span_h * static_cast<std::size_t>(ax.out);
}

bool packs_rgbx(const ResampleAxis& ax, const ResampleAxis& ay) {
  if (ax.identity) return false;
  return ay.identity || vertical_first(ax, ay);  // the horizontal pass comes last
}

void resample(const std::uint8_t* src, std::size_t src_stride, int left, int top, int in,
              int channels, const ResampleAxis& ax, const ResampleAxis& ay, bool flip,
              std::uint8_t* dst, std::size_t dst_stride) {
  const auto c = static_cast<std::size_t>(channels);
  const auto ci = static_cast<std::size_t>(in);
  const auto span_w = static_cast<std::size_t>(ax.hi - ax.lo);
  const auto span_h = static_cast<std::size_t>(ay.hi - ay.lo);
  const auto out_w = static_cast<std::size_t>(ax.out);
  const auto out_h = static_cast<std::size_t>(ay.out);
  const std::uint8_t* from = src + static_cast<std::size_t>(ay.lo - top) * src_stride +
                             static_cast<std::size_t>(ax.lo - left) * ci;
  if (ax.identity && ay.identity && in == channels) {
    for (std::size_t y = 0; y < out_h; ++y) {
      std::memcpy(dst + y * dst_stride, from + y * src_stride, out_w * c);
    }
    if (flip) mirror(dst, dst_stride, out_w, out_h, c);
    return;
  }
  if (ax.identity && !flip && in == channels) {
    // Columns kept as they are: the vertical pass alone, over the window's columns.
    const auto sums = reinterpret_cast<std::int32_t*>(resize_scratch().get(out_w * c * 4));
    vertical_pass(from, src_stride, ay.lo, out_w * c, ay, dst, dst_stride, sums);
    return;
  }
  if (ay.identity) {
    horizontal_pass(from, src_stride, ax.lo, ay.out, in, channels, ax, flip, dst, dst_stride);
    return;
  }
  // Both axes: the vertical pass first, unless that leaves over twice the image between them
  // (RGBX is only given where it goes first).
  if (in != channels || vertical_first(ax, ay)) {
    const std::size_t row = span_w * ci;
    std::uint8_t* mid = resize_scratch().get(out_h * row + row * 4 + 64);
    auto* sums = reinterpret_cast<std::int32_t*>(
        mid + (out_h * row + 63) / 64 * 64);  // 64-byte aligned, after the intermediate
    vertical_pass(from, src_stride, ay.lo, row, ay, mid, row, sums);
    horizontal_pass(mid, row, ax.lo, ay.out, in, channels, ax, flip, dst, dst_stride);
  } else {
    const std::size_t row = out_w * c;
    std::uint8_t* mid = resize_scratch().get(span_h * row + row * 4 + 64);
    auto* sums = reinterpret_cast<std::int32_t*>(mid + (span_h * row + 63) / 64 * 64);
    horizontal_pass(from, src_stride, ax.lo, static_cast<int>(span_h), in, channels, ax, flip, mid,
                    row);
    vertical_pass(mid, row, ay.lo, row, ay, dst, dst_stride, sums);
  }
}

}  // namespace ferry::detail::image
