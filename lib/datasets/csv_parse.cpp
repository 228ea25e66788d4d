// CsvDataset's parser.
//
// The rows are parsed in pieces ("chunks") of the bytes after the header, in parallel. A
// piece's first record starts after its first line break that lies outside quotes, and it
// parses every record that starts inside it, to the record's end (past the piece if need be).
// Whether a piece starts inside quotes follows from the parity of the quotes before it: a
// first pass counts each piece's quotes (a count of one byte value, fast), and a prefix sum
// gives every piece its state. That parity rule is exact for every record the parser accepts
// (its quotes come in pairs, and its line breaks inside quotes sit at odd parity); the first
// record it refuses is the first error in the file whichever way the bytes were cut, since
// every record before it was cut alike. So the values, and the error, do not depend on how
// many pieces there were or how the threads took them.

#include "datasets/csv_parse.hpp"

#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <sys/mman.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ferry/error.hpp"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

// Column is the parser's vocabulary (with CsvOptions): defined here, so that the parser depends
// on nothing of CsvDataset's, and CsvDataset on the parser.
namespace ferry {

std::string Column::str() const {
  switch (kind_) {
    case Kind::name:
      return header_;
    case Kind::index: {
      std::string out = "#";  // (not "#" + ...: GCC 12 warns wrongly of an overlap there)
      out += std::to_string(index_);
      return out;
    }
    case Kind::last:
      return "last";
    case Kind::none:
      break;
  }
  return "none";
}

}  // namespace ferry

namespace ferry::detail {
namespace {

constexpr std::size_t kNone = static_cast<std::size_t>(-1);
constexpr std::ptrdiff_t kSkip = -1;   // a column that is read past
constexpr std::ptrdiff_t kLabel = -2;  // the label column; >= 0: the feature's slot
constexpr std::size_t kMinChunk = std::size_t{64} << 10;
constexpr std::size_t kMaxChunk = std::size_t{8} << 20;
constexpr std::size_t kShownChars = 40;  // of a field quoted in a message

// Gives v room for n floats. A large buffer is asked to be backed by huge pages, so that filling
// it faults once per 2 MiB rather than per 4 KiB (some percent of open()'s time otherwise). Room
// that is reserved and not yet used costs address space only, not memory.
void reserve_large(std::vector<float>& v, std::size_t n) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  if (n <= v.capacity()) return;
  v.reserve(n);
  const std::size_t bytes = n * sizeof(float);
  if (bytes >= 2 * kHuge) {
    char* const base = reinterpret_cast<char*>(v.data());
    const std::size_t skip = (kHuge - reinterpret_cast<std::uintptr_t>(base) % kHuge) % kHuge;
    // Only advice: where it is refused, the buffer keeps ordinary pages.
    static_cast<void>(::madvise(base + skip, (bytes - skip) / kHuge * kHuge, MADV_HUGEPAGE));
  }
}

// Sizes v to n floats.
void resize_large(std::vector<float>& v, std::size_t n) {
  reserve_large(v, n);
  v.resize(n);
}

// What is wrong, and where: the byte offset of the record or field, its 0-based column (kNone:
// the whole record).
struct Fault {
  std::size_t offset = kNone;
  std::size_t column = kNone;
  std::string what;
  bool set() const noexcept { return offset != kNone; }
};

// A field's content, without its quotes and the blanks around it.
struct Field {
  const char* begin = nullptr;
  std::size_t size = 0;
  bool doubled = false;        // quoted, with doubled quotes inside
  const char* next = nullptr;  // its end: a delimiter, a line break or the end of the text
  std::string_view view() const noexcept { return {begin, size}; }
};

// One row's label with classes = true: its text, and its value when that is an integer.
struct LabelCell {
  const char* text;
  std::size_t size;
  std::int64_t id;
};

// One piece of the rows, and what parsing it gave.
struct Chunk {
  const char* lo = nullptr;
  const char* hi = nullptr;
  bool starts_in_quote = false;
  std::size_t rows = 0;
  std::vector<float> features;  // [rows, F], with room to spare while parsing
  std::vector<LabelCell> labels;
  std::vector<float> targets;
  std::deque<std::string> unquoted;  // label texts that had doubled quotes (stable addresses)
  bool all_integer = true;
  Fault bad_id;  // the first integer label that cannot be a class id
  Fault fault;   // what stopped it

