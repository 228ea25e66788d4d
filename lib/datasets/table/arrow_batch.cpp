// A record batch made readable: its buffers located in the body and decompressed
// (arrow_unpack.cpp), each column's arrays built from the nodes and buffers in schema order, and
// every size and offset a read will use checked against what the buffers hold.

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace arrow {
namespace {

// The most rows an array may have: far above real files, and low enough that no product
// overflows.
constexpr std::int64_t kMaxLength = std::int64_t{1} << 40;

std::int64_t load_offset(std::span<const std::byte> b, bool large, std::int64_t i) {
  if (large) {
    std::int64_t v = 0;
    std::memcpy(&v, b.data() + 8 * i, 8);
    return v;
  }
  std::int32_t v = 0;
  std::memcpy(&v, b.data() + 4 * i, 4);
  return v;
}

std::size_t buffer_count(const Field& f, const RecordBatch& b, std::size_t& variadic) {
  if (f.dictionary) return 2;
  switch (f.type) {
    case TypeId::null:
    case TypeId::run_end_encoded:
      return 0;
    case TypeId::union_:  // type ids (and offsets when dense), after V4's validity bitmap
      return std::size_t{f.union_mode == 1 ? 2U : 1U} + (b.v4 ? 1U : 0U);
    case TypeId::struct_:
    case TypeId::fixed_size_list:
      return 1;
    case TypeId::list:
    case TypeId::large_list:
    case TypeId::map:
      return 2;
    case TypeId::binary:
    case TypeId::utf8:
    case TypeId::large_binary:
    case TypeId::large_utf8:
    case TypeId::list_view:
    case TypeId::large_list_view:
      return 3;
    case TypeId::binary_view:
    case TypeId::utf8_view: {
      if (variadic >= b.variadic.size())
        throw FormatError("a view array's buffer count is missing");
      const std::int64_t v = b.variadic[variadic++];
      if (v < 0 || static_cast<std::uint64_t>(v) > b.buffers.size()) {
        throw FormatError("a view array of " + std::to_string(v) + " buffers");
      }
      return 2 + static_cast<std::size_t>(v);
    }
    default:
      return 2;
  }
}

/// Bytes a value of a fixed-width type read; 0 for bool (bits); -1 for a type not checked.
std::int64_t value_width(const Field& f) {
  if (f.dictionary) return f.index_bits / 8;
  if (f.type == TypeId::int_) return f.bit_width / 8;
  if (f.type == TypeId::floating) return f.precision == 0 ? 2 : f.precision == 1 ? 4 : 8;
  if (f.type == TypeId::boolean) return 0;
  return -1;
}

std::int64_t times(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw FormatError("an array's size overflows");
  return r;
}

void fields_arrays(const Field& f, const RecordBatch& batch,
                   const std::vector<std::span<const std::byte>>& buffers, std::size_t& node,
                   std::size_t& buffer, std::size_t& variadic, bool check,
                   std::vector<ArrowArray>& out) {
  if (node >= batch.nodes.size()) {
    throw FormatError("the record batch has fewer field nodes (" +
                      std::to_string(batch.nodes.size()) + ") than its schema needs");
  }
  ArrowArray a;
  a.node = batch.nodes[node++];
  const std::int64_t n = a.node.length;
  if (n < 0 || n > kMaxLength || a.node.null_count < 0 || a.node.null_count > n) {
    throw FormatError("a field node of " + std::to_string(n) + " rows and " +
                      std::to_string(a.node.null_count) + " nulls");
  }
  const std::size_t count = buffer_count(f, batch, variadic);
  if (count > buffers.size() - buffer) {
    throw FormatError("the record batch has fewer buffers (" + std::to_string(buffers.size()) +
                      ") than its schema needs");
  }
  for (std::size_t k = 0; k < count && k < 3; ++k) a.buffers[k] = buffers[buffer + k];
  buffer += count;
  const std::size_t at = out.size();
  out.push_back(a);
  std::vector<std::size_t> child_at;
  if (!f.dictionary) {
    for (const Field& c : f.children) {
      child_at.push_back(out.size());
      fields_arrays(c, batch, buffers, node, buffer, variadic, check, out);
    }
  }
  if (!check) return;
  if (a.node.null_count > 0 && static_cast<std::int64_t>(a.buffers[0].size()) < (n + 7) / 8) {
    throw FormatError("a validity bitmap of " + std::to_string(a.buffers[0].size()) +
                      " bytes for " + std::to_string(n) + " rows");
  }
  const std::int64_t w = value_width(f);
  if (w >= 0) {
    const std::int64_t need = w == 0 ? (n + 7) / 8 : times(n, w);
    if (static_cast<std::int64_t>(a.buffers[1].size()) < need) {
      throw FormatError("a data buffer of " + std::to_string(a.buffers[1].size()) + " bytes for " +
                        std::to_string(n) + " values of " + type_text(f));
    }
    return;
  }
  const bool large = f.type == TypeId::large_binary || f.type == TypeId::large_utf8 ||
                     f.type == TypeId::large_list;
  switch (f.type) {
    case TypeId::binary:
    case TypeId::utf8:
    case TypeId::large_binary:
    case TypeId::large_utf8:
      check_offsets(a, large, static_cast<std::int64_t>(a.buffers[2].size()), "binary");
      break;
    case TypeId::list:
    case TypeId::large_list:
      if (child_at.size() != 1) throw FormatError("a list type without its one child");
      check_offsets(a, large, out[at + 1].node.length, "list");
      break;
    case TypeId::fixed_size_list:
      if (child_at.size() != 1) throw FormatError("a fixed_size_list type without its one child");
      // Exactly: a child longer than its rows need would shift every row after the first (a
      // list size forged one lower read row 1 from row 0's tail).
      if (f.list_size < 0 || out[at + 1].node.length != times(n, f.list_size)) {
        throw FormatError("a fixed_size_list array of " + std::to_string(n) + " rows of " +
                          std::to_string(f.list_size) + " holds " +
                          std::to_string(out[at + 1].node.length) + " values");
      }
      break;
    case TypeId::struct_:
      for (const std::size_t i : child_at) {
        if (out[i].node.length < n) {
          throw FormatError("a struct array of " + std::to_string(n) + " rows has a child of " +
                            std::to_string(out[i].node.length));
        }
      }
      break;
    default:
      break;
  }
}

}  // namespace

std::vector<bool> read_buffers(const std::vector<Field>& schema, const RecordBatch& batch,
                               const std::vector<bool>& read) {
  std::vector<bool> only(batch.buffers.size(), false);
  const std::vector<std::span<const std::byte>> none(batch.buffers.size());
  std::size_t node = 0;
  std::size_t buffer = 0;
  std::size_t variadic = 0;
  for (std::size_t i = 0; i < schema.size(); ++i) {
    const std::size_t from = buffer;
    (void)field_arrays(schema[i], batch, none, node, buffer, variadic, false);
    if (read[i])
      std::fill(only.begin() + static_cast<std::ptrdiff_t>(from),
                only.begin() + static_cast<std::ptrdiff_t>(buffer), true);
  }
  return only;
}

std::vector<ArrowArray> field_arrays(const Field& field, const RecordBatch& batch,
                                     const std::vector<std::span<const std::byte>>& buffers,
                                     std::size_t& node, std::size_t& buffer, std::size_t& variadic,
                                     bool check) {
  std::vector<ArrowArray> out;
  fields_arrays(field, batch, buffers, node, buffer, variadic, check, out);
  return out;
}

void check_offsets(const ArrowArray& a, bool large, std::int64_t limit, const char* what) {
  const std::int64_t n = a.node.length;
  if (n == 0) return;
  const std::int64_t w = large ? 8 : 4;
  if (static_cast<std::int64_t>(a.buffers[1].size()) < times(n + 1, w)) {
    throw FormatError(std::string("the offsets buffer of a ") + what + " array of " +
                      std::to_string(n) + " rows holds " + std::to_string(a.buffers[1].size()) +
                      " bytes");
  }
  std::int64_t prev = load_offset(a.buffers[1], large, 0);
  if (prev < 0) throw FormatError(std::string("a negative offset in a ") + what + " array");
  for (std::int64_t i = 1; i <= n; ++i) {
    const std::int64_t o = load_offset(a.buffers[1], large, i);
    if (o < prev) {
      throw FormatError(std::string("offsets going down in a ") + what + " array (row " +
                        std::to_string(i - 1) + ")");
    }
    prev = o;
  }
  if (prev > limit) {
    throw FormatError(std::string("a ") + what + " array's offsets reach " + std::to_string(prev) +
                      ", past its " + std::to_string(limit) + " values");
  }
}

std::pair<std::int64_t, std::int64_t> offsets_at(const ArrowArray& a, bool large, std::int64_t i) {
  return {load_offset(a.buffers[1], large, i), load_offset(a.buffers[1], large, i + 1)};
}

std::span<const std::byte> binary_value(const ArrowArray& a, bool large, std::int64_t i) {
  const auto [from, to] = offsets_at(a, large, i);
  return a.buffers[2].subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(to - from));
}

}  // namespace arrow

