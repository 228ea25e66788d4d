#pragma once

// What the pieces of CsvDataset's parser share (csv_parse.cpp, the driver; csv_scan.cpp, the
// text's layout and the pieces; csv_rows.cpp, the records; csv_fields.cpp, fields and numbers;
// csv_labels.cpp, the classes; csv_categories.cpp, the categorical columns; csv_columns.cpp,
// the columns and the options). Internal to lib/datasets/csv.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "datasets/common/integer_text.hpp"
#include "datasets/csv/csv_parse.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::csv {

inline constexpr std::size_t kNone = static_cast<std::size_t>(-1);
inline constexpr std::ptrdiff_t kSkip = -1;   // a column that is read past
inline constexpr std::ptrdiff_t kLabel = -2;  // the label column; >= 0: the feature's slot
// Categorical column k (its place in CsvOptions::categorical) has the role kCategory - k.
inline constexpr std::ptrdiff_t kCategory = -3;
inline constexpr std::size_t kShownChars = 40;  // of a field quoted in a message

// Asks that the whole 2 MiB pages within [data, data + bytes) be huge pages (only advice).
void advise_huge_pages(void* data, std::size_t bytes);

// Gives v room for n values. A large buffer is asked to be backed by huge pages, so that filling
// it faults once per 2 MiB rather than per 4 KiB (some percent of open()'s time otherwise). Room
// that is reserved and not yet used costs address space only, not memory.
template <class T>
void reserve_large(std::vector<T>& v, std::size_t n) {
  if (n <= v.capacity()) return;
  v.reserve(n);
  advise_huge_pages(v.data(), n * sizeof(T));
}

// Sizes v to n values.
template <class T>
void resize_large(std::vector<T>& v, std::size_t n) {
  reserve_large(v, n);
  v.resize(n);
}

// What is wrong, and where: the byte offset of the record or field, its 0-based column (kNone:
// the whole record).
struct Fault {
  std::size_t offset = kNone;
  std::size_t column = kNone;
  std::string what;
  /// A feature's text that is not a number: the message adds how to read the column as
  /// categories (CsvOptions::categorical).
  bool text_feature = false;
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

// A text as the dictionaries of categories look it up: its first 16 bytes as two words
// (zero-padded), its hash, and the text.
struct TextKey {
  std::uint64_t w0 = 0;
  std::uint64_t w1 = 0;
  std::uint64_t hash = 0;
  std::string_view text;
};

inline constexpr std::uint64_t kMul1 = 0x9e3779b97f4a7c15ULL;
inline constexpr std::uint64_t kMul2 = 0xd6e8feb86659fd93ULL;

inline std::uint64_t text_mix(std::uint64_t h) noexcept {
  h ^= h >> 32;
  h *= kMul2;
  h ^= h >> 29;
  return h;
}

// The key of `text`, which lies in memory that is readable up to `end` (past the text: a short
// text is then read as two words and masked, not copied byte by byte). Inline: it is on the
// parse's hot path, and a key returned through memory would be read back before it is stored.
inline TextKey text_key(std::string_view text, const char* end) noexcept {
  TextKey k;
  k.text = text;
  const char* const p = text.data();
  const std::size_t n = text.size();
  if (n <= 16 && end - p >= 16 && std::endian::native == std::endian::little) {
    // Two words read at once, the bytes past the text masked off.
    std::memcpy(&k.w0, p, 8);
    std::memcpy(&k.w1, p + 8, 8);
    if (n < 8) {
      k.w0 &= (std::uint64_t{1} << (8 * n)) - 1;
      k.w1 = 0;
    } else if (n < 16) {
      k.w1 &= (std::uint64_t{1} << (8 * (n - 8))) - 1;
    }
  } else {
    char head[16] = {};
    std::memcpy(head, p, std::min<std::size_t>(n, 16));
    std::memcpy(&k.w0, head, 8);
    std::memcpy(&k.w1, head + 8, 8);
  }
  std::uint64_t h = text_mix((k.w0 ^ (n + 1) * kMul2) * kMul1) ^ k.w1;
  h = text_mix(h * kMul1);
  for (std::size_t at = 16; at < n; at += 8) {  // a long text: the rest, 8 bytes at a time
    std::uint64_t w = 0;
    std::memcpy(&w, p + at, std::min<std::size_t>(n - at, 8));
    h = text_mix((h ^ w) * kMul1);
  }
  k.hash = h;
  return k;
}

// The distinct texts of one categorical column (in one piece of the rows, or in all of them),
// numbered from 0 as they come: an open-addressing table of 32-byte slots (the hash, the id and
// the first 16 bytes of the text, so that a text of up to 16 bytes is compared without reading
// it again), at most 7/8 full (linear probing stays short at that load when most lookups find
// their text, and a table of 100,000 texts is 4 MiB rather than 8), and per text a view (of
// the file's bytes, or of a piece's unquoted copy), the offset of its first field, the hash and
// the first 16 bytes again: 48 + 32 / load (85 to 121) bytes per text.
class Dictionary {
 public:
  static constexpr std::uint32_t kAbsent = static_cast<std::uint32_t>(-1);