  // Room for one more row of `width` features. The values in use grow geometrically (within
  // the room reserved, then beyond it), so memory stays within twice the rows parsed whatever
  // the guess of their number was.
  float* add_row(std::size_t width) {
    const std::size_t at = rows * width;
    if (at + width > features.size()) {
      std::size_t to = std::max(features.size() * 2, at + width);
      if (at + width <= features.capacity()) to = std::min(to, features.capacity());
      resize_large(features, to);
    }
    ++rows;
    return features.data() + at;
  }
};

enum class Number { ok, empty, bad };

// The text shown for a field in a message: quoted, shortened, control bytes escaped.
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
  out.reserve(f.size);
  for (std::size_t i = 0; i < f.size; ++i) {
    out += f.begin[i];
    if (f.begin[i] == '"') ++i;  // the second of a pair
  }
  return out;
}

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

// The number that is the whole of [b, e): std::from_chars, then its range.
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

enum class Integer {
  no,         // not an integer: a text label
  yes,        // an integer, in value
  too_large,  // an integer beyond int64 (or a double's range), positive
  too_small,  // likewise, negative
};

// Whether [b, e) is an integer ("3", "+3", "3.0", "3e2", "99999999999999999999", "1e400"),
// and which.
Integer to_integer(const char* b, const char* e, std::int64_t& value) {
  const char* s = after_plus(b, e);
  const bool negative = s != e && *s == '-';
  const Integer beyond = negative ? Integer::too_small : Integer::too_large;
  const auto [end, ec] = std::from_chars(s, e, value);
  if (end == e && ec == std::errc{}) return Integer::yes;
  if (end == e && ec == std::errc::result_out_of_range) return beyond;  // digits only
  double wide = 0;
  const auto [wide_end, wide_ec] = std::from_chars(s, e, wide);
  if (wide_end != e) return Integer::no;
  if (wide_ec == std::errc::result_out_of_range) return tiny(s, e) ? Integer::no : beyond;
  if (wide_ec != std::errc{} || !std::isfinite(wide) || wide != std::trunc(wide)) {
    return Integer::no;
  }
  // Class ids are far below 2^53, where a double holds every integer.
  constexpr double kLimit = 0x1p53;
  if (std::abs(wide) >= kLimit) return beyond;
  value = static_cast<std::int64_t>(wide);
  return Integer::yes;
}

// The text's layout: quotes, delimiters, line breaks, blanks.
class Scanner {
 public:
  Scanner(std::string_view text, char delimiter)
      : begin_(text.data()),
        end_(text.data() + text.size()),
        delimiter_(delimiter),
        trim_space_(delimiter != ' '),
        trim_tab_(delimiter != '\t') {}

  const char* begin() const noexcept { return begin_; }
  const char* end() const noexcept { return end_; }
  char delimiter() const noexcept { return delimiter_; }
  std::size_t offset(const char* p) const noexcept { return static_cast<std::size_t>(p - begin_); }

  bool blank(char c) const noexcept {
    return (c == ' ' && trim_space_) || (c == '\t' && trim_tab_);
  }

  // Whether a field ends at q: a delimiter, "\n", "\r\n", a "\r" that ends the text, the end.
  bool field_ends(const char* q) const noexcept {
    if (q == end_) return true;
    const char c = *q;
    return c == delimiter_ || c == '\n' || (c == '\r' && (q + 1 == end_ || q[1] == '\n'));
  }

  // The start of the line after the blank line at p ("", "\r"), or nullptr if it is not blank.
  const char* after_blank_line(const char* p) const noexcept {
    if (*p == '\n') return p + 1;
    if (*p == '\r') {
      if (p + 1 == end_) return end_;
      if (p[1] == '\n') return p + 2;
    }
    return nullptr;
  }

  // The record after the one whose last field ends at p (a line break or the end).
  const char* next_record(const char* p) const noexcept {
    if (p == end_) return end_;
    if (*p == '\n') return p + 1;
    return p + 1 == end_ ? end_ : p + 2;  // "\r\n", or "\r" at the end
  }

