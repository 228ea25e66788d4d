// CsvDataset's parser: the records of one piece, field by field (the hot loop).

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "datasets/csv/csv_internal.hpp"

namespace ferry::detail::csv {
namespace {

// A short plain decimal at p, "[-]d+[.d+]" with at most 8 digits in all: the common case of
// numeric CSVs, read without std::from_chars. Its digits make an integer m <= 2^24 and its
// fraction has k <= 8 digits, so m and 10^k are floats exactly, and one IEEE division gives
// m / 10^k correctly rounded (to nearest even) — the float std::from_chars gives (Clinger's
// fast path). Returns the end of the number, or nullptr when the text is anything else
// (more digits, an exponent, "1.", ".5", "inf", ...): std::from_chars then reads it.
const char* short_decimal(const char* p, const char* end, float& value) {
  static constexpr float kPow10[] = {1e0F, 1e1F, 1e2F, 1e3F, 1e4F, 1e5F, 1e6F, 1e7F, 1e8F};
  constexpr int kMaxDigits = 8;
  const bool negative = p != end && *p == '-';
  if (negative) ++p;
  std::uint32_t m = 0;
  int digits = 0;
  const char* const int_begin = p;
  for (; p != end && static_cast<unsigned>(*p - '0') < 10U; ++p) {
    if (++digits > kMaxDigits) return nullptr;
    m = m * 10U + static_cast<std::uint32_t>(*p - '0');
  }
  if (p == int_begin) return nullptr;
  int fraction = 0;
  if (p != end && *p == '.') {
    ++p;
    const char* const frac_begin = p;
    for (; p != end && static_cast<unsigned>(*p - '0') < 10U; ++p) {
      if (++digits > kMaxDigits) return nullptr;
      m = m * 10U + static_cast<std::uint32_t>(*p - '0');
    }
    if (p == frac_begin) return nullptr;
    fraction = static_cast<int>(p - frac_begin);
  }
  if (p != end && (*p == 'e' || *p == 'E')) return nullptr;
  if (m > (std::uint32_t{1} << 24)) return nullptr;  // not exact as a float
  const float v = static_cast<float>(m) / kPow10[fraction];
  value = negative ? -v : v;
  return p;
}

}  // namespace

void RowParser::parse(Chunk& ch, bool first) const {
  const char* const end = s_.end();
  const char d = s_.delimiter();
  const std::ptrdiff_t* const roles = l_.roles.data();
  const std::size_t width = l_.width;
  const std::size_t features = l_.features;
  const std::size_t categorical = l_.categorical;
  const char* const hi = ch.hi;
  const auto field_ends = [end, d](const char* q) {
    return q == end || *q == d || *q == '\n' || (*q == '\r' && (q + 1 == end || q[1] == '\n'));
  };
  const char* p = first ? ch.lo : first_record(ch);
  while (p < hi) {
    if (const char* next = s_.after_blank_line(p)) {
      p = next;
      continue;
    }
    const char* const record = p;
    float* const out = ch.add_row(features);
    std::int32_t* const ids = categorical != 0 ? ch.add_ids(categorical) : nullptr;
    for (std::size_t c = 0;; ++c) {
      const std::ptrdiff_t role = roles[c];
      if (role >= 0) {
        const char* const fast = short_decimal(p, end, out[role]);
        if (fast != nullptr && field_ends(fast)) [[likely]] {
          p = fast;
        } else if (const auto [q, ec] = std::from_chars(p, end, out[role]);
                   ec == std::errc{} && field_ends(q)) {
          p = q;
        } else if ((p = number(p, c, out[role], ch, false)) == nullptr) {
          return;
        }
      } else if (role == kLabel) {
        if ((p = label(p, c, ch)) == nullptr) return;
      } else if (role == kSkip) {
        if ((p = skip(p, c, ch)) == nullptr) return;
      } else {
        const auto k = static_cast<std::size_t>(kCategory - role);
        if ((p = category(p, c, k, ch, ids[k])) == nullptr) return;
      }
      if (c + 1 == width) break;
      if (p == end || *p != d) {
        ragged(record, c + 1, ch.fault);
        return;
      }
      ++p;
    }
    // The texts of the row kLookAhead rows before this one, whose slots have been fetched
    // meanwhile.
    if (categorical != 0 && ch.rows > Chunk::kLookAhead) {
      resolve(ch, ch.rows - 1 - Chunk::kLookAhead);
    }
    if (p != end && *p == d) {  // more fields than expected
      std::size_t fields = 0;
      if (s_.skip_record(record, fields, ch.fault) != nullptr) ragged(record, fields, ch.fault);
      return;
    }
    p = s_.next_record(p);
  }
  if (categorical != 0) {  // the last rows' texts, in order
    for (std::size_t row = ch.rows > Chunk::kLookAhead ? ch.rows - Chunk::kLookAhead : 0;
         row < ch.rows; ++row) {
      resolve(ch, row);
    }
  }
}

void RowParser::resolve(Chunk& ch, std::size_t row) const {
  const std::size_t width = l_.categorical;
  std::int32_t* const ids = ch.ids.data() + row * width;
  const Chunk::Pending* const pending = ch.pending.data() + (row & (Chunk::kWaitRows - 1)) * width;
  for (std::size_t k = 0; k < width; ++k) {
    if (ids[k] == Chunk::kPending) {
      ids[k] =
          static_cast<std::int32_t>(ch.dictionaries[k].insert(pending[k].key, pending[k].offset));
    }
  }
}

void RowParser::ragged(const char* record, std::size_t fields, Fault& fault) const {
  std::string what = std::to_string(fields) + (fields == 1 ? " field" : " fields");
  if (l_.header && record == l_.first_data) {
    what += ", but the header (line " + std::to_string(l_.header_line) + ") has " +
            std::to_string(l_.width);
  } else {
    what += ", expected " + std::to_string(l_.width) + " " + l_.width_source;
  }
  s_.flag(fault, record, kNone, std::move(what));
}

const char* RowParser::number(const char* p, std::size_t c, float& v, Chunk& ch,
                              bool target) const {
  Field f;
  if (!s_.field(p, c, f, ch.fault)) return nullptr;
  const Number n = f.doubled ? Number::bad : to_float(f.begin, f.begin + f.size, v);
  if (n == Number::ok) return f.next;
  if (n == Number::empty) {
    if (!target && l_.missing_nan) {
      v = std::numeric_limits<float>::quiet_NaN();
      return f.next;
    }
    s_.flag(ch.fault, p, c,
            target ? "an empty label"
                   : "an empty field, expected a number (CsvOptions::missing = Missing::nan "
                     "reads it as NaN)");
    return nullptr;
  }
  s_.flag(ch.fault, p, c,
          shown(f.view()) + " is not a number" +
              (target ? " (the label is a regression target: CsvOptions::classes = false)" : ""));
  ch.fault.text_feature = !target;
  return nullptr;
}

const char* RowParser::label(const char* p, std::size_t c, Chunk& ch) const {
  if (!l_.classes) {
    float v = 0;
    const auto [q, ec] = std::from_chars(p, s_.end(), v);
    if (ec == std::errc{} && s_.field_ends(q)) {
      ch.targets.push_back(v);
      return q;
    }
    const char* next = number(p, c, v, ch, true);
    if (next != nullptr) ch.targets.push_back(v);
    return next;
  }
  // The common case, an unquoted integer without blanks, in place: '-' and digits up to the
  // field's end. Anything else goes through the field's text below.
  const char* q = p;
  const char* const end = s_.end();
  if (q != end && *q == '-') ++q;
  while (q != end && *q >= '0' && *q <= '9') ++q;
  if (q != p && s_.field_ends(q)) {
    const std::string_view text(p, static_cast<std::size_t>(q - p));
    if (const ParsedInteger v = parse_integer_text(text); v.kind == IntegerText::ok) {
      ch.labels.push_back({p, text.size(), v.value});
      check_id(p, c, IntegerText::ok, v.value, text, ch);
      return q;
    }
  }
  Field f;
  if (!s_.field(p, c, f, ch.fault)) return nullptr;
  if (f.size == 0) {
    s_.flag(ch.fault, p, c, "an empty label");
    return nullptr;
  }
  if (f.doubled) {
    const std::string& text = ch.intern_unquoted(f);
    ch.labels.push_back({text.data(), text.size(), 0});
    ch.all_integer = false;
  } else if (const ParsedInteger v = parse_integer_text(f.view());
             v.kind != IntegerText::malformed) {
    ch.labels.push_back({f.begin, f.size, v.value});
    check_id(p, c, v.kind, v.value, f.view(), ch);
  } else {
    ch.labels.push_back({f.begin, f.size, 0});
    ch.all_integer = false;
  }
  return f.next;
}

void RowParser::check_id(const char* p, std::size_t c, IntegerText k, std::int64_t id,
                         std::string_view text, Chunk& ch) const {
  if ((k == IntegerText::ok && id >= 0 && id <= kMaxClassId) || ch.bad_id.set()) [[likely]] {
    return;
  }
  flag_bad_id(p, c, k, id, text, ch);
}

const char* RowParser::skip(const char* p, std::size_t c, Chunk& ch) const {
  const char* q = p;
  const char* const end = s_.end();
  const char d = s_.delimiter();
  while (q != end && *q != d && *q != '\n' && *q != '\r' && *q != '"') ++q;
  if (q == end || *q == d || *q == '\n') return q;
  Field f;
  return s_.field(p, c, f, ch.fault) ? f.next : nullptr;
}

}  // namespace ferry::detail::csv
