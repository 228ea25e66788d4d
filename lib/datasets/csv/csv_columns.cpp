// CsvDataset's parser: the columns (Column, the options that name them, and finding them in
// the header).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "datasets/csv/csv_internal.hpp"

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

namespace ferry::detail::csv {

std::string column_text(const Column& c) {
  return c.kind() == Column::Kind::name ? shown(c.header()) : c.str();
}

std::size_t ColumnFinder::operator()(const Column& col, const char* role) {
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

ColumnFinder::Hits ColumnFinder::find(const std::string& name) {
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

void check_categorical_names(const std::vector<std::size_t>& columns,
                             const std::vector<std::string>& names, bool has_features,
                             bool has_label, const CsvOptions& options, const Messages& m) {
  std::unordered_map<std::string_view, std::size_t> fields;
  if (has_features) fields.emplace("features", kNone);
  if (has_label) fields.emplace("label", kNone);
  std::string list;
  for (const std::size_t c : columns) {
    const std::string& name = names[c];
    const auto [it, added] = fields.emplace(name, c);
    if (!added) {
      throw ConfigError(m.prefix() + "the categorical " + m.column(c) +
                        " would be a field named as " +
                        (it->second == kNone ? "the " + shown(name) + " field"
                                             : "the categorical " + m.column(it->second)) +
                        ": each categorical column is a field named as the column");
    }
    list += (list.empty() ? "" : ", ") + shown(name);
  }
  for (const auto& [name, categories] : options.vocabulary) {
    const auto it = fields.find(name);
    if (it == fields.end() || it->second == kNone) {
      throw ConfigError(m.prefix() + "CsvOptions::vocabulary gives categories for " + shown(name) +
                        ", which is not a categorical column" +
                        (list.empty() ? std::string(" (there are none)") : " (" + list + ")"));
    }
  }
}

}  // namespace ferry::detail::csv

namespace ferry::detail {

using namespace csv;

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
  // Categorical columns: likewise, and none of them a feature column.
  by_name.clear();
  by_index.clear();
  last = kNone;
  for (std::size_t i = 0; i < o.categorical.size(); ++i) {
    const Column& f = o.categorical[i];
    const std::string at = "categorical[" + std::to_string(i) + "]";
    if (f.kind() == Column::Kind::none) {
      throw ConfigError("CsvOptions: Column::none() in the categorical columns (" + at + ")");
    }
    if (!o.header && f.kind() == Column::Kind::name) {
      throw ConfigError("CsvOptions: the categorical column " + shown(f.header()) +
                        " is named, but header = false: give Column::index(i)");
    }
    if (f == o.label) {
      throw ConfigError("CsvOptions: the label column " + column_text(f) +
                        " is also a categorical column (" + at + ")");
    }
    const auto feature = std::find(o.features.begin(), o.features.end(), f);
    if (feature != o.features.end()) {
      throw ConfigError("CsvOptions: the column " + column_text(f) + " is both a feature (" +
                        "features[" + std::to_string(feature - o.features.begin()) +
                        "]) and a categorical column (" + at + ")");
    }
    std::size_t& first =
        f.kind() == Column::Kind::name    ? by_name.try_emplace(f.header(), i).first->second
        : f.kind() == Column::Kind::index ? by_index.try_emplace(f.position(), i).first->second
                                          : last;
    if (first == kNone) first = i;
    if (first != i) {
      throw ConfigError("CsvOptions: the categorical column " + column_text(f) +
                        " is listed twice (categorical[" + std::to_string(first) + "] and [" +
                        std::to_string(i) + "])");
    }
  }
  for (const auto& [name, categories] : o.vocabulary) {
    std::unordered_map<std::string_view, std::size_t> seen;
    for (std::size_t i = 0; i < categories.size(); ++i) {
      if (categories[i].empty()) {
        throw ConfigError("CsvOptions: the vocabulary of " + shown(name) + " has an empty " +
                          "category ([" + std::to_string(i) +
                          "]): an empty value is a missing one (CsvOptions::missing)");
      }
      const auto [it, added] = seen.emplace(categories[i], i);
      if (!added) {
        throw ConfigError("CsvOptions: the vocabulary of " + shown(name) + " lists " +
                          shown(categories[i]) + " twice ([" + std::to_string(it->second) +
                          "] and [" + std::to_string(i) + "])");
      }
    }
    if (categories.size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
      throw ConfigError("CsvOptions: the vocabulary of " + shown(name) + " is too large");
    }
  }
}

}  // namespace ferry::detail