  struct Entry {
    std::string_view text;
    std::size_t offset;  // of the first field that held it
    std::uint64_t hash;
    std::uint64_t w0, w1;  // its first 16 bytes, as TextKey has them: the merge, the sort and
                           // the sorted texts then read the file's bytes only for longer texts
  };

  // The text's id, adding it as the next one when it is new.
  std::uint32_t insert(const TextKey& key, std::size_t offset) {
    if (!slots_.empty()) [[likely]] {
      const std::size_t mask = slots_.size() - 1;
      for (std::size_t i = key.hash & mask;; i = (i + 1) & mask) {
        const Slot& slot = slots_[i];
        if (slot.id == kAbsent) break;
        if (matches(slot, key)) return slot.id;
      }
    }
    return add(key, offset);
  }
  // Asks for the slot where the text's lookup starts to be brought into the cache.
  void prefetch(const TextKey& key) const noexcept {
    if (!slots_.empty()) __builtin_prefetch(&slots_[key.hash & (slots_.size() - 1)]);
  }
  // The text's id, or kAbsent.
  std::uint32_t find(const TextKey& key) const noexcept;
  std::size_t size() const noexcept { return entries_.size(); }
  const std::vector<Entry>& entries() const noexcept { return entries_; }

 private:
  struct Slot {
    std::uint64_t hash;
    std::uint32_t id;  // kAbsent: empty
    std::uint32_t size;
    std::uint64_t w0, w1;  // the text's first 16 bytes, zero-padded
  };
  static_assert(sizeof(Slot) == 32);

  bool matches(const Slot& slot, const TextKey& key) const noexcept {
    return slot.hash == key.hash && slot.w0 == key.w0 && slot.w1 == key.w1 &&
           slot.size == key.text.size() && (key.text.size() <= 16 || long_matches(slot, key));
  }
  bool long_matches(const Slot& slot, const TextKey& key) const noexcept;
  // Adds a text that is not there.
  std::uint32_t add(const TextKey& key, std::size_t offset);
  void grow();

  std::vector<Slot> slots_;  // a power of two of them
  std::vector<Entry> entries_;
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
  // Texts that had doubled quotes (labels and categories), unescaped: each distinct text once
  // (a set's elements keep their addresses), however many rows hold it.
  std::unordered_set<std::string> unquoted;
  std::string scratch;  // where a text is unescaped before it is looked up in `unquoted`
  // The field's text unescaped, as stored (once) in `unquoted`.
  const std::string& intern_unquoted(const Field& f);
  bool all_integer = true;
  Fault bad_id;  // the first integer label that cannot be a class id
  Fault fault;   // what stopped it
  // Categorical columns: per column the piece's dictionary, and per row and column the text's
  // id in it (-1: missing), [rows, categorical].
  std::vector<Dictionary> dictionaries;
  std::vector<std::int32_t> ids;
  // A row's texts wait here, their slots being fetched, until the end of the kLookAhead-th row
  // after it (so that the cache misses of a large dictionary overlap the parsing of whole rows);
  // their ids are kPending until then. [kWaitRows, categorical]: row r at r % kWaitRows.
  struct Pending {
    TextKey key;
    std::size_t offset = 0;
  };
  static constexpr std::int32_t kPending = -2;
  // 2 rows: faster than 1 in most paired runs of bench/csv; 4 no better than 1.
  static constexpr std::size_t kLookAhead = 2;
  static constexpr std::size_t kWaitRows = 4;  // a power of two above kLookAhead
  static_assert(std::has_single_bit(kWaitRows) && kWaitRows > kLookAhead);
  std::vector<Pending> pending;