  // Reads the field at p (column `column`, for messages) into f.
  bool field(const char* p, std::size_t column, Field& f, Fault& fault) const {
    while (p != end_ && blank(*p)) ++p;
    if (p != end_ && *p == '"') {
      const char* const open = p++;
      bool doubled = false;
      for (;;) {
        const void* hit =
            p == end_ ? nullptr : std::memchr(p, '"', static_cast<std::size_t>(end_ - p));
        if (hit == nullptr) {
          return flag(fault, open, column, "a quoted field starts here and never ends");
        }
        const char* const q = static_cast<const char*>(hit);
        if (q + 1 != end_ && q[1] == '"') {
          doubled = true;
          p = q + 2;
          continue;
        }
        f.begin = open + 1;
        f.size = static_cast<std::size_t>(q - f.begin);
        f.doubled = doubled;
        p = q + 1;
        break;
      }
      while (p != end_ && blank(*p)) ++p;
      if (!field_ends(p)) {
        return flag(fault, p, column,
                    "text after a closing quote (a quote inside a quoted field is written \"\")");
      }
      f.next = p;
      return true;
    }
    const char* const b = p;
    while (!field_ends(p) && *p != '"') ++p;
    if (p != end_ && *p == '"') {
      return flag(fault, p, column,
                  "a quote inside an unquoted field (quote the whole field and write the quote "
                  "twice)");
    }
    const char* e = p;
    while (e != b && blank(e[-1])) --e;
    f.begin = b;
    f.size = static_cast<std::size_t>(e - b);
    f.doubled = false;
    f.next = p;
    return true;
  }

  // Reads past the record at p, counting its fields in `count` (nothing else is kept, so a
  // record of any width costs no memory); the next record's start, or nullptr (fault).
  const char* skip_record(const char* p, std::size_t& count, Fault& fault) const {
    count = 0;
    for (;;) {
      Field f;
      if (!field(p, count, f, fault)) return nullptr;
      ++count;
      p = f.next;
      if (p == end_ || *p != delimiter_) return next_record(p);
      ++p;
    }
  }

  // Splits the record at p into fields; the next record's start, or nullptr (fault).
  const char* record(const char* p, std::vector<Field>& fields, Fault& fault) const {
    fields.clear();
    for (;;) {
      Field f;
      if (!field(p, fields.size(), f, fault)) return nullptr;
      fields.push_back(f);
      p = f.next;
      if (p == end_ || *p != delimiter_) return next_record(p);
      ++p;
    }
  }

  // Records a fault at `at`; false.
  bool flag(Fault& fault, const char* at, std::size_t column, std::string what) const {
    fault.offset = offset(at);
    fault.column = column;
    fault.what = std::move(what);
    return false;
  }

 private:
  const char* begin_;
  const char* end_;
  char delimiter_;
  bool trim_space_;
  bool trim_tab_;
};

// What the rows hold and where it goes: every column's role, the expected width.
struct Layout {
  std::size_t width = 0;
  std::vector<std::ptrdiff_t> roles;  // per column: kSkip, kLabel or the feature's slot
  std::size_t features = 0;
  bool has_label = false;
  bool classes = true;
  bool missing_nan = false;
  std::string width_source;  // "(as the header)", "(as line 3)"
  const char* first_data = nullptr;
  bool header = false;
  std::size_t header_line = 0;
};

// Parses records into a chunk.
class RowParser {
 public:
  RowParser(const Scanner& s, const Layout& layout) : s_(s), l_(layout) {}

