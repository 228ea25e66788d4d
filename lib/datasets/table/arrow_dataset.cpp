#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <string>

#include "datasets/table/arrow_ahead.hpp"
#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"
#include "ferry/table.hpp"

namespace ferry {
namespace detail {
namespace {

constexpr std::string_view kArrowWho = "ArrowDataset";
using parquet::in_quotes;

/// The record batches this thread read last: a read of one of them takes no lock. An
/// uncompressed table's batches are views of the mapped file (a few bytes a column), and a thread
/// holds up to 64 of them (batch b in place b % 64), so that shuffled reads find theirs without
/// the shared cache's lock; of a compressed table's, whose decompressed buffers count against the
/// cache's budget, it holds one (so of a URL's, whose buffers were fetched).
/// A compressed table's (or a URL's) is kept by the table (ArrowTable::held), so that its
/// buffers go with the table; an uncompressed one's views, by the thread.
struct HeldBatch {
  std::uint64_t id = 0;
  std::size_t batch = 0;
  const ArrowBatchData* data = nullptr;
  std::shared_ptr<const ArrowBatchData> views;
};
constexpr std::size_t kHeld = 64;
thread_local std::array<HeldBatch, kHeld> t_arrow_held;

HeldBatch& held_place(const ArrowTable& t, std::size_t b) {
  return t_arrow_held[t.compressed || t.remote ? 0 : b % kHeld];
}

std::string at_row(const ArrowTable& t, std::size_t b, std::size_t row, const ArrowColumn& col) {
  const ArrowBatch& ab = t.batches[b];
  return std::string(kArrowWho) + ": " + t.files[ab.file].name + ": row " +
         std::to_string(ab.file_row + row) + ", column " + in_quotes(col.name);
}

/// Writes what a null becomes under Missing::nan, or throws.
void null_value(const ArrowTable& t, std::size_t b, std::size_t row, std::size_t c,
                const SampleRef& out, bool inside = false) {
  const ArrowColumn& col = t.columns[c];
  const bool nan = t.options.missing == Missing::nan;
  const bool codes = col.kind == ArrowKind::categorical || col.kind == ArrowKind::dictionary;
  const bool floating =
      (col.kind == ArrowKind::scalar || col.kind == ArrowKind::array) &&
      (col.dtype == DType::f16 || col.dtype == DType::f32 || col.dtype == DType::f64);
  if (nan && codes) {
    *out.as<std::int64_t>(c) = -1;
    return;
  }
  if (nan && floating) {  // the whole slot
    const std::size_t n = out.nbytes(c) / dtype_size(col.dtype);
    if (col.dtype == DType::f16) {
      std::fill_n(out.as<std::uint16_t>(c), n, std::uint16_t{0x7e00});
    } else if (col.dtype == DType::f32) {
      std::fill_n(out.as<float>(c), n, std::numeric_limits<float>::quiet_NaN());
    } else {
      std::fill_n(out.as<double>(c), n, std::numeric_limits<double>::quiet_NaN());
    }
    return;
  }
  throw DataError(at_row(t, b, row, col) + (inside ? ": a null inside its values" : ": a null") +
                  (codes || floating ? std::string(" (TableOptions::missing is Missing::error)")
                                     : std::string(" (Missing::nan reads nulls only in float and "
                                                   "categorical columns)")));
}

/// Whether a value in [first, first + count) of the fixed-size lists and leaf under a column is
/// null (a null inside a row's values has no place in its field).
bool null_inside(const ArrowColumn& col, const std::vector<ArrowArray>& arrays, std::size_t level,
                 std::int64_t first, std::int64_t count) {
  for (std::size_t i = level; i <= col.leaf; ++i) {
    const ArrowArray& a = arrays[i];
    if (a.node.null_count != 0) {
      for (std::int64_t k = first; k < first + count; ++k) {
        if (!a.is_valid(k)) return true;
      }
    }
    if (i < col.leaf) {
      const auto n = col.inner[col.kind == ArrowKind::list ? i - 1 : i];
      first *= n;
      count *= n;
    }
  }
  return false;
}

/// Leaf values [first, first + count) into `out` (bools from their bits).
void copy_values(const ArrowArray& leaf, std::size_t width, std::int64_t first, std::int64_t count,
                 void* out) {
  if (width != 0) {
    if (count > 0) {
      std::memcpy(out, leaf.buffers[1].data() + static_cast<std::size_t>(first) * width,
                  static_cast<std::size_t>(count) * width);
    }
    return;
  }
  auto* o = static_cast<std::uint8_t*>(out);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::int64_t i = first + k;
    o[k] = static_cast<std::uint8_t>(
        (static_cast<unsigned>(leaf.buffers[1][static_cast<std::size_t>(i >> 3)]) >> (i & 7)) & 1U);
  }
}

std::int64_t dictionary_index(const ArrowArray& a, const arrow::Field& f, std::int64_t row) {
  const std::byte* p = a.buffers[1].data() +
                       static_cast<std::size_t>(row) * static_cast<std::size_t>(f.index_bits / 8);
  std::int64_t v = 0;
  switch (f.index_bits) {
    case 8:
      v = f.index_signed ? static_cast<std::int64_t>(static_cast<std::int8_t>(*p))
                         : static_cast<std::int64_t>(static_cast<std::uint8_t>(*p));
      break;
    case 16: {
      std::uint16_t u = 0;
      std::memcpy(&u, p, 2);
      v = f.index_signed ? static_cast<std::int16_t>(u) : u;
      break;
    }
    case 32: {
      std::uint32_t u = 0;
      std::memcpy(&u, p, 4);
      v = f.index_signed ? static_cast<std::int32_t>(u) : static_cast<std::int64_t>(u);
      break;
    }
    default: {
      std::uint64_t u = 0;
      std::memcpy(&u, p, 8);
      v = f.index_signed ||
                  u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
              ? static_cast<std::int64_t>(u)
              : -1;
    }
  }
  return v;
}

void read_column(const ArrowTable& t, std::size_t b, const ArrowBatchData& d, std::size_t row,
                 std::size_t index, std::size_t c, const SampleRef& out) {
  const ArrowColumn& col = t.columns[c];
  const std::vector<ArrowArray>& arrays = d.columns[c];
  const ArrowArray& top = arrays[0];
  const auto r = static_cast<std::int64_t>(row);
  if (!top.is_valid(r)) return null_value(t, b, row, c, out);
  switch (col.kind) {
    case ArrowKind::scalar: {
      const auto per = static_cast<std::int64_t>(col.per_row);
      if (col.leaf != 0 && null_inside(col, arrays, 1, r * col.inner[0], col.inner[0])) {
        return null_value(t, b, row, c, out, true);
      }
      copy_values(arrays[col.leaf], col.width, r * per, per, out.data(c));
      return;
    }
    case ArrowKind::list: {
      const auto [from, to] = arrow::offsets_at(top, col.large, r);
      if (static_cast<std::uint64_t>(to - from) != col.lengths[index]) {
        throw DataError(at_row(t, b, row, col) + ": " + std::to_string(to - from) +
                        " values where its length said " + std::to_string(col.lengths[index]) +
                        " (the file changed?)");
      }
      const auto per = static_cast<std::int64_t>(col.per_row);
      if (null_inside(col, arrays, 1, from, to - from)) {
        throw DataError(at_row(t, b, row, col) + ": a null inside its values");
      }
      copy_values(arrays[col.leaf], col.width, from * per, (to - from) * per, out.data(c));
      return;
    }
    case ArrowKind::array: {
      const std::int64_t length = col.shape[0] < 0 ? col.lengths[index] : col.shape[0];
      const auto values =
          array_values(col, arrays, r, length, [&] { return at_row(t, b, row, col); });
      if (!values) return null_value(t, b, row, c, out, true);
      copy_values(arrays[col.leaf], col.width, values->first, values->second, out.data(c));
      return;
    }
    case ArrowKind::bytes: {
      const auto v = arrow::binary_value(top, col.large, r);
      if (v.size() != out.nbytes(c)) {
        throw DataError(at_row(t, b, row, col) + ": " + std::to_string(v.size()) +
                        " bytes where its length said " + std::to_string(out.nbytes(c)));
      }
      if (!v.empty()) std::memcpy(out.data(c), v.data(), v.size());
      return;
    }
    case ArrowKind::image: {
      const ArrowArray& bytes = arrays[col.leaf];
      if (!bytes.is_valid(r)) return null_value(t, b, row, c, out);
      decode_image(arrow::binary_value(bytes, col.large, r), t.options.image, out.seed(),
                   {out.as<std::uint8_t>(c), out.nbytes(c)}, at_row(t, b, row, col));
      return;
    }
    case ArrowKind::audio: {
      const ArrowArray& bytes = arrays[col.leaf];
      if (!bytes.is_valid(r)) return null_value(t, b, row, c, out);
      decode_audio(arrow::binary_value(bytes, col.large, r), t.options.audio_options, out.seed(),
                   {out.as<float>(c), out.nbytes(c) / sizeof(float)}, at_row(t, b, row, col));
      return;
    }
    case ArrowKind::categorical: {
      const auto v = arrow::binary_value(top, col.large, r);
      const std::string_view text(reinterpret_cast<const char*>(v.data()), v.size());
      const auto it = std::lower_bound(col.categories.begin(), col.categories.end(), text);
      if (it == col.categories.end() || *it != text) {
        throw DataError(at_row(t, b, row, col) +
                        ": a value not met when the file was opened (the file changed?)");
      }
      *out.as<std::int64_t>(c) = it - col.categories.begin();
      return;
    }
    case ArrowKind::dictionary: {
      const ArrowBatch& ab = t.batches[b];
      const auto& codes =
          t.files[ab.file].dictionaries[col.dictionary].codes[ab.dictionaries[col.dictionary]];
      const std::int64_t i = dictionary_index(top, col.field, r);
      if (i < 0 || static_cast<std::uint64_t>(i) >= codes.size()) {
        throw DataError(at_row(t, b, row, col) + ": dictionary index " + std::to_string(i) +
                        " of a dictionary of " + std::to_string(codes.size()));
      }
      const std::int64_t code = codes[static_cast<std::size_t>(i)];
      if (code < 0) return null_value(t, b, row, c, out);
      *out.as<std::int64_t>(c) = code;
      return;
    }
  }
}

}  // namespace
}  // namespace detail

