#include "datasets/image/image_resample_avx2.hpp"

#include <atomic>
#include <cstring>

#include "datasets/image/image_internal.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#else
#define FERRY_HAVE_AVX2_KERNELS 0
#endif

namespace ferry::detail::image {

#if FERRY_HAVE_AVX2_KERNELS

namespace {

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> enabled{__builtin_cpu_supports("avx2") != 0};
  return enabled;
}

__attribute__((target("avx2"))) void vertical_rows(const std::uint8_t* const* r,
                                                   const std::int16_t* w, int taps, std::size_t n,
                                                   std::uint8_t* to) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i half = _mm256_set1_epi32(kWeightHalf);
  std::size_t x = 0;
  for (; x + 32 <= n; x += 32) {
    __m256i acc[4] = {half, half, half, half};
    for (int k = 0; k < taps; k += 2) {
      const bool pair = k + 1 < taps;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r[k] + x));
      const __m256i b =
          pair ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r[k + 1] + x)) : zero;
      const auto w0 = static_cast<std::uint16_t>(w[k]);
      const auto w1 = static_cast<std::uint16_t>(pair ? w[k + 1] : 0);
      const __m256i wv = _mm256_set1_epi32(static_cast<int>((std::uint32_t{w1} << 16) | w0));
      // Bytes of a and b interleaved, then widened: (a_j, b_j) pairs of i16.
      const __m256i lo = _mm256_unpacklo_epi8(a, b);
      const __m256i hi = _mm256_unpackhi_epi8(a, b);
      acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(_mm256_unpacklo_epi8(lo, zero), wv));
      acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(_mm256_unpackhi_epi8(lo, zero), wv));
      acc[2] = _mm256_add_epi32(acc[2], _mm256_madd_epi16(_mm256_unpacklo_epi8(hi, zero), wv));
      acc[3] = _mm256_add_epi32(acc[3], _mm256_madd_epi16(_mm256_unpackhi_epi8(hi, zero), wv));
    }
    // The packs undo the unpacks lane by lane: the bytes come out in their order.
    const __m256i s01 = _mm256_packs_epi32(_mm256_srai_epi32(acc[0], kWeightBits),
                                           _mm256_srai_epi32(acc[1], kWeightBits));
    const __m256i s23 = _mm256_packs_epi32(_mm256_srai_epi32(acc[2], kWeightBits),
                                           _mm256_srai_epi32(acc[3], kWeightBits));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(to + x), _mm256_packus_epi16(s01, s23));
  }
  for (; x < n; ++x) {
    std::int32_t sum = kWeightHalf;
    for (int k = 0; k < taps; ++k) sum += w[k] * static_cast<std::int16_t>(r[k][x]);
    to[x] = static_cast<std::uint8_t>(sum >> kWeightBits);
  }
}

// Four rows of four 32-bit pixels turned into four columns: r[k] holds row k; after, r[j] holds
// what was column j.
__attribute__((target("avx2"))) inline void transpose4(__m128i (&r)[4]) {
  const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]);  // a0 b0 a1 b1
  const __m128i t1 = _mm_unpacklo_epi32(r[2], r[3]);  // c0 d0 c1 d1
  const __m128i t2 = _mm_unpackhi_epi32(r[0], r[1]);  // a2 b2 a3 b3
  const __m128i t3 = _mm_unpackhi_epi32(r[2], r[3]);  // c2 d2 c3 d3
  r[0] = _mm_unpacklo_epi64(t0, t1);
  r[1] = _mm_unpackhi_epi64(t0, t1);
  r[2] = _mm_unpacklo_epi64(t2, t3);
  r[3] = _mm_unpackhi_epi64(t2, t3);
}