  // Parses the records that start in the chunk (the first chunk's first at ch.lo). The loop
  // over the fields is the hot one: what it needs is in locals, so that the calls to
  // std::from_chars do not make the compiler load it again.
  void parse(Chunk& ch, bool first) const {
    const char* const end = s_.end();
    const char d = s_.delimiter();
    const std::ptrdiff_t* const roles = l_.roles.data();
    const std::size_t width = l_.width;
    const std::size_t features = l_.features;
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
        } else if ((p = skip(p, c, ch)) == nullptr) {
          return;
        }
        if (c + 1 == width) break;
        if (p == end || *p != d) {
          ragged(record, c + 1, ch.fault);
          return;
        }
        ++p;
      }
      if (p != end && *p == d) {  // more fields than expected
        std::size_t fields = 0;
        if (s_.skip_record(record, fields, ch.fault) != nullptr) ragged(record, fields, ch.fault);
        return;
      }
      p = s_.next_record(p);
    }
  }

 private:
  // The first record that starts in the chunk (at or after hi: none does).
  const char* first_record(const Chunk& ch) const {
    bool quoted = ch.starts_in_quote;
    if (!quoted && ch.lo[-1] == '\n') return ch.lo;
    for (const char* p = ch.lo; p < ch.hi; ++p) {
      if (*p == '"') {
        quoted = !quoted;
      } else if (*p == '\n' && !quoted) {
        return p + 1;
      }
    }
    return ch.hi;
  }

  void ragged(const char* record, std::size_t fields, Fault& fault) const {
    std::string what = std::to_string(fields) + (fields == 1 ? " field" : " fields");
    if (l_.header && record == l_.first_data) {
      what += ", but the header (line " + std::to_string(l_.header_line) + ") has " +
              std::to_string(l_.width);
    } else {
      what += ", expected " + std::to_string(l_.width) + " " + l_.width_source;
    }
    s_.flag(fault, record, kNone, std::move(what));
  }

  // A feature or a regression target that the fast path did not take: quoted, blanks, '+',
  // empty, out of f32's range, or not a number.
  const char* number(const char* p, std::size_t c, float& v, Chunk& ch, bool target) const {
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
    return nullptr;
  }

  const char* label(const char* p, std::size_t c, Chunk& ch) const {
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
    std::int64_t id = 0;
    const auto [q, ec] = std::from_chars(p, s_.end(), id);
    if (ec == std::errc{} && s_.field_ends(q)) {
      ch.labels.push_back({p, static_cast<std::size_t>(q - p), id});
      check_id(p, c, Integer::yes, id, {p, static_cast<std::size_t>(q - p)}, ch);
      return q;
    }
    Field f;
    if (!s_.field(p, c, f, ch.fault)) return nullptr;
    if (f.size == 0) {
      s_.flag(ch.fault, p, c, "an empty label");
      return nullptr;
    }
    if (f.doubled) {
      const std::string& text = ch.unquoted.emplace_back(unquote(f));
      ch.labels.push_back({text.data(), text.size(), 0});
      ch.all_integer = false;
    } else if (const Integer k = to_integer(f.begin, f.begin + f.size, id); k != Integer::no) {
      ch.labels.push_back({f.begin, f.size, k == Integer::yes ? id : 0});
      check_id(p, c, k, id, f.view(), ch);
    } else {
      ch.labels.push_back({f.begin, f.size, 0});
      ch.all_integer = false;
    }
    return f.next;
  }

  // Records the first integer label that is no class id: negative, or above kMaxClassId
  // (however far: k says whether it is beyond int64).
  void check_id(const char* p, std::size_t c, Integer k, std::int64_t id, std::string_view text,
                Chunk& ch) const {
    if ((k == Integer::yes && id >= 0 && id <= kMaxClassId) || ch.bad_id.set()) [[likely]] {
      return;
    }
    flag_bad_id(p, c, k, id, text, ch);
  }

  // check_id()'s message, out of line: the check is in the loop over the rows.
  [[gnu::cold, gnu::noinline]] void flag_bad_id(const char* p, std::size_t c, Integer k,
                                                std::int64_t id, std::string_view text,
                                                Chunk& ch) const {
    const bool negative = k == Integer::too_small || (k == Integer::yes && id < 0);
    // The text is a number's (std::from_chars read all of it): shown as it is, shortened.
    std::string label(text.substr(0, kShownChars));
    if (text.size() > kShownChars) label.replace(kShownChars - 3, 3, "...");
    s_.flag(
        ch.bad_id, p, c,
        "the label " + label +
            (negative ? " is negative"
                      : " is too large a class id (at most " + std::to_string(kMaxClassId) + ")") +
            ": integer labels are class ids (CsvOptions::classes = false reads them as "
            "regression targets)");
  }

  const char* skip(const char* p, std::size_t c, Chunk& ch) const {
    const char* q = p;
    const char* const end = s_.end();
    const char d = s_.delimiter();
    while (q != end && *q != d && *q != '\n' && *q != '\r' && *q != '"') ++q;
    if (q == end || *q == d || *q == '\n') return q;
    Field f;
    return s_.field(p, c, f, ch.fault) ? f.next : nullptr;
  }

  const Scanner& s_;
  const Layout& l_;
};

