// What ArrowDataset::open() reads of every row after the index is built: the categories of
// dictionary-encoded and categorical columns, and the lengths of ragged ones.

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

using parquet::in_quotes;

/// Categories of dictionary columns: every value of every dictionary, sorted; then each
/// version's indices to codes.
void number_dictionaries(ArrowTable& t) {
  for (ArrowColumn& col : t.columns) {
    if (col.kind != ArrowKind::dictionary) continue;
    std::set<std::string, std::less<>> distinct;
    for (const ArrowFile& f : t.files) {
      const ArrowDictionary& d = f.dictionaries[col.dictionary];
      for (std::size_t v = 0; v < d.values.size(); ++v) {
        for (std::size_t i = 0; i < d.values[v].size(); ++i) {
          if (d.valid[v][i] != 0) distinct.insert(d.values[v][i]);
        }
      }
    }
    col.categories.assign(distinct.begin(), distinct.end());
    for (ArrowFile& f : t.files) {
      ArrowDictionary& d = f.dictionaries[col.dictionary];
      for (std::size_t v = 0; v < d.values.size(); ++v) {
        std::vector<std::int64_t> codes(d.values[v].size(), -1);
        for (std::size_t i = 0; i < codes.size(); ++i) {
          if (d.valid[v][i] == 0) continue;
          codes[i] =
              std::lower_bound(col.categories.begin(), col.categories.end(), d.values[v][i]) -
              col.categories.begin();
        }
        d.codes.push_back(std::move(codes));
      }
      d.values.clear();
      d.valid.clear();
    }
  }
}

/// Categories and lengths: what a loader asks of every row before it reads any.
void scan_rows(ArrowTable& t) {
  std::vector<std::size_t> scanned;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const ArrowKind k = t.columns[c].kind;
    if (k == ArrowKind::list || k == ArrowKind::bytes || k == ArrowKind::categorical ||
        (k == ArrowKind::array && t.columns[c].shape[0] < 0)) {
      scanned.push_back(c);
    }
  }
  if (scanned.empty()) return;
  std::vector<std::set<std::string, std::less<>>> distinct(t.columns.size());
  for (std::size_t b = 0; b < t.batches.size(); ++b) {
    const auto d = t.cache.get(b, [&] { return t.decode(b); });
    for (const std::size_t c : scanned) {
      ArrowColumn& col = t.columns[c];
      const ArrowArray& a = d->columns[c][0];
      for (std::int64_t r = 0; r < a.node.length; ++r) {
        const auto [from, to] = arrow::offsets_at(a, col.large, r);
        if (col.kind == ArrowKind::categorical) {
          if (!a.is_valid(r)) continue;
          const auto v = arrow::binary_value(a, col.large, r);
          const std::string_view text(reinterpret_cast<const char*>(v.data()), v.size());
          if (distinct[c].find(text) == distinct[c].end()) distinct[c].emplace(text);
          continue;
        }
        if (to - from > std::numeric_limits<std::uint32_t>::max()) {
          throw DataError(t.where(b) + "column " + in_quotes(col.name) +
                          ": a value of more than 2^32 elements");
        }
        col.lengths.push_back(static_cast<std::uint32_t>(to - from));
        col.max_length = std::max<std::int64_t>(col.max_length, to - from);
      }
    }
  }
  for (const std::size_t c : scanned) {
    ArrowColumn& col = t.columns[c];
    if (col.kind == ArrowKind::categorical) {
      col.categories.assign(distinct[c].begin(), distinct[c].end());
    }
  }
}

}  // namespace ferry::detail
