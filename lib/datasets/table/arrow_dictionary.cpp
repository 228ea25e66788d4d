// An Arrow file's dictionaries as ArrowDataset::open() reads them: each DictionaryBatch a new
// version of (or, as a delta, an addition to) the dictionaries of the columns read that use its
// id, a version kept only while a record batch reads it, and their bytes bounded.

#include <cstddef>
#include <string>
#include <vector>

#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_schema.hpp"

namespace ferry::detail {
namespace {

/// The most bytes the versions of one column's dictionary may hold at open.
constexpr std::size_t kMaxDictionaryBytes = std::size_t{1} << 30;

}  // namespace

bool reads_dictionary(const ArrowTable& t, const ArrowFile& f, std::int64_t id) {
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c].kind == ArrowKind::dictionary && f.schema[f.tops[c]].dictionary_id == id) {
      return true;
    }
  }
  return false;
}

// A dictionary batch: a new version of (or, as a delta, an addition to) the dictionaries of
// the columns read that use its id.
void add_dictionary(const ArrowTable& t, ArrowFile& f, const arrow::Message& m,
                    std::span<const std::byte> body) {
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const ArrowColumn& col = t.columns[c];
    const arrow::Field& field = f.schema[f.tops[c]];
    if (col.kind != ArrowKind::dictionary || field.dictionary_id != m.dictionary_id) {
      continue;
    }
    std::vector<std::unique_ptr<std::byte[]>> owned;
    std::size_t owned_bytes = 0;
    const auto buffers = arrow::body_buffers(m.batch, body, owned, owned_bytes);
    arrow::Field values = field;
    values.dictionary = false;
    std::size_t node = 0;
    std::size_t buffer = 0;
    std::size_t variadic = 0;
    const auto arrays = arrow::field_arrays(values, m.batch, buffers, node, buffer, variadic, true);
    const ArrowArray& a = arrays[0];
    ArrowDictionary& d = f.dictionaries[col.dictionary];
    const auto bytes_of = [](const std::vector<std::string>& version) {
      std::size_t n = 0;
      for (const std::string& v : version) n += sizeof(std::string) + v.size();
      return n;
    };
    if (d.values.empty() || d.last_used) {
      // A new version: the record batches before it keep theirs (a delta's starts as a copy).
      if (m.is_delta && !d.values.empty()) {
        d.values.push_back(d.values.back());
        d.valid.push_back(d.valid.back());
        d.held += bytes_of(d.values.back());
      } else {
        d.values.emplace_back();
        d.valid.emplace_back();
      }
      d.last_used = false;
    } else if (!m.is_delta) {
      // No record batch reads the last version: replaced in place (and a delta, added to it), so
      // that dictionary batches in a row do not copy the dictionary each.
      d.held -= bytes_of(d.values.back());
      d.values.back().clear();
      d.valid.back().clear();
    }
    for (std::int64_t i = 0; i < a.node.length; ++i) {
      const auto v = arrow::binary_value(a, col.large, i);
      d.values.back().emplace_back(reinterpret_cast<const char*>(v.data()), v.size());
      d.valid.back().push_back(a.is_valid(i) ? 1 : 0);
      d.held += sizeof(std::string) + v.size();
    }
    // Each delta between record batches copies the dictionary: a few bytes of the file each, so
    // their sum is bounded, not the file's size.
    if (d.held > kMaxDictionaryBytes) {
      throw arrow::FormatError("the dictionary of column " + parquet::in_quotes(col.name) +
                               ": its " + std::to_string(d.values.size()) +
                               " versions hold more than " +
                               std::to_string(kMaxDictionaryBytes >> 20) + " MiB");
    }
  }
}

}  // namespace ferry::detail