// Messages: "CsvDataset: <file>: line L, column C ("name"): what".
class Messages {
 public:
  Messages(const std::string& name, const Scanner& s, const std::vector<std::string>* header)
      : name_(name), s_(s), header_(header) {}

  std::string prefix() const { return "CsvDataset: " + name_ + ": "; }

  std::size_t line_of(std::size_t offset) const {
    return 1 + static_cast<std::size_t>(std::count(s_.begin(), s_.begin() + offset, '\n'));
  }

  std::string column(std::size_t c) const {
    std::string out = "column " + std::to_string(c + 1);
    if (header_ != nullptr && c < header_->size()) out += " (" + shown((*header_)[c]) + ")";
    return out;
  }

  [[noreturn]] void raise(const Fault& f) const {
    std::string where = "line " + std::to_string(line_of(f.offset));
    if (f.column != kNone) where += ", " + column(f.column);
    throw DataError(prefix() + where + ": " + f.what);
  }

 private:
  const std::string& name_;
  const Scanner& s_;
  const std::vector<std::string>* header_;
};

std::string column_text(const Column& c) {
  return c.kind() == Column::Kind::name ? shown(c.header()) : c.str();
}

// Finds the 0-based columns that Column values name. Names are looked up in a map of the
// header made once, so that many named columns cost time in proportion to their number and the
// header's width, not to their product.
class ColumnFinder {
 public:
  ColumnFinder(const std::vector<std::string>& names, bool header, std::size_t header_line,
               const Messages& m)
      : names_(names), header_(header), header_line_(header_line), m_(m) {}

  std::size_t operator()(const Column& col, const char* role) {
    const std::size_t width = names_.size();
    switch (col.kind()) {
      case Column::Kind::last:
        return width - 1;
      case Column::Kind::index:
        if (col.position() >= width) {
          throw DataError(m_.prefix() + "the " + role + " column " + col.str() +
                          " does not exist: the rows have " + std::to_string(width) +
                          (width == 1 ? " column" : " columns") + " (#0 to #" +
                          std::to_string(width - 1) + ")");
        }
        return col.position();
      case Column::Kind::name: {
        const Hits hits = find(col.header());
        if (hits.first != kNone && hits.second == kNone) return hits.first;
        if (hits.first == kNone) {
          constexpr std::size_t kListed = 8;
          std::string list;
          for (std::size_t i = 0; i < width && i < kListed; ++i) {
            list += (i != 0 ? ", " : "") + shown(names_[i]);
          }
          if (width > kListed) list += ", ...";
          throw DataError(m_.prefix() + "the " + role + " column " + shown(col.header()) +
                          " is not in the header (line " + std::to_string(header_line_) +
                          "), which has " + list + " (" + std::to_string(width) +
                          (width == 1 ? " column)" : " columns)"));
        }
        throw DataError(m_.prefix() + "the " + role + " column " + shown(col.header()) +
                        " is ambiguous: columns " + std::to_string(hits.first + 1) + " and " +
                        std::to_string(hits.second + 1) + " of the header (line " +
                        std::to_string(header_line_) + ") have that name");
      }
      case Column::Kind::none:
        break;
    }
    throw ConfigError(m_.prefix() + "Column::none() cannot be a " + role + " column");
  }

 private:
  struct Hits {
    std::size_t first = kNone;   // the first column of that name
    std::size_t second = kNone;  // the second one
  };

  Hits find(const std::string& name) {
    if (!header_) return {};
    if (by_name_.empty()) {
      by_name_.reserve(names_.size());
      for (std::size_t i = 0; i < names_.size(); ++i) {
        Hits& h = by_name_[names_[i]];
        if (h.first == kNone) {
          h.first = i;
        } else if (h.second == kNone) {
          h.second = i;
        }
      }
    }
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? Hits{} : it->second;
  }

  const std::vector<std::string>& names_;
  bool header_;
  std::size_t header_line_;
  const Messages& m_;
  std::unordered_map<std::string_view, Hits> by_name_;
};