  // Room for one more row of `width` category ids (after add_row(): rows counts it).
  std::int32_t* add_ids(std::size_t width) {
    const std::size_t at = (rows - 1) * width;
    if (at + width > ids.size()) {
      std::size_t to = std::max(ids.size() * 2, at + width);
      if (at + width <= ids.capacity()) to = std::min(to, ids.capacity());
      resize_large(ids, to);
    }
    return ids.data() + at;
  }

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
std::string shown(std::string_view text);

// A quoted field's content with its doubled quotes made single.
std::string unquote(const Field& f);
// The same into `out` (its memory reused).
void unquote_into(const Field& f, std::string& out);

// Texts stored in the pieces' sets of unescaped texts (Chunk::unquoted), counted for tests.
inline std::atomic<std::uint64_t> unquoted_stored{0};

// The number that is the whole of [b, e): std::from_chars, then its range.
Number to_float(const char* b, const char* e, float& value);

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
  bool field(const char* p, std::size_t column, Field& f, Fault& fault) const;

  // Reads past the record at p, counting its fields in `count` (nothing else is kept, so a
  // record of any width costs no memory); the next record's start, or nullptr (fault).
  const char* skip_record(const char* p, std::size_t& count, Fault& fault) const;

  // Splits the record at p into fields; the next record's start, or nullptr (fault).
  const char* record(const char* p, std::vector<Field>& fields, Fault& fault) const;

  // Records a fault at `at`; false.
  bool flag(Fault& fault, const char* at, std::size_t column, std::string what) const {
    fault.offset = offset(at);
    fault.column = column;
    fault.what = std::move(what);
    fault.text_feature = false;
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
  std::vector<std::ptrdiff_t> roles;  // per column: kSkip, kLabel, kCategory - k or the slot
  std::size_t features = 0;
  std::size_t categorical = 0;
  bool has_label = false;
  bool classes = true;
  bool missing_nan = false;
  std::string width_source;  // "(as the header)", "(as line 3)"
  const char* first_data = nullptr;
  bool header = false;
  std::size_t header_line = 0;
};

// Parses records into a chunk (csv_rows.cpp; first_record() in csv_scan.cpp, flag_bad_id() in
// csv_labels.cpp).
class RowParser {
 public:
  RowParser(const Scanner& s, const Layout& layout) : s_(s), l_(layout) {}

  // Parses the records that start in the chunk (the first chunk's first at ch.lo). The loop
  // over the fields is the hot one: what it needs is in locals, so that the calls to
  // std::from_chars do not make the compiler load it again.
  void parse(Chunk& ch, bool first) const;

 private:
  // The first record that starts in the chunk (at or after hi: none does).
  const char* first_record(const Chunk& ch) const;
  void ragged(const char* record, std::size_t fields, Fault& fault) const;
  // A feature or a regression target that the fast path did not take: quoted, blanks, '+',
  // empty, out of f32's range, or not a number.
  const char* number(const char* p, std::size_t c, float& v, Chunk& ch, bool target) const;
  const char* label(const char* p, std::size_t c, Chunk& ch) const;
  // Records the first integer label (integer_text.hpp's rule) that is no class id: negative,
  // or above kMaxClassId (however far: k says whether it is beyond int64).
  void check_id(const char* p, std::size_t c, IntegerText k, std::int64_t id, std::string_view text,
                Chunk& ch) const;
  // check_id()'s message, out of line: the check is in the loop over the rows.
  [[gnu::cold, gnu::noinline]] void flag_bad_id(const char* p, std::size_t c, IntegerText k,
                                                std::int64_t id, std::string_view text,
                                                Chunk& ch) const;
  const char* skip(const char* p, std::size_t c, Chunk& ch) const;
  // Looks up the texts that row `row` of the chunk left pending.
  void resolve(Chunk& ch, std::size_t row) const;
  // Categorical column k's field at p: its text's id in the piece's dictionary (or -1) to out.
  const char* category(const char* p, std::size_t c, std::size_t k, Chunk& ch,
                       std::int32_t& out) const;
  // category()'s fields that are quoted, or have blanks around them.
  [[gnu::noinline]] const char* quoted_category(const char* p, std::size_t c, std::size_t k,
                                                Chunk& ch, std::int32_t& out) const;

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

