#pragma once

// Checked arithmetic for every size computed from numbers a user or a file controls: shapes,
// element counts, byte counts, offsets. Overflow (or a negative value where a size is meant) is
// an error of the caller's choosing, ConfigError for arguments and DataError for file contents,
// whose message starts with `what` (name the file and field there).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ferry/error.hpp"

namespace ferry::detail {

/// a * b in R, or nothing when the exact result does not fit R (negative into unsigned included).
template <class R, class A, class B>
[[nodiscard]] constexpr std::optional<R> try_mul(A a, B b) noexcept {
  R r{};
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

/// a + b in R, or nothing when the exact result does not fit R.
template <class R, class A, class B>
[[nodiscard]] constexpr std::optional<R> try_add(A a, B b) noexcept {
  R r{};
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

template <class E>
[[noreturn]] void throw_overflow(std::string_view what, const std::string& a, char op,
                                 const std::string& b) {
  throw E(std::string(what) + ": " + a + " " + op + " " + b + " does not fit in memory sizes");
}

/// a * b as R. \throws E naming `what` when it overflows.
template <class R = std::size_t, class E = ConfigError, class A, class B>
R checked_mul(A a, B b, std::string_view what) {
  if (auto r = try_mul<R>(a, b)) return *r;
  throw_overflow<E>(what, std::to_string(a), 'x', std::to_string(b));
}

/// a + b as R. \throws E naming `what` when it overflows.
template <class R = std::size_t, class E = ConfigError, class A, class B>
R checked_add(A a, B b, std::string_view what) {
  if (auto r = try_add<R>(a, b)) return *r;
  throw_overflow<E>(what, std::to_string(a), '+', std::to_string(b));
}

/// The element count of `shape`: every dimension >= 0 and the product within int64.
/// \throws E naming `what` and the shape otherwise.
template <class E = ConfigError>
std::int64_t checked_numel(std::span<const std::int64_t> shape, std::string_view what) {
  auto text = [&] {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
  };
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) throw E(std::string(what) + ": negative dimension in shape " + text());
  }
  for (const std::int64_t d : shape) {
    if (d == 0) return 0;  // empty, however large the other dimensions
  }
  for (const std::int64_t d : shape) {
    const auto r = try_mul<std::int64_t>(n, d);
    if (!r)
      throw E(std::string(what) + ": shape " + text() + " has more elements than int64 holds");
    n = *r;
  }
  return n;
}

/// Bytes of `shape` at `element_size` bytes each, checked as checked_numel() and in size_t.
template <class E = ConfigError>
std::size_t checked_nbytes(std::span<const std::int64_t> shape, std::size_t element_size,
                           std::string_view what) {
  const std::int64_t n = checked_numel<E>(shape, what);
  if (auto r = try_mul<std::size_t>(n, element_size)) return *r;
  throw_overflow<E>(what, std::to_string(n) + " elements", 'x',
                    std::to_string(element_size) + " bytes");
}

}  // namespace ferry::detail