// How many quotes [p, e) holds: memchr to the first (numeric files often have none), then
// 64 bytes at a time, which the compiler vectorizes.
std::size_t count_quotes(const char* p, const char* e) {
  const void* first = p == e ? nullptr : std::memchr(p, '"', static_cast<std::size_t>(e - p));
  if (first == nullptr) return 0;
  p = static_cast<const char*>(first);
  constexpr std::ptrdiff_t kBlock = 64;
  std::size_t n = 0;
  for (; e - p >= kBlock; p += kBlock) {
    std::uint8_t block = 0;
    for (std::ptrdiff_t i = 0; i < kBlock; ++i)
      block = static_cast<std::uint8_t>(block + (p[i] == '"' ? 1 : 0));
    n += block;
  }
  for (; p != e; ++p) n += *p == '"' ? 1U : 0U;
  return n;
}

// oneTBB as packaged is not instrumented, so ThreadSanitizer cannot see it hand the chunks to
// its workers and join them; the body below marks those edges for it, on one address.
#if defined(__SANITIZE_THREAD__)
char tsan_edge = 0;
void edge_release() { __tsan_release(&tsan_edge); }
void edge_acquire() { __tsan_acquire(&tsan_edge); }
#else
void edge_release() {}
void edge_acquire() {}
#endif

// The body of the parallel_for over the chunks: f(i), with the edges marked (oneTBB copies
// the body, on this thread and on its workers).
template <class F>
struct ChunkBody {
  const F* f;
  explicit ChunkBody(const F* fn) : f(fn) { edge_release(); }
  ChunkBody(const ChunkBody& other) : f((edge_acquire(), other.f)) { edge_release(); }
  ChunkBody& operator=(const ChunkBody&) = delete;
  ~ChunkBody() = default;
  void operator()(std::size_t i) const {
    edge_acquire();
    (*f)(i);
    edge_release();
  }
};

// f(i) for every chunk i: on oneTBB's workers, or in order on this thread.
template <class F>
void each_chunk(std::size_t n, bool parallel, const F& f) {
  if (parallel && n > 1) {
    tbb::parallel_for(std::size_t{0}, n, ChunkBody<F>(&f));
    edge_acquire();
  } else {
    for (std::size_t i = 0; i < n; ++i) f(i);
  }
}

}  // namespace

void check_csv_options(const CsvOptions& o) {
  const char d = o.delimiter;
  if (d == '"' || d == '\n' || d == '\r' || d == '\0') {
    throw ConfigError("CsvOptions: the delimiter " + shown(std::string_view(&d, 1)) +
                      " cannot separate fields (it is the quote, a line break or NUL)");
  }
  if ((d >= '0' && d <= '9') || d == '.' || d == '-' || d == '+' || d == 'e' || d == 'E') {
    throw ConfigError("CsvOptions: the delimiter " + shown(std::string_view(&d, 1)) +
                      " cannot separate fields: it is part of numbers");
  }
  if (!o.header && o.label.kind() == Column::Kind::name) {
    throw ConfigError("CsvOptions: the label column " + shown(o.label.header()) +
                      " is named, but header = false: give Column::index(i), Column::last() "
                      "or Column::none()");
  }
  // Where each column was first listed (a map, not a scan, so that a long list costs little).
  std::unordered_map<std::string_view, std::size_t> by_name;
  std::unordered_map<std::size_t, std::size_t> by_index;
  std::size_t last = kNone;
  for (std::size_t i = 0; i < o.features.size(); ++i) {
    const Column& f = o.features[i];
    if (f.kind() == Column::Kind::none) {
      throw ConfigError("CsvOptions: Column::none() in the feature columns (features[" +
                        std::to_string(i) + "])");
    }
    if (!o.header && f.kind() == Column::Kind::name) {
      throw ConfigError("CsvOptions: the feature column " + shown(f.header()) +
                        " is named, but header = false: give Column::index(i)");
    }
    if (f == o.label) {
      throw ConfigError("CsvOptions: the label column " + column_text(f) +
                        " is also a feature column (features[" + std::to_string(i) + "])");
    }
    std::size_t& first =
        f.kind() == Column::Kind::name    ? by_name.try_emplace(f.header(), i).first->second
        : f.kind() == Column::Kind::index ? by_index.try_emplace(f.position(), i).first->second
                                          : last;
    if (first == kNone) first = i;
    if (first != i) {
      throw ConfigError("CsvOptions: the feature column " + column_text(f) +
                        " is listed twice (features[" + std::to_string(first) + "] and [" +
                        std::to_string(i) + "])");
    }
  }
}