std::size_t decoded_bytes(const ArrowBatchData& d) noexcept {
  std::size_t n = d.owned_bytes;
  for (const auto& c : d.columns) n += c.size() * sizeof(ArrowArray);
  return n;
}

std::vector<bool> read_buffers(const ArrowFile& f, const arrow::RecordBatch& batch) {
  std::vector<bool> read(f.schema.size(), false);
  for (const std::size_t top : f.tops) read[top] = true;
  return arrow::read_buffers(f.schema, batch, read);
}

std::size_t ArrowTable::unpacked_bytes(std::size_t b) const {
  const ArrowBatch& ab = batches[b];
  const ArrowFile& f = files[ab.file];
  if (f.remote) return ab.body_length;  // its buffers' prefixes are not fetched before a read
  try {
    const arrow::Message m = batch_message(b);
    return arrow::unpacked_bytes(m.batch, f.map->bytes().subspan(ab.body, ab.body_length),
                                 read_buffers(f, m.batch));
  } catch (const arrow::FormatError&) {
    return ab.body_length;  // refused, naming the batch, when it is read
  }
}

std::string ArrowTable::where(std::size_t b) const {
  const ArrowBatch& ab = batches[b];
  const ArrowFile& f = files[ab.file];
  std::string s =
      FileLabel{"ArrowDataset", f.name}.prefix() + "record batch " + std::to_string(ab.number);
  if (!f.file_format) s += " (message " + std::to_string(ab.message) + ")";
  return s + " (rows " + std::to_string(ab.file_row) + " to " +
         std::to_string(ab.file_row + ab.rows - 1) + "): ";
}

