// What ArrowDataset::open() reads of every row after the index is built: the categories of
// dictionary-encoded and categorical columns, the lengths of ragged ones, and (in local files)
// whether fixed-size lists' values are all stored.

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
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

namespace {

/// The bytes the values buffer `k` of a record batch holds once unpacked, where that is known
/// without reading it: its stored length in an uncompressed body; in a compressed one its
/// length prefix (8 bytes, read from the mapped file; -1: stored as it is). A URL's compressed
/// buffer: unknown (the maximum), checked when the batch is decoded.
std::int64_t values_bytes(const ArrowFile& f, const ArrowBatch& ab, const arrow::RecordBatch& batch,
                          std::size_t k) {
  const arrow::Buffer& buf = batch.buffers[k];
  if (batch.compression == arrow::Compression::none) return buf.length;
  constexpr std::int64_t kUnknown = std::numeric_limits<std::int64_t>::max();
  if (f.remote || buf.offset < 0 || buf.length < 8 ||
      static_cast<std::uint64_t>(buf.offset) > ab.body_length ||
      static_cast<std::uint64_t>(buf.length) >
          ab.body_length - static_cast<std::uint64_t>(buf.offset)) {
    return kUnknown;  // refused, naming the batch, when it is decoded
  }
  std::int64_t length = 0;
  std::memcpy(&length, f.map->bytes().data() + ab.body + static_cast<std::size_t>(buf.offset), 8);
  return length < 0 ? buf.length - 8 : length;
}

/// Where each of `columns`' top array starts among `batch`'s nodes and buffers (node, buffer).
std::vector<std::pair<std::size_t, std::size_t>> column_starts(
    const ArrowTable& t, const ArrowFile& f, const arrow::RecordBatch& batch,
    const std::vector<std::size_t>& columns) {
  std::vector<std::size_t> column_of(f.schema.size(), t.columns.size());
  for (const std::size_t c : columns) column_of[f.tops[c]] = c;
  std::vector<std::pair<std::size_t, std::size_t>> at(t.columns.size());
  const std::vector<std::span<const std::byte>> none(batch.buffers.size());
  std::size_t node = 0;
  std::size_t buffer = 0;
  std::size_t variadic = 0;
  for (std::size_t i = 0; i < f.schema.size(); ++i) {
    if (column_of[i] < t.columns.size()) at[column_of[i]] = {node, buffer};
    (void)arrow::field_arrays(f.schema[i], batch, none, node, buffer, variadic, false);
  }
  return at;
}

/// A local file's fixed-size-list columns: each record batch's leaf values, as stored, hold its
/// rows' values. A forged list size would otherwise make a field of gigabytes a sample, which a
/// loader would try to make room for; the values are checked again when a batch is decoded.
/// \throws DataError naming the batch and the column.
void check_fixed_sizes(const ArrowTable& t) {
  std::vector<std::size_t> sized;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c].kind == ArrowKind::scalar && !t.columns[c].inner.empty()) sized.push_back(c);
  }
  if (sized.empty()) return;
  for (std::size_t b = 0; b < t.batches.size(); ++b) {
    const ArrowBatch& ab = t.batches[b];
    const ArrowFile& f = t.files[ab.file];
    if (f.remote) continue;  // its buffers are checked when the batch is fetched and decoded
    try {
      const arrow::Message m = t.batch_message(b);
      const arrow::RecordBatch& batch = m.batch;
      const std::vector<std::pair<std::size_t, std::size_t>> at = column_starts(t, f, batch, sized);
      for (const std::size_t c : sized) {
        const ArrowColumn& col = t.columns[c];
        // A fixed_size_list has one buffer (its validity), its leaf two (validity, values).
        const std::size_t k = at[c].second + col.leaf + 1;
        if (k >= batch.buffers.size()) continue;  // refused when the batch is decoded
        // The bytes its rows need (saturating at the largest uint64).
        const auto rows = static_cast<std::uint64_t>(std::max<std::int64_t>(batch.length, 0));
        const auto saturating = [](std::uint64_t x, std::uint64_t y) {
          std::uint64_t out = 0;
          return __builtin_mul_overflow(x, y, &out) ? std::numeric_limits<std::uint64_t>::max()
                                                    : out;
        };
        const std::uint64_t values = saturating(rows, col.per_row);
        const std::uint64_t need =
            col.width == 0 ? values / 8 + (values % 8 != 0) : saturating(values, col.width);
        const std::int64_t stored = values_bytes(f, ab, batch, k);
        if (stored >= 0 && need > static_cast<std::uint64_t>(stored)) {
          throw arrow::FormatError(
              "column " + in_quotes(col.name) + " of type " + arrow::type_text(col.field) +
              ": its values take " + std::to_string(stored) + " bytes, not the " +
              std::to_string(need) + " its " + std::to_string(batch.length) + " rows need");
        }
      }
    } catch (const arrow::FormatError& e) {
      throw DataError(t.where(b) + e.what());
    }
  }
}