CsvTable parse_csv(std::string_view text, const CsvOptions& options, const std::string& name,
                   const CsvSplit& split) {
  check_csv_options(options);
  const Scanner s(text, options.delimiter);
  std::vector<std::string> names;
  const Messages m(name, s, options.header ? &names : nullptr);

  // The header, or the first record: the width.
  const char* p = s.begin();
  if (text.starts_with("\xEF\xBB\xBF")) p += 3;
  while (p != s.end()) {
    const char* next = s.after_blank_line(p);
    if (next == nullptr) break;
    p = next;
  }
  if (p == s.end()) {
    const bool empty = text.empty() || text == "\xEF\xBB\xBF";
    throw DataError(m.prefix() + (empty ? "the file is empty" : "the file has only blank lines"));
  }

  std::vector<Field> fields;
  Fault fault;
  const char* const after_first = s.record(p, fields, fault);
  if (after_first == nullptr) m.raise(fault);
  Layout l;
  l.width = fields.size();
  l.header = options.header;
  const std::size_t first_line = m.line_of(s.offset(p));
  names.reserve(l.width);
  for (std::size_t i = 0; i < l.width; ++i) {
    const Field& f = fields[i];
    names.push_back(!options.header ? "column " + std::to_string(i + 1)
                    : f.doubled     ? unquote(f)
                                    : std::string(f.view()));
  }
  const char* const data = options.header ? after_first : p;
  l.first_data = data;
  l.header_line = first_line;
  l.width_source =
      options.header ? "(as the header)" : "(as line " + std::to_string(first_line) + ")";

  // Columns.
  ColumnFinder resolve(names, options.header, first_line, m);
  std::size_t label = kNone;
  if (options.label.kind() != Column::Kind::none) label = resolve(options.label, "label");
  std::vector<std::size_t> features;
  if (options.features.empty()) {
    for (std::size_t i = 0; i < l.width; ++i) {
      if (i != label) features.push_back(i);
    }
  } else {
    std::vector<bool> taken(l.width);
    for (const Column& col : options.features) {
      const std::size_t c = resolve(col, "feature");
      if (c == label) {
        throw ConfigError(m.prefix() + "the label column " + column_text(options.label) +
                          " is also a feature column (" + column_text(col) + ", " + m.column(c) +
                          ")");
      }
      if (taken[c]) {
        throw ConfigError(m.prefix() + "the feature columns list " + m.column(c) + " twice");
      }
      taken[c] = true;
      features.push_back(c);
    }
  }
  if (features.empty()) {
    throw DataError(m.prefix() + "no feature columns: the rows have " + std::to_string(l.width) +
                    (l.width == 1 ? " column, the label" : " columns"));
  }
  l.roles.assign(l.width, kSkip);
  for (std::size_t k = 0; k < features.size(); ++k) {
    l.roles[features[k]] = static_cast<std::ptrdiff_t>(k);
  }
  if (label != kNone) l.roles[label] = kLabel;
  l.features = features.size();
  l.has_label = label != kNone;
  l.classes = options.classes;
  l.missing_nan = options.missing == Missing::nan;

  // The pieces: their quotes, then their rows.
  const auto body = static_cast<std::size_t>(s.end() - data);
  std::size_t chunk = split.chunk_bytes;
  if (chunk == 0) {
    const auto threads = static_cast<std::size_t>(
        split.parallel ? std::max(1, tbb::this_task_arena::max_concurrency()) : 1);
    // One thread: one piece, whose rows then need no copy.
    chunk = threads == 1 ? std::max<std::size_t>(body, 1)
                         : std::clamp(body / (threads * 8), kMinChunk, kMaxChunk);
  }
  const std::size_t n = std::max<std::size_t>(1, (body + chunk - 1) / chunk);
  std::vector<Chunk> chunks(n);
  std::vector<std::size_t> quotes(n);
  for (std::size_t i = 0; i < n; ++i) {
    chunks[i].lo = data + std::min(body, i * chunk);
    chunks[i].hi = data + std::min(body, (i + 1) * chunk);
  }
  each_chunk(n, split.parallel,
             [&](std::size_t i) { quotes[i] = count_quotes(chunks[i].lo, chunks[i].hi); });
  std::size_t before = 0;
  for (std::size_t i = 0; i < n; ++i) {
    chunks[i].starts_in_quote = (before & 1) != 0;
    before += quotes[i];
  }
  // Room for the rows, guessed from the first one's length but never more than the rows the
  // bytes can hold: a record of `width` fields takes at least `width` bytes (its delimiters and
  // its line break), so the room is at most about one float per byte, however short (or blank,
  // or ragged) the first line is. It is only reserved: memory is taken as rows are parsed.
  std::size_t row_bytes = std::max<std::size_t>(2, l.width);
  if (data != s.end()) {
    std::size_t ignored_count = 0;
    Fault ignored;
    const char* after = s.skip_record(data, ignored_count, ignored);
    row_bytes = std::max<std::size_t>(
        row_bytes, static_cast<std::size_t>((after != nullptr ? after : s.end()) - data));
  }
  const RowParser rows(s, l);
  each_chunk(n, split.parallel, [&](std::size_t i) {
    Chunk& ch = chunks[i];
    const std::size_t expect = static_cast<std::size_t>(ch.hi - ch.lo) / row_bytes * 9 / 8 + 1;
    reserve_large(ch.features, expect * l.features);
    if (l.has_label && l.classes) ch.labels.reserve(expect);
    if (l.has_label && !l.classes) ch.targets.reserve(expect);
    rows.parse(ch, i == 0);
  });

  CsvTable t;
  t.chunks = n;
  for (const Chunk& ch : chunks) {
    if (ch.fault.set()) m.raise(ch.fault);
    t.rows += ch.rows;
  }
  if (t.rows == 0) {
    throw DataError(m.prefix() + "line " + std::to_string(first_line) +
                    " is the header, and no rows follow it");
  }
  t.num_features = l.features;
  t.has_label = l.has_label;
  t.classes_mode = l.has_label && l.classes;
  t.feature_names.reserve(features.size());
  for (const std::size_t c : features) t.feature_names.push_back(std::move(names[c]));

  // Features, one piece after another.
  const std::size_t f = l.features;
  if (n == 1) {
    t.features = std::move(chunks[0].features);
    t.features.resize(t.rows * f);
    if (t.features.capacity() > t.features.size() + t.features.size() / 4) {
      t.features.shrink_to_fit();  // the guess of rows was far too high
    }
  } else {
    resize_large(t.features, t.rows * f);
    std::vector<std::size_t> first_row(n);
    for (std::size_t i = 1; i < n; ++i) first_row[i] = first_row[i - 1] + chunks[i - 1].rows;
    each_chunk(n, split.parallel, [&](std::size_t i) {
      const Chunk& ch = chunks[i];
      std::copy_n(ch.features.data(), ch.rows * f, t.features.data() + first_row[i] * f);
    });
  }

  // Labels.
  if (l.has_label && !l.classes) {
    t.targets.reserve(t.rows);
    for (const Chunk& ch : chunks)
      t.targets.insert(t.targets.end(), ch.targets.begin(), ch.targets.end());
  } else if (l.has_label) {
    t.labels.reserve(t.rows);
    const bool integers =
        std::all_of(chunks.begin(), chunks.end(), [](const Chunk& ch) { return ch.all_integer; });
    if (integers) {
      std::int64_t top = 0;
      for (const Chunk& ch : chunks) {
        if (ch.bad_id.set()) m.raise(ch.bad_id);
        for (const LabelCell& cell : ch.labels) {
          t.labels.push_back(cell.id);
          top = std::max(top, cell.id);
        }
      }
      for (std::int64_t id = 0; id <= top; ++id) t.classes.push_back(std::to_string(id));
    } else {
      std::unordered_map<std::string_view, std::int64_t> ids;
      for (const Chunk& ch : chunks) {
        for (const LabelCell& cell : ch.labels)
          ids.emplace(std::string_view(cell.text, cell.size), 0);
      }
      std::vector<std::string_view> sorted;
      sorted.reserve(ids.size());
      for (const auto& entry : ids) sorted.push_back(entry.first);
      std::sort(sorted.begin(), sorted.end());
      for (std::size_t i = 0; i < sorted.size(); ++i) {
        ids[sorted[i]] = static_cast<std::int64_t>(i);
        t.classes.emplace_back(sorted[i]);
      }
      for (const Chunk& ch : chunks) {
        for (const LabelCell& cell : ch.labels) {
          t.labels.push_back(ids.find(std::string_view(cell.text, cell.size))->second);
        }
      }
    }
  }
  return t;
}

}  // namespace ferry::detail
