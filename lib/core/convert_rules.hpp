#pragma once

// The element conversion rules of ferry::convert, written once for both compilers: dtype.cpp
// runs them on the CPU, copy/cuda/kernels.cu on the GPU, so both give the same bits.
// See ferry::convert (include/ferry/dtype.hpp) for the rules themselves.

#include <math.h>  // NOLINT(modernize-deprecated-headers): the global C functions work in device code too

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ferry/dtype.hpp"

#if defined(__CUDACC__)
#define FERRY_HD __host__ __device__
#else
#define FERRY_HD
#endif

namespace ferry::detail::rules {

/// Rounds a >= 0 (finite) to a binary format with `mantissa_bits` stored bits and exponent
/// `bias`, ties to even, and gives the magnitude bits. Every step is exact in double
/// (scaling by powers of two, m - 1 for m in [1, 2)), so nearbyint (ties to even) is the one
/// rounding.
FERRY_HD inline std::uint32_t round_magnitude(double a, int mantissa_bits, int bias) {
  const int min_exponent = 1 - bias;  // of the smallest normal
  const std::uint32_t inf_bits = static_cast<std::uint32_t>(2 * bias + 1) << mantissa_bits;
  if (a == 0.0) return 0;
  int e = 0;
  const double m = ::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  e -= 1;                           // a = (2m) * 2^e, 2m in [1, 2)
  if (e < min_exponent) {
    // Subnormal: units of 2^(min_exponent - mantissa_bits); rounding up to the smallest
    // normal gives its bits naturally.
    return static_cast<std::uint32_t>(::nearbyint(::ldexp(a, mantissa_bits - min_exponent)));
  }
  double q = ::nearbyint(::ldexp(2.0 * m - 1.0, mantissa_bits));
  if (q == ::ldexp(1.0, mantissa_bits)) {
    q = 0;
    e += 1;
  }
  if (e > bias) return inf_bits;
  return (static_cast<std::uint32_t>(e + bias) << mantissa_bits) | static_cast<std::uint32_t>(q);
}

FERRY_HD inline std::uint16_t half_bits(double v) {
  const std::uint16_t sign = ::signbit(v) ? 0x8000 : 0;
  if (::isnan(v)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (::isinf(v)) return static_cast<std::uint16_t>(sign | 0x7c00);
  return static_cast<std::uint16_t>(sign | round_magnitude(::fabs(v), 10, 15));
}

FERRY_HD inline std::uint16_t bfloat16_bits(double v) {
  const std::uint16_t sign = ::signbit(v) ? 0x8000 : 0;
  if (::isnan(v)) return static_cast<std::uint16_t>(sign | 0x7fc0);
  if (::isinf(v)) return static_cast<std::uint16_t>(sign | 0x7f80);
  return static_cast<std::uint16_t>(sign | round_magnitude(::fabs(v), 7, 127));
}

/// f32 (finite or infinite, not NaN) to half bits in integer arithmetic: the same result as
/// half_bits(double(f)), about ten times faster. Used on the per-element paths.
FERRY_HD inline std::uint16_t half_bits_of_float(std::uint32_t x) {
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  const std::uint32_t e = x >> 23;
  if (e <= 101) return sign;  // below 2^-25: rounds to zero
  const std::uint32_t m = (x & 0x7fffffu) | 0x800000u;
  std::uint32_t shift = 13;  // normal: keep the top 10 of 23 mantissa bits
  std::uint32_t q = 0;
  if (e < 113) {  // below 2^-14: a subnormal half, units of 2^-24
    shift = 126 - e;
    q = m >> shift;
  } else {
    q = ((e - 112) << 10) | ((x & 0x7fffffu) >> 13);
  }
  const std::uint32_t rest = m & ((1u << shift) - 1);
  const std::uint32_t half_ulp = 1u << (shift - 1);
  if (rest > half_ulp || (rest == half_ulp && (q & 1u) != 0))
    ++q;  // a carry may reach the exponent
  return static_cast<std::uint16_t>(sign | q);
}

/// f32 (not NaN) to bfloat16 bits: round the low 16 bits away, ties to even.
FERRY_HD inline std::uint16_t bfloat16_bits_of_float(std::uint32_t x) {
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

FERRY_HD inline float half_to_float(std::uint16_t bits) {
  const std::uint32_t exp = (bits >> 10) & 0x1fu;
  const std::uint32_t man = bits & 0x3ffu;
  float mag = 0;
  if (exp == 0x1f) {
    mag =
        man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    mag = ::ldexpf(static_cast<float>(man), -24);
  } else {
    mag = ::ldexpf(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  return (bits & 0x8000u) ? -mag : mag;
}

FERRY_HD inline float bfloat16_to_float(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <class Int>
FERRY_HD Int float_to_int(double v) {
  if (::isnan(v)) return 0;
  const double t = ::trunc(v);
  // Both limits as exact doubles: min is -2^k (or 0); max + 1 is 2^k, and max as a double is
  // either exact (then + 1 is exact too) or already rounded up to 2^k (then + 1 vanishes).
  constexpr double lo = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double hi_plus_one = static_cast<double>(std::numeric_limits<Int>::max()) + 1.0;
  if (t < lo) return std::numeric_limits<Int>::min();
  if (t >= hi_plus_one) return std::numeric_limits<Int>::max();
  return static_cast<Int>(t);
}

/// The value of one element as double; exact except i64 beyond 2^53 (see convert_one).
template <class S>
FERRY_HD double as_double(S v) {
  if constexpr (std::is_same_v<S, Half>) {
    return static_cast<double>(half_to_float(v.bits));
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return static_cast<double>(bfloat16_to_float(v.bits));
  } else {
    return static_cast<double>(v);
  }
}

/// i64 to bfloat16 with one rounding: round the integer to 8 significant bits first, as going
/// through double would round twice for |v| > 2^53.
FERRY_HD inline std::uint16_t bfloat16_bits_of_i64(std::int64_t v) {
  const bool neg = v < 0;
  std::uint64_t u = neg ? ~static_cast<std::uint64_t>(v) + 1 : static_cast<std::uint64_t>(v);
  int drop = 0;
  while ((u >> drop) >= (std::uint64_t{1} << 8)) ++drop;
  if (drop > 0) {
    const std::uint64_t half_ulp = std::uint64_t{1} << (drop - 1);
    const std::uint64_t rest = u & ((std::uint64_t{1} << drop) - 1);
    u >>= drop;
    if (rest > half_ulp || (rest == half_ulp && (u & 1u) != 0)) u += 1;
  }
  const double mag = ::ldexp(static_cast<double>(u), drop);  // exact: u has at most 9 bits
  return bfloat16_bits(neg ? -mag : mag);
}

/// Whether a floating value is NaN, and its sign, read from its bits: hardware conversions of
/// NaN differ (x86 keeps sign and payload, GPUs give one canonical NaN), so NaN never goes
/// through them.
struct NanInfo {
  bool nan = false;
  bool negative = false;
};

template <class S>
FERRY_HD NanInfo nan_info(S v) {
  if constexpr (std::is_same_v<S, Half>) {
    return {(v.bits & 0x7c00u) == 0x7c00u && (v.bits & 0x03ffu) != 0, (v.bits & 0x8000u) != 0};
  } else if constexpr (std::is_same_v<S, BFloat16>) {
    return {(v.bits & 0x7f80u) == 0x7f80u && (v.bits & 0x007fu) != 0, (v.bits & 0x8000u) != 0};
  } else if constexpr (std::is_same_v<S, float>) {
    std::uint32_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    return {(u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0, (u >> 31) != 0};
  } else if constexpr (std::is_same_v<S, double>) {
    std::uint64_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    return {(u & 0x7ff0000000000000u) == 0x7ff0000000000000u && (u & 0x000fffffffffffffu) != 0,
            (u >> 63) != 0};
  } else {
    return {};
  }
}

/// The NaN every conversion gives: quiet, sign kept, no payload; 0 for integers.
template <class D>
FERRY_HD D canonical_nan(bool negative) {
  if constexpr (std::is_same_v<D, Half>) {
    return Half{static_cast<std::uint16_t>(negative ? 0xfe00u : 0x7e00u)};
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    return BFloat16{static_cast<std::uint16_t>(negative ? 0xffc0u : 0x7fc0u)};
  } else if constexpr (std::is_same_v<D, float>) {
    const std::uint32_t u = negative ? 0xffc00000u : 0x7fc00000u;
    float f = 0;
    std::memcpy(&f, &u, sizeof f);
    return f;
  } else if constexpr (std::is_same_v<D, double>) {
    const std::uint64_t u = negative ? 0xfff8000000000000u : 0x7ff8000000000000u;
    double d = 0;
    std::memcpy(&d, &u, sizeof d);
    return d;
  } else {
    return D{0};
  }
}

template <class S, class D>
FERRY_HD D convert_one(S v) {
  if constexpr (!std::is_same_v<S, D> && !std::is_integral_v<S>) {
    const NanInfo n = nan_info(v);
    if (n.nan) return canonical_nan<D>(n.negative);
  }
  // Two branches share a body on purpose: the cases differ in why one rounding suffices.
  if constexpr (std::is_same_v<S, D>) {
    return v;
  } else if constexpr (std::is_integral_v<S> &&
                       std::is_integral_v<D>) {  // NOLINT(bugprone-branch-clone)
    return static_cast<D>(v);                    // modulo 2^bits, as C++20
  } else if constexpr (std::is_integral_v<D>) {
    return float_to_int<D>(as_double(v));
  } else if constexpr (std::is_same_v<D, Half>) {
    if constexpr (std::is_same_v<S, float>) {
      std::uint32_t u = 0;
      std::memcpy(&u, &v, sizeof u);
      return Half{half_bits_of_float(u)};  // NaN was handled above
    } else {
      // i64 beyond 2^53 is far beyond half's range: infinity whatever double rounding did.
      return Half{half_bits(as_double(v))};
    }
  } else if constexpr (std::is_same_v<D, BFloat16>) {
    if constexpr (std::is_same_v<S, float>) {
      std::uint32_t u = 0;
      std::memcpy(&u, &v, sizeof u);
      return BFloat16{bfloat16_bits_of_float(u)};
    } else if constexpr (std::is_same_v<S, std::int64_t>) {
      return BFloat16{bfloat16_bits_of_i64(v)};
    } else if constexpr (std::is_same_v<S, std::uint64_t>) {
      // Beyond i64: halve with the lost bit kept as a sticky bit (rounding sees it), then
      // double the result, exactly.
      if (v >> 63 == 0) return BFloat16{bfloat16_bits_of_i64(static_cast<std::int64_t>(v))};
      const auto half = static_cast<std::int64_t>((v >> 1) | (v & 1));
      return BFloat16{bfloat16_bits(2.0 * bfloat16_to_float(bfloat16_bits_of_i64(half)))};
    } else {
      return BFloat16{bfloat16_bits(as_double(v))};
    }
  } else if constexpr (std::is_same_v<S, std::int64_t> || std::is_same_v<S, std::uint64_t>) {
    return static_cast<D>(v);  // one rounding to nearest even, to f32 or f64
  } else {
    return static_cast<D>(as_double(v));  // exact, or one rounding of a double to f32
  }
}

}  // namespace ferry::detail::rules