arrow::Message ArrowTable::batch_message(std::size_t b) const {
  const ArrowBatch& ab = batches[b];
  const ArrowFile& f = files[ab.file];
  arrow::Message m =
      arrow::parse_message(f.remote ? std::span<const std::byte>(ab.metadata_bytes)
                                    : f.map->bytes().subspan(ab.metadata, ab.metadata_length));
  if (m.type != arrow::HeaderType::record_batch ||
      m.batch.length != static_cast<std::int64_t>(ab.rows)) {
    throw arrow::FormatError("not the record batch it was when the file was opened");
  }
  return m;
}

std::shared_ptr<const ArrowBatchData> ArrowTable::decode(std::size_t b) const {
  const ArrowBatch& ab = batches[b];
  const ArrowFile& f = files[ab.file];
  batches_decoded.fetch_add(1, std::memory_order_relaxed);
  auto d = std::make_shared<ArrowBatchData>();
  try {
    const arrow::Message m = batch_message(b);
    // A local file's buffers of the columns read, and only those (a URL's: fetch_buffers()).
    const auto buffers = [&] {
      if (f.remote) return fetch_buffers(*this, b, m.batch, *d);
      const std::vector<bool> only = read_buffers(f, m.batch);
      return arrow::body_buffers(m.batch, f.map->bytes().subspan(ab.body, ab.body_length), d->owned,
                                 d->owned_bytes, &only);
    }();
    std::vector<std::size_t> column_of(f.schema.size(), columns.size());
    for (std::size_t c = 0; c < columns.size(); ++c) column_of[f.tops[c]] = c;
    d->columns.resize(columns.size());
    std::size_t node = 0;
    std::size_t buffer = 0;
    std::size_t variadic = 0;
    for (std::size_t i = 0; i < f.schema.size(); ++i) {
      const std::size_t c = column_of[i];
      auto arrays = arrow::field_arrays(f.schema[i], m.batch, buffers, node, buffer, variadic,
                                        c < columns.size());
      if (c == columns.size()) continue;
      if (arrays[0].node.length != m.batch.length) {
        throw arrow::FormatError("column " + parquet::in_quotes(columns[c].name) + " has " +
                                 std::to_string(arrays[0].node.length) + " rows in a batch of " +
                                 std::to_string(m.batch.length));
      }
      d->columns[c] = std::move(arrays);
    }
    d->plain.assign(columns.size(), nullptr);
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const ArrowColumn& col = columns[c];
      const std::vector<ArrowArray>& arrays = d->columns[c];
      if (col.kind != ArrowKind::scalar || col.width == 0) continue;
      const bool nulls =
          std::any_of(arrays.begin(), arrays.begin() + static_cast<std::ptrdiff_t>(col.leaf) + 1,
                      [](const ArrowArray& a) { return a.node.null_count != 0; });
      if (!nulls) d->plain[c] = arrays[col.leaf].buffers[1].data();
    }
  } catch (const arrow::FormatError& e) {
    throw DataError(where(b) + e.what());
  } catch (const std::bad_alloc&) {
    throw DataError(where(b) + "out of memory for its columns' buffers (" +
                    std::to_string(unpacked_bytes(b)) + " bytes as their prefixes say)");
  }
  return d;
}

}  // namespace ferry::detail