ArrowDataset::~ArrowDataset() = default;

std::shared_ptr<ArrowDataset> ArrowDataset::open(std::vector<std::filesystem::path> files,
                                                 TableOptions options) {
  std::shared_ptr<ArrowDataset> ds(new ArrowDataset());
  ds->table_ = detail::open_arrow(std::move(files), std::move(options));
  return ds;
}

std::size_t ArrowDataset::size() const { return table_->size; }

std::vector<FieldSpec> ArrowDataset::fields() const { return table_->fields; }

std::span<const std::size_t> ArrowDataset::shard_starts() const noexcept { return table_->starts; }

void ArrowDataset::will_read(std::span<const std::size_t> indices) const noexcept {
  // A new pass: record batches whose fetch failed in an earlier one are fetched again.
  table_->cache.forget_failures();
  if (table_->ahead) table_->ahead->plan(indices);
}

std::uint64_t ArrowDataset::reader_memory(std::uint64_t sample_bytes) const noexcept {
  static_cast<void>(sample_bytes);
  const detail::ArrowTable& t = *table_;
  if (!t.compressed && !t.remote) return 0;  // views of the mapped files
  return t.cache.reader_memory(t.largest_decoded, t.total_decoded);
}

void ArrowDataset::fit_reader_memory(std::uint64_t bytes) const noexcept {
  const detail::ArrowTable& t = *table_;
  t.cache.fit(bytes, t.largest_decoded);
}

