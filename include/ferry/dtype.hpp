#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "ferry/export.hpp"

namespace ferry {

/// Element types of a tensor.
/// i8, i16 and u64 came later: they follow the first nine, whose values stay as they were.
enum class DType { u8, u16, u32, i32, i64, f16, bf16, f32, f64, i8, i16, u64 };

/// Bytes per element.
constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::u8:
    case DType::i8:
      return 1;
    case DType::u16:
    case DType::i16:
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::u32:
    case DType::i32:
    case DType::f32:
      return 4;
    case DType::i64:
    case DType::u64:
    case DType::f64:
      return 8;
  }
  return 0;
}

/// "u8", "u16", "u32", "i32", "i64", "f16", "bf16", "f32", "f64", "i8", "i16", "u64".
FERRY_API std::string_view dtype_name(DType t) noexcept;
/// The inverse of dtype_name; also accepts PyTorch's and NumPy's names ("uint8", "uint16",
/// "float32", "half", ...).
/// \throws ConfigError quoting the text.
FERRY_API DType parse_dtype(std::string_view text);
/// True for f16, bf16, f32, f64.
constexpr bool is_floating(DType t) noexcept {
  return t == DType::f16 || t == DType::bf16 || t == DType::f32 || t == DType::f64;
}

/// IEEE 754 binary16, stored as its bits.
struct Half {
  std::uint16_t bits = 0;
  friend bool operator==(Half, Half) = default;
};
/// bfloat16 (the top half of a binary32), stored as its bits.
struct BFloat16 {
  std::uint16_t bits = 0;
  friend bool operator==(BFloat16, BFloat16) = default;
};

/// Rounds to the nearest binary16, ties to even; overflow gives infinity, NaN stays NaN
/// (quiet, sign kept). Rounds once from the double, so no double rounding.
FERRY_API Half to_half(double value) noexcept;
/// Rounds to the nearest bfloat16, ties to even; overflow gives infinity, NaN stays NaN.
FERRY_API BFloat16 to_bfloat16(double value) noexcept;
/// Exact.
FERRY_API float to_float(Half value) noexcept;
/// Exact.
FERRY_API float to_float(BFloat16 value) noexcept;

/// The DType of a C++ element type: dtype_of<float>() == DType::f32.
template <class T>
constexpr DType dtype_of() noexcept;
template <>
constexpr DType dtype_of<std::uint8_t>() noexcept {
  return DType::u8;
}
template <>
constexpr DType dtype_of<std::uint16_t>() noexcept {
  return DType::u16;
}
template <>
constexpr DType dtype_of<std::uint32_t>() noexcept {
  return DType::u32;
}
template <>
constexpr DType dtype_of<std::int32_t>() noexcept {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::int64_t>() noexcept {
  return DType::i64;
}
template <>
constexpr DType dtype_of<std::int8_t>() noexcept {
  return DType::i8;
}
template <>
constexpr DType dtype_of<std::int16_t>() noexcept {
  return DType::i16;
}
template <>
constexpr DType dtype_of<std::uint64_t>() noexcept {
  return DType::u64;
}
template <>
constexpr DType dtype_of<Half>() noexcept {
  return DType::f16;
}
template <>
constexpr DType dtype_of<BFloat16>() noexcept {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<float>() noexcept {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() noexcept {
  return DType::f64;
}

/// Converts `count` host elements from `from` to `to`. The rules, the same on every device:
/// * to f16/bf16/f32 from a wider type: round to nearest, ties to even; infinity kept; finite
///   values beyond the range become infinity.
/// * NaN to any floating type: the quiet NaN of that type with the same sign (payloads are not
///   kept, so every device gives the same bits).
/// * floating to integer: truncate toward zero, saturate at the integer's limits; NaN gives 0.
/// * integer to integer: modulo 2^bits (two's complement), as C++20 and PyTorch.
/// * integers (u8, u16, u32, u64, i8, i16, i32, i64) to floating: round to nearest, ties to even.
/// `src` and `dst` must not overlap unless from == to.
/// \throws ConfigError, its message starting "convert", for a dtype that is none of the above,
/// a count whose bytes do not fit in memory sizes, or null pointers with a count.
FERRY_API void convert(const void* src, DType from, void* dst, DType to, std::size_t count);

}  // namespace ferry