  // How to read column c as categories: " (a column of text: CsvOptions::categorical = ...)".
  std::string categorical_hint(std::size_t c) const {
    const bool named = header_ != nullptr && c < header_->size();
    const std::string cpp = named ? "Column::name(" + shown((*header_)[c]) + ")"
                                  : "Column::index(" + std::to_string(c) + ")";
    const std::string py = named ? shown((*header_)[c]) : std::to_string(c);
    return " (a column of text: read it as categories with CsvOptions::categorical = {" + cpp +
           "}, in Python categorical=[" + py + "])";
  }

  std::string column(std::size_t c) const {
    std::string out = "column " + std::to_string(c + 1);
    if (header_ != nullptr && c < header_->size()) out += " (" + shown((*header_)[c]) + ")";
    return out;
  }

  [[noreturn]] void raise(const Fault& f) const {
    std::string where = "line " + std::to_string(line_of(f.offset));
    if (f.column != kNone) where += ", " + column(f.column);
    std::string what = f.what;
    if (f.text_feature && f.column != kNone) what += categorical_hint(f.column);
    throw DataError(prefix() + where + ": " + what);
  }

 private:
  const std::string& name_;
  const Scanner& s_;
  const std::vector<std::string>* header_;
};

// A Column as messages name it: a name quoted, else "#3" or "last".
std::string column_text(const Column& c);

// Finds the 0-based columns that Column values name. Names are looked up in a map of the
// header made once, so that many named columns cost time in proportion to their number and the
// header's width, not to their product.
class ColumnFinder {
 public:
  ColumnFinder(const std::vector<std::string>& names, bool header, std::size_t header_line,
               const Messages& m)
      : names_(names), header_(header), header_line_(header_line), m_(m) {}

  std::size_t operator()(const Column& col, const char* role);

 private:
  struct Hits {
    std::size_t first = kNone;   // the first column of that name
    std::size_t second = kNone;  // the second one
  };

  Hits find(const std::string& name);

  const std::vector<std::string>& names_;
  bool header_;
  std::size_t header_line_;
  const Messages& m_;
  std::unordered_map<std::string_view, Hits> by_name_;
};

// Checks the fields that categorical columns (0-based `columns`, named names[c]) make: none
// named as another field ("features", "label", another categorical column), and every
// vocabulary given for one of them. \throws ConfigError.
void check_categorical_names(const std::vector<std::size_t>& columns,
                             const std::vector<std::string>& names, bool has_features,
                             bool has_label, const CsvOptions& options, const Messages& m);

// The pieces of the rows after the header, from `data` to `end`, as `split` asks, each knowing
// whether it starts inside quotes.
std::vector<Chunk> make_chunks(const char* data, const char* end, const CsvSplit& split);

// f(i) for every chunk i of n: on oneTBB's workers, or in order on this thread.
void each_chunk(std::size_t n, bool parallel, const std::function<void(std::size_t)>& f);

// Merges the chunks' dictionaries of categorical column k (names[k], its 0-based column
// columns[k]) and writes its codes into t.categorical (sized already); a value outside a given
// vocabulary, when that is an error, raises the first one in the file.
void gather_categories(const std::vector<Chunk>& chunks, const Layout& l, const Messages& m,
                       const CsvOptions& options, const std::vector<std::size_t>& columns,
                       bool parallel, CsvTable& t);

// Gathers the chunks' labels into t (t.labels and t.classes, or t.targets).
void gather_labels(const std::vector<Chunk>& chunks, const Layout& l, const Messages& m,
                   CsvTable& t);

}  // namespace ferry::detail::csv