bool ArrowDataset::wants_read_order() const noexcept { return table_->ahead != nullptr; }

double ArrowDataset::network_wait_seconds() const noexcept {
  double total = 0;
  for (const detail::ArrowFile& f : table_->files) {
    if (f.remote) total += f.remote->wait_seconds();
  }
  return total;
}

std::size_t ArrowDataset::num_record_batches() const noexcept { return table_->batches.size(); }

std::uint64_t ArrowDataset::batches_decoded() const noexcept {
  return table_->batches_decoded.load(std::memory_order_relaxed);
}

void ArrowDataset::read(std::size_t index, SampleRef out) const {
  const detail::ArrowTable& t = *table_;
  if (index >= t.size) {
    throw ConfigError(std::string(detail::kArrowWho) + ": sample " + std::to_string(index) +
                      " of " + std::to_string(t.size));
  }
  const auto b = static_cast<std::size_t>(
      std::upper_bound(t.starts.begin(), t.starts.end(), index) - t.starts.begin() - 1);
  detail::HeldBatch& held = detail::held_place(t, b);
  if (held.id != t.id || held.batch != b || held.data == nullptr) {
    if (t.ahead) t.ahead->reading(b);
    const bool kept = t.compressed || t.remote;
    held.data = nullptr;  // let the one held go first
    held.views.reset();
    if (kept) t.held.keep(nullptr);
    std::shared_ptr<const detail::ArrowBatchData> data =
        t.cache.get(b, [&] { return t.decode(b); });
    held.data = data.get();
    if (kept) {
      t.held.keep(std::move(data));
    } else {
      held.views = std::move(data);
    }
    held.id = t.id;
    held.batch = b;
  }
  const detail::ArrowBatchData& d = *held.data;  // held by this thread while it reads
  const std::size_t row = index - t.batches[b].first;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    if (const std::byte* values = d.plain[c]) {
      const std::size_t n = t.columns[c].per_row * t.columns[c].width;
      std::memcpy(out.data(c), values + row * n, n);
    } else {
      detail::read_column(t, b, d, row, index, c, out);
    }
  }
}