/// The top arrays of record batch b's columns `scanned`, with only the buffers the scan reads
/// (validity and offsets; a categorical column's values too) and the others empty: a URL's other
/// buffers are not fetched, and a compressed body's not decompressed. Their offsets are checked
/// (within their buffer, none going down; a list's within its child's values; a categorical
/// column's within its values); the rest is checked when the batch is decoded for reading.
/// \throws DataError as ArrowTable::decode().
std::vector<ArrowArray> scan_arrays(const ArrowTable& t, std::size_t b,
                                    const std::vector<std::size_t>& scanned, ArrowBatchData& keep) {
  const ArrowBatch& ab = t.batches[b];
  const ArrowFile& f = t.files[ab.file];
  std::vector<ArrowArray> out(t.columns.size());
  try {
    const arrow::Message m = t.batch_message(b);
    const arrow::RecordBatch& batch = m.batch;
    const std::vector<std::pair<std::size_t, std::size_t>> at = column_starts(t, f, batch, scanned);
    std::vector<bool> wanted(batch.buffers.size(), false);
    for (const std::size_t c : scanned) {
      const auto [n, first] = at[c];
      if (batch.nodes[n].null_count != 0) wanted[first] = true;
      wanted[first + 1] = true;
      if (t.columns[c].kind == ArrowKind::categorical) wanted[first + 2] = true;
    }
    const std::vector<std::span<const std::byte>> buffers =
        f.remote ? fetch_buffers(t, b, batch, keep, &wanted)
                 : arrow::body_buffers(batch, f.map->bytes().subspan(ab.body, ab.body_length),
                                       keep.owned, keep.owned_bytes, &wanted);
    for (const std::size_t c : scanned) {
      const ArrowColumn& col = t.columns[c];
      const auto [n, first] = at[c];
      ArrowArray& a = out[c];
      a.node = batch.nodes[n];
      if (a.node.length != batch.length) {
        throw arrow::FormatError("column " + in_quotes(col.name) + " has " +
                                 std::to_string(a.node.length) + " rows in a batch of " +
                                 std::to_string(batch.length));
      }
      const bool list = col.kind == ArrowKind::list || col.kind == ArrowKind::array;
      for (std::size_t k = 0; k < (list ? 2U : 3U); ++k) a.buffers[k] = buffers[first + k];
      if (a.node.null_count != 0 &&
          static_cast<std::int64_t>(a.buffers[0].size()) < (a.node.length + 7) / 8) {
        throw arrow::FormatError("column " + in_quotes(col.name) + ": a validity bitmap of " +
                                 std::to_string(a.buffers[0].size()) + " bytes for " +
                                 std::to_string(a.node.length) + " rows");
      }
      // A binary column's values were not read: its offsets are checked against their length as
      // stored (a forged last offset would otherwise give a ragged field of 2^31 bytes, which
      // the loader would try to make room for), and against the values themselves when the
      // batch is decoded.
      std::int64_t limit = std::numeric_limits<std::int64_t>::max();
      if (list) {
        limit = n + 1 < batch.nodes.size() ? batch.nodes[n + 1].length : 0;
      } else if (col.kind == ArrowKind::categorical) {
        limit = static_cast<std::int64_t>(a.buffers[2].size());
      } else if (first + 2 < batch.buffers.size()) {
        limit = values_bytes(f, ab, batch, first + 2);
      }
      arrow::check_offsets(a, col.large, limit, list ? "list" : "binary");
    }
  } catch (const arrow::FormatError& e) {
    throw DataError(t.where(b) + e.what());
  }
  return out;
}

/// scan_rows()' work for record batch b.
void scan_batch(ArrowTable& t, std::size_t b, const std::vector<std::size_t>& scanned,
                std::vector<std::set<std::string, std::less<>>>& distinct) {
  {
    ArrowBatchData keep;  // what the arrays point into, when not the mapped file
    const std::vector<ArrowArray> arrays = scan_arrays(t, b, scanned, keep);
    for (const std::size_t c : scanned) {
      ArrowColumn& col = t.columns[c];
      const ArrowArray& a = arrays[c];
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
}

}  // namespace

/// Categories and lengths: what a loader asks of every row before it reads any.
void scan_rows(ArrowTable& t) {
  check_fixed_sizes(t);
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
    try {
      scan_batch(t, b, scanned, distinct);
    } catch (const std::bad_alloc&) {
      // Rows past what this process can hold the lengths of (4 bytes a row for each ragged
      // field: a few KiB of compressed offsets may claim a billion empty strings).
      std::size_t rows = 0;
      for (const std::size_t c : scanned) rows = std::max(rows, t.columns[c].lengths.size());
      throw DataError(t.where(b) + "out of memory reading its rows' lengths at open (" +
                      std::to_string(rows) + " rows read; 4 bytes a row for each ragged field)");
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
