#pragma once

// ferry's one rule for an integer written as text, where a dataset reads labels: CsvDataset's
// class ids and WebDataset's ".cls" members (and whatever reads integer text later).
//
// An integer is an optional '-' then ASCII decimal digits, written as std::to_string writes
// it: no '+', no superfluous leading zero ("0" alone; "05" and "-0" are not integers), no
// blank, no other byte ("5.0", "1e3", "0x5", "5 6", "" are not integers), and its value within
// i64. Digits so written beyond i64 are an integer out of range, not text. Blanks around the
// text are not part of it: whoever allows them trims them first (trim_ascii_space), and says so.

#include <cstdint>
#include <string_view>

namespace ferry::detail {

enum class IntegerText {
  ok,         ///< an integer, in ParsedInteger::value
  malformed,  ///< not an integer as the rule above writes one
  too_large,  ///< digits of an integer beyond i64, positive
  too_small,  ///< likewise, negative
};

struct ParsedInteger {
  IntegerText kind = IntegerText::malformed;
  std::int64_t value = 0;  ///< 0 unless kind is ok
};

/// `text` read by the rule above.
constexpr ParsedInteger parse_integer_text(std::string_view text) noexcept {
  const bool negative = !text.empty() && text.front() == '-';
  const std::string_view digits = text.substr(negative ? 1 : 0);
  if (digits.empty() || (digits.front() == '0' && (digits.size() > 1 || negative))) return {};
  // The magnitude, up to 2^63 (i64's most negative value) before it is out of range.
  constexpr std::uint64_t kMost = std::uint64_t{1} << 63;
  const std::uint64_t most = negative ? kMost : kMost - 1;
  std::uint64_t m = 0;
  bool beyond = false;
  for (const char c : digits) {
    if (c < '0' || c > '9') return {};
    const auto d = static_cast<std::uint64_t>(c - '0');
    if (beyond || m > (most - d) / 10) {
      beyond = true;  // still checked to be all digits
    } else {
      m = m * 10 + d;
    }
  }
  if (beyond) return {negative ? IntegerText::too_small : IntegerText::too_large, 0};
  // -m for m up to 2^63, without overflow.
  const std::int64_t value =
      negative ? static_cast<std::int64_t>(0 - m) : static_cast<std::int64_t>(m);
  return {IntegerText::ok, value};
}

/// Whether `c` is ASCII white space: ' ', '\t', '\n', '\v', '\f' or '\r'.
constexpr bool is_ascii_space(char c) noexcept { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// `text` without the ASCII white space at either end.
constexpr std::string_view trim_ascii_space(std::string_view text) noexcept {
  while (!text.empty() && is_ascii_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_ascii_space(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace ferry::detail