__attribute__((target("avx2"))) inline __m128i load4(const std::uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// Four pixels of `In` bytes (4, or RGB's 3) as four 4-byte pixels: RGB gets a fourth byte of 0.
// Reads exactly 4 × In bytes.
template <int In>
__attribute__((target("avx2"))) inline __m128i load_pixels(const std::uint8_t* p) {
  if constexpr (In == 4) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  } else {
    std::uint32_t last = 0;
    std::memcpy(&last, p + 8, 4);
    const __m128i twelve = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)),
                                              _mm_cvtsi32_si128(static_cast<int>(last)));
    const __m128i spread = _mm_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1);
    return _mm_shuffle_epi8(twelve, spread);
  }
}

// One pixel of `In` bytes as 4.
template <int In>
void copy_pixel(std::uint8_t* to, const std::uint8_t* from) {
  std::memcpy(to, from, In);
  if constexpr (In == 3) to[3] = 0;
}

// dst[x][y] = src[y][x] for y < rows, x < cols: src's pixels of `In` bytes, dst's of 4.
template <int In>
__attribute__((target("avx2"))) void transpose_in(const std::uint8_t* src, std::size_t src_stride,
                                                  int rows, int cols, std::uint8_t* dst,
                                                  std::size_t dst_stride) {
  const auto from = [&](int y, int x) {
    return src + static_cast<std::size_t>(y) * src_stride + static_cast<std::size_t>(x) * In;
  };
  const auto to = [&](int x, int y) {
    return dst + static_cast<std::size_t>(x) * dst_stride + static_cast<std::size_t>(y) * 4;
  };
  int y = 0;
  for (; y + 4 <= rows; y += 4) {
    int x = 0;
    for (; x + 4 <= cols; x += 4) {
      __m128i r[4] = {load_pixels<In>(from(y, x)), load_pixels<In>(from(y + 1, x)),
                      load_pixels<In>(from(y + 2, x)), load_pixels<In>(from(y + 3, x))};
      transpose4(r);
      for (int j = 0; j < 4; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(to(x + j, y)), r[j]);
    }
    for (; x < cols; ++x) {
      for (int k = 0; k < 4; ++k) copy_pixel<In>(to(x, y + k), from(y + k, x));
    }
  }
  for (; y < rows; ++y) {
    for (int x = 0; x < cols; ++x) copy_pixel<In>(to(x, y), from(y, x));
  }
}

// dst[y][x'] = src[x][y] for x < cols (src's rows), y < rows, where x' is x, or cols - 1 - x
// when `flip`; the 4-byte pixels written as `Out` bytes (RGBX to RGB: the fourth dropped).
template <int Out>
__attribute__((target("avx2"))) void transpose_out(const std::uint8_t* src, std::size_t src_stride,
                                                   int cols, int rows, bool flip, std::uint8_t* dst,
                                                   std::size_t dst_stride) {
  const __m128i rgb = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  const auto from = [&](int x, int y) {
    return src + static_cast<std::size_t>(x) * src_stride + static_cast<std::size_t>(y) * 4;
  };
  const auto to = [&](int y, int x) {
    return dst + static_cast<std::size_t>(y) * dst_stride + static_cast<std::size_t>(x) * Out;
  };
  const auto put = [&](int y, int x, const std::uint8_t* px) {
    std::memcpy(to(y, flip ? cols - 1 - x : x), px, Out);
  };
  int x = 0;
  for (; x + 4 <= cols; x += 4) {
    int y = 0;
    for (; y + 4 <= rows; y += 4) {
      __m128i r[4] = {load4(from(x, y)), load4(from(x + 1, y)), load4(from(x + 2, y)),
                      load4(from(x + 3, y))};
      transpose4(r);  // r[j]: row y + j, pixels x .. x + 3
      const int col = flip ? cols - 4 - x : x;
      for (int j = 0; j < 4; ++j) {
        __m128i v = flip ? _mm_shuffle_epi32(r[j], 0x1B) : r[j];  // the four pixels reversed
        std::uint8_t* o = to(y + j, col);
        if constexpr (Out == 4) {
          _mm_storeu_si128(reinterpret_cast<__m128i*>(o), v);
        } else {
          v = _mm_shuffle_epi8(v, rgb);
          _mm_storel_epi64(reinterpret_cast<__m128i*>(o), v);
          const auto last = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_srli_si128(v, 8)));
          std::memcpy(o + 8, &last, 4);
        }
      }
    }
    for (; y < rows; ++y) {
      for (int k = 0; k < 4; ++k) put(y, x + k, from(x + k, y));
    }
  }
  for (; x < cols; ++x) {
    for (int y = 0; y < rows; ++y) put(y, x, from(x, y));
  }
}

}  // namespace

