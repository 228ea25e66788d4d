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

#include "datasets/csv/csv_parse.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/csv/csv_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

using namespace csv;

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
  // Categorical columns: each once, not the label.
  std::vector<std::size_t> categorical;
  std::vector<bool> is_categorical(l.width);
  for (const Column& col : options.categorical) {
    const std::size_t c = resolve(col, "categorical");
    if (c == label) {
      throw ConfigError(m.prefix() + "the label column " + column_text(options.label) +
                        " is also a categorical column (" + column_text(col) + ", " + m.column(c) +
                        ")");
    }
    if (is_categorical[c]) {
      throw ConfigError(m.prefix() + "the categorical columns list " + m.column(c) + " twice");
    }
    is_categorical[c] = true;
    categorical.push_back(c);
  }
  std::vector<std::size_t> features;
  if (options.features.empty()) {
    for (std::size_t i = 0; i < l.width; ++i) {
      if (i != label && !is_categorical[i]) features.push_back(i);
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
      if (is_categorical[c]) {
        throw ConfigError(m.prefix() + "the feature column " + column_text(col) + " (" +
                          m.column(c) + ") is also a categorical column");
      }
      taken[c] = true;
      features.push_back(c);
    }
  }
  if (features.empty() && categorical.empty()) {
    throw DataError(m.prefix() + "no feature columns: the rows have " + std::to_string(l.width) +
                    (l.width == 1 ? " column, the label" : " columns"));
  }
  l.roles.assign(l.width, kSkip);
  for (std::size_t k = 0; k < features.size(); ++k) {
    l.roles[features[k]] = static_cast<std::ptrdiff_t>(k);
  }
  if (label != kNone) l.roles[label] = kLabel;
  for (std::size_t k = 0; k < categorical.size(); ++k) {
    l.roles[categorical[k]] = kCategory - static_cast<std::ptrdiff_t>(k);
  }
  l.features = features.size();
  l.categorical = categorical.size();
  check_categorical_names(categorical, names, !features.empty(), label != kNone, options, m);
  l.has_label = label != kNone;
  l.classes = options.classes;
  l.missing_nan = options.missing == Missing::nan;

  // The pieces: their quotes, then their rows.
  std::vector<Chunk> chunks = make_chunks(data, s.end(), split);
  const std::size_t n = chunks.size();
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
    if (l.categorical != 0) {
      ch.dictionaries.resize(l.categorical);
      ch.pending.resize(Chunk::kWaitRows * l.categorical);
      reserve_large(ch.ids, expect * l.categorical);
    }
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
  t.categorical.resize(categorical.size());
  for (std::size_t k = 0; k < categorical.size(); ++k) {
    t.categorical[k].name = names[categorical[k]];
  }

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

  gather_labels(chunks, l, m, t);
  gather_categories(chunks, l, m, options, categorical, split.parallel, t);
  return t;
}

}  // namespace ferry::detail
