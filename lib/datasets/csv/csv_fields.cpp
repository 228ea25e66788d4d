// CsvDataset's parser: fields and numbers (std::from_chars and what it leaves), the text shown
// in messages, and the large buffers the features go to.

#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "datasets/csv/csv_internal.hpp"

namespace ferry::detail::csv {
namespace {

// Skips a '+' that starts a number (std::from_chars takes only '-').
const char* after_plus(const char* b, const char* e) {
  if (e - b > 1 && *b == '+' && b[1] != '-' && b[1] != '+') return b + 1;
  return b;
}

// Whether the number in [b, e), out of the range of a double, is tiny rather than huge.
bool tiny(const char* b, const char* e) {
  const char* exponent = std::find_if(b, e, [](char c) { return c == 'e' || c == 'E'; });
  if (exponent != e) return exponent + 1 != e && exponent[1] == '-';
  for (const char* p = b; p != e && *p != '.'; ++p) {
    if (*p >= '1' && *p <= '9') return false;
  }
  return true;
}

}  // namespace

void advise_huge_pages(void* data, std::size_t bytes) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (bytes >= 2 * kHuge) {
    char* const base = static_cast<char*>(data);
    const std::size_t skip = (kHuge - reinterpret_cast<std::uintptr_t>(base) % kHuge) % kHuge;
    // Only advice: where it is refused, the buffer keeps ordinary pages.
    static_cast<void>(::madvise(base + skip, (bytes - skip) / kHuge * kHuge, MADV_HUGEPAGE));
  }
}

std::string shown(std::string_view text) {
  std::string out = "\"";
  const bool cut = text.size() > kShownChars;
  std::size_t keep = cut ? kShownChars - 3 : text.size();
  while (cut && keep > 0 && (static_cast<unsigned char>(text[keep]) & 0xc0U) == 0x80U) {
    --keep;  // not inside a UTF-8 character
  }
  for (const char ch : text.substr(0, keep)) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte == 0x7f) {
      constexpr const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      if (ch == '"' || ch == '\\') out += '\\';
      out += ch;
    }
  }
  out += cut ? "...\"" : "\"";
  return out;
}

std::string unquote(const Field& f) {
  std::string out;
  unquote_into(f, out);
  return out;
}

void unquote_into(const Field& f, std::string& out) {
  out.clear();
  out.reserve(f.size);
  for (std::size_t i = 0; i < f.size; ++i) {
    out += f.begin[i];
    if (f.begin[i] == '"') ++i;  // the second of a pair
  }
}

const std::string& Chunk::intern_unquoted(const Field& f) {
  unquote_into(f, scratch);
  if (const auto it = unquoted.find(scratch); it != unquoted.end()) return *it;
  unquoted_stored.fetch_add(1, std::memory_order_relaxed);
  return *unquoted.insert(scratch).first;
}

Number to_float(const char* b, const char* e, float& value) {
  if (b == e) return Number::empty;
  const char* s = after_plus(b, e);
  const auto [end, ec] = std::from_chars(s, e, value);
  if (end != e) return Number::bad;
  if (ec == std::errc{}) return Number::ok;
  if (ec != std::errc::result_out_of_range) return Number::bad;
  // Beyond f32: as a double, then to infinity or to f32's nearest.
  double wide = 0;
  const auto [wide_end, wide_ec] = std::from_chars(s, e, wide);
  const bool negative = *s == '-';
  if (wide_ec == std::errc{} && wide_end == e) {
    value = std::abs(wide) > double{std::numeric_limits<float>::max()}
                ? std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(wide))
                : static_cast<float>(wide);
    return Number::ok;
  }
  if (wide_ec != std::errc::result_out_of_range || wide_end != e) return Number::bad;
  value = tiny(s, e) ? 0.0F : std::numeric_limits<float>::infinity();
  if (negative) value = -value;
  return Number::ok;
}

}  // namespace ferry::detail::csv