bool resample_avx2_usable() noexcept { return enabled_flag().load(std::memory_order_relaxed); }

bool set_resample_avx2(bool enabled) noexcept {
  const bool can = __builtin_cpu_supports("avx2") != 0;
  return enabled_flag().exchange(enabled && can);
}

void horizontal_avx2(const std::uint8_t* src, std::size_t src_stride, int left, int rows,
                     int in_channels, const ResampleAxis& ax, bool flip, int out_channels,
                     std::uint8_t* dst, std::size_t dst_stride) {
  // The columns turned into rows, the vertical kernel over them, and the result turned back.
  const int cols = ax.hi - left;
  const std::size_t stride = (static_cast<std::size_t>(rows) + 3) / 4 * 16;  // 16-byte rows
  std::uint8_t* across = transpose_scratch().get(
      (static_cast<std::size_t>(cols) + static_cast<std::size_t>(ax.out)) * stride);
  std::uint8_t* summed = across + static_cast<std::size_t>(cols) * stride;
  if (in_channels == 4) {
    transpose_in<4>(src, src_stride, rows, cols, across, stride);
  } else {
    transpose_in<3>(src, src_stride, rows, cols, across, stride);
  }
  vertical_avx2(across, stride, left, static_cast<std::size_t>(rows) * 4, ax, summed, stride);
  if (out_channels == 4) {
    transpose_out<4>(summed, stride, ax.out, rows, flip, dst, dst_stride);
  } else {
    transpose_out<3>(summed, stride, ax.out, rows, flip, dst, dst_stride);
  }
}

void vertical_avx2(const std::uint8_t* src, std::size_t src_stride, int top, std::size_t n,
                   const ResampleAxis& ay, std::uint8_t* dst, std::size_t dst_stride) {
  const int taps = ay.taps;
  for (int i = 0; i < ay.out; ++i) {
    const std::int16_t* w = ay.weights.data() + static_cast<std::ptrdiff_t>(i) * taps;
    const std::uint8_t* base =
        src + static_cast<std::size_t>(ay.start[static_cast<std::size_t>(i)] - top) * src_stride;
    // Taps of zero weight (a narrower window's padding) are left out.
    const std::uint8_t* rows[kResampleAvx2MaxTaps];
    std::int16_t weights[kResampleAvx2MaxTaps];
    int used = 0;
    for (int k = 0; k < taps && used < kResampleAvx2MaxTaps; ++k) {
      if (w[k] == 0) continue;
      rows[used] = base + static_cast<std::size_t>(k) * src_stride;
      weights[used] = w[k];
      ++used;
    }
    vertical_rows(rows, weights, used, n, dst + static_cast<std::size_t>(i) * dst_stride);
  }
}

#else  // no AVX2 kernels in this build

bool resample_avx2_usable() noexcept { return false; }
bool set_resample_avx2(bool) noexcept { return false; }
void horizontal_avx2(const std::uint8_t*, std::size_t, int, int, int, const ResampleAxis&, bool,
                     int, std::uint8_t*, std::size_t) {}
void vertical_avx2(const std::uint8_t*, std::size_t, int, std::size_t, const ResampleAxis&,
                   std::uint8_t*, std::size_t) {}

#endif

}  // namespace ferry::detail::image
