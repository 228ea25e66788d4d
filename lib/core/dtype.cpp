#include "ferry/dtype.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "core/checked.hpp"
#include "core/convert_rules.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

using detail::rules::convert_one;

template <class S, class D>
void convert_span(const void* src, void* dst, std::size_t n) noexcept {
  const auto* s = static_cast<const S*>(src);
  auto* d = static_cast<D*>(dst);
  for (std::size_t i = 0; i < n; ++i) d[i] = convert_one<S, D>(s[i]);
}

template <class S>
void convert_from(const void* src, void* dst, DType to, std::size_t n) noexcept {
  switch (to) {
    case DType::u8:
      return convert_span<S, std::uint8_t>(src, dst, n);
    case DType::u16:
      return convert_span<S, std::uint16_t>(src, dst, n);
    case DType::u32:
      return convert_span<S, std::uint32_t>(src, dst, n);
    case DType::i32:
      return convert_span<S, std::int32_t>(src, dst, n);
    case DType::i64:
      return convert_span<S, std::int64_t>(src, dst, n);
    case DType::f16:
      return convert_span<S, Half>(src, dst, n);
    case DType::bf16:
      return convert_span<S, BFloat16>(src, dst, n);
    case DType::f32:
      return convert_span<S, float>(src, dst, n);
    case DType::f64:
      return convert_span<S, double>(src, dst, n);
    case DType::i8:
      return convert_span<S, std::int8_t>(src, dst, n);
    case DType::i16:
      return convert_span<S, std::int16_t>(src, dst, n);
    case DType::u64:
      return convert_span<S, std::uint64_t>(src, dst, n);
  }
}

}  // namespace

std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::u8:
      return "u8";
    case DType::u16:
      return "u16";
    case DType::u32:
      return "u32";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::i8:
      return "i8";
    case DType::i16:
      return "i16";
    case DType::u64:
      return "u64";
  }
  return "?";
}

DType parse_dtype(std::string_view text) {
  struct Name {
    std::string_view name;
    DType dtype;
  };
  static constexpr Name kNames[] = {
      {"u8", DType::u8},       {"uint8", DType::u8},      {"u16", DType::u16},
      {"uint16", DType::u16},  {"u32", DType::u32},       {"uint32", DType::u32},
      {"i32", DType::i32},     {"int32", DType::i32},     {"int", DType::i32},
      {"i64", DType::i64},     {"int64", DType::i64},     {"long", DType::i64},
      {"f16", DType::f16},     {"float16", DType::f16},   {"half", DType::f16},
      {"bf16", DType::bf16},   {"bfloat16", DType::bf16}, {"f32", DType::f32},
      {"float32", DType::f32}, {"float", DType::f32},     {"f64", DType::f64},
      {"float64", DType::f64}, {"double", DType::f64},    {"i8", DType::i8},
      {"int8", DType::i8},     {"i16", DType::i16},       {"int16", DType::i16},
      {"short", DType::i16},   {"u64", DType::u64},       {"uint64", DType::u64},
  };
  for (const auto& n : kNames) {
    if (n.name == text) return n.dtype;
  }
  throw ConfigError(
      "DType: unknown dtype \"" + std::string(text) +
      "\"; expected one of u8, u16, u32, i32, i64, f16, bf16, f32, f64, i8, i16, u64");
}

Half to_half(double value) noexcept { return Half{detail::rules::half_bits(value)}; }

BFloat16 to_bfloat16(double value) noexcept {
  return BFloat16{detail::rules::bfloat16_bits(value)};
}

float to_float(Half value) noexcept { return detail::rules::half_to_float(value.bits); }

float to_float(BFloat16 value) noexcept { return detail::rules::bfloat16_to_float(value.bits); }

void convert(const void* src, DType from, void* dst, DType to, std::size_t count) {
  constexpr const char* kWhere = "convert";
  for (const DType t : {from, to}) {
    if (dtype_size(t) == 0) {
      throw ConfigError(std::string(kWhere) + ": unknown dtype " +
                        std::to_string(static_cast<int>(t)));
    }
  }
  // Both spans must be sizes memory can have; then no offset below overflows.
  (void)detail::checked_mul<std::int64_t>(count, std::max(dtype_size(from), dtype_size(to)),
                                          "convert: count");
  if (count != 0 && (src == nullptr || dst == nullptr)) {
    throw ConfigError(std::string(kWhere) + ": null source or destination for " +
                      std::to_string(count) + " elements");
  }
  if (from == to) {
    if (src != dst && count != 0) std::memcpy(dst, src, count * dtype_size(from));
    return;
  }
  switch (from) {
    case DType::u8:
      return convert_from<std::uint8_t>(src, dst, to, count);
    case DType::u16:
      return convert_from<std::uint16_t>(src, dst, to, count);
    case DType::u32:
      return convert_from<std::uint32_t>(src, dst, to, count);
    case DType::i32:
      return convert_from<std::int32_t>(src, dst, to, count);
    case DType::i64:
      return convert_from<std::int64_t>(src, dst, to, count);
    case DType::f16:
      return convert_from<Half>(src, dst, to, count);
    case DType::bf16:
      return convert_from<BFloat16>(src, dst, to, count);
    case DType::f32:
      return convert_from<float>(src, dst, to, count);
    case DType::f64:
      return convert_from<double>(src, dst, to, count);
    case DType::i8:
      return convert_from<std::int8_t>(src, dst, to, count);
    case DType::i16:
      return convert_from<std::int16_t>(src, dst, to, count);
    case DType::u64:
      return convert_from<std::uint64_t>(src, dst, to, count);
  }
}

}  // namespace ferry