void ArrowDataset::prefetch(std::size_t index) const noexcept {
  const detail::ArrowTable& t = *table_;
  if (index >= t.size) return;
  const auto bi = static_cast<std::size_t>(
      std::upper_bound(t.starts.begin(), t.starts.end(), index) - t.starts.begin() - 1);
  const detail::HeldBatch& last = detail::held_place(t, bi);
  if (last.id != t.id || last.batch != bi || last.data == nullptr) return;
  const std::size_t row = index - t.batches[bi].first;
  const detail::ArrowBatchData& d = *last.data;
  // Into the outer caches (locality 1), not L1: a record batch's column buffers often lie a
  // power of two apart (batches of 65,536 rows), so that a row's values of every column fall in
  // one L1 set, and prefetched there they evict each other before the read (bench/tables, 20
  // columns: 0.73 of in memory with L1 prefetches, about 1.1 with these).
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const detail::ArrowColumn& col = t.columns[c];
    if (const std::byte* values = d.plain[c]) {
      __builtin_prefetch(values + row * col.per_row * col.width, 0, 1);
      continue;
    }
    // A value's bytes, or (binary, lists, images) its offsets.
    const bool values = col.kind == detail::ArrowKind::scalar && col.width != 0;
    const std::span<const std::byte> buf =
        d.columns[c][values || col.kind == detail::ArrowKind::image ||
                             col.kind == detail::ArrowKind::audio
                         ? col.leaf
                         : 0]
            .buffers[1];
    const std::size_t at = values ? row * col.per_row * col.width : row * (col.large ? 8 : 4);
    if (at < buf.size()) __builtin_prefetch(buf.data() + at, 0, 1);
  }
}

std::int64_t ArrowDataset::length(std::size_t index, std::size_t field) const {
  const detail::ArrowTable& t = *table_;
  if (field >= t.columns.size() || t.columns[field].lengths.size() != t.size) {
    throw ConfigError(std::string(detail::kArrowWho) + ": length() of field " +
                      std::to_string(field) + ", which is not ragged");
  }
  if (index >= t.size) {
    throw ConfigError(std::string(detail::kArrowWho) + ": length() of sample " +
                      std::to_string(index) + " of " + std::to_string(t.size));
  }
  return t.columns[field].lengths[index];
}

std::int64_t ArrowDataset::max_length(std::size_t field) const {
  const detail::ArrowTable& t = *table_;
  if (field >= t.columns.size()) return -1;
  const detail::ArrowColumn& col = t.columns[field];
  if (col.lengths.size() != t.size) return -1;  // not ragged
  return col.max_length;
}

const std::vector<std::string>& ArrowDataset::categories(std::string_view column) const {
  for (const detail::ArrowColumn& col : table_->columns) {
    if (col.name == column &&
        (col.kind == detail::ArrowKind::categorical || col.kind == detail::ArrowKind::dictionary)) {
      return col.categories;
    }
  }
  throw ConfigError(std::string(detail::kArrowWho) + ": categories(\"" + std::string(column) +
                    "\"): not a categorical or dictionary-encoded column");
}

}  // namespace ferry
