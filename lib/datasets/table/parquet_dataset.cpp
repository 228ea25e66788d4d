#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "datasets/table/parquet_ahead.hpp"
#include "datasets/table/parquet_lists.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "datasets/table/parquet_table.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"
#include "ferry/table.hpp"

namespace ferry {
namespace detail {
namespace {

constexpr std::string_view kParquetWho = "ParquetDataset";
using parquet::in_quotes;

/// The chunk's bytes in the mapped file: from its dictionary page (if any) or first data page
/// (checked at open).
std::span<const std::byte> chunk_bytes(const ParquetFile& f, const parquet::ColumnChunk& ch) {
  return f.map->bytes().subspan(static_cast<std::size_t>(chunk_start(ch)),
                                static_cast<std::size_t>(ch.total_compressed_size));
}

/// The row group this thread read last: a read of the same one takes no lock. The table keeps
/// it (ParquetTable::last_groups), so that it goes with the table.
struct LastGroup {
  std::uint64_t id = 0;
  std::size_t group = 0;
  const DecodedGroup* columns = nullptr;
};
thread_local LastGroup t_last;

/// The row groups of the share this thread reads (begin_reads() to end_reads()) that were
/// decoded in the cache when it began: a shuffled share's rows fall in many row groups, and a
/// read or prefetch of a row in one of these takes no lock and no count.
struct HeldGroups {
  static constexpr std::size_t kMost = 16;
  int depth = 0;         // shares begun and not ended: a nested one (a fill run inside a wait of
                         // this thread's) keeps the outer share's groups, which its reads use
  std::uint64_t id = 0;  // the table's; 0: none held
  std::vector<std::size_t> groups;
  std::vector<std::shared_ptr<const DecodedGroup>> decoded;

  const DecodedGroup* find(std::uint64_t table, std::size_t g) const noexcept {
    if (id != table) return nullptr;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      if (groups[i] == g) return decoded[i].get();
    }
    return nullptr;
  }
  void clear() noexcept {
    id = 0;
    groups.clear();
    decoded.clear();
  }
};
thread_local HeldGroups t_parquet_held;

/// The row group holding sample `index` (< size).
std::size_t group_of(const ParquetTable& t, std::size_t index) noexcept {
  return static_cast<std::size_t>(std::upper_bound(t.starts.begin(), t.starts.end(), index) -
                                  t.starts.begin() - 1);
}

/// Field c of `out` filled with NaN (Missing::nan's null): false, and nothing written, for a
/// dtype other than f16, f32 and f64.
bool fill_nan(DType dtype, const SampleRef& out, std::size_t c) {
  if (dtype == DType::f16) {
    std::fill_n(out.as<std::uint16_t>(c), out.nbytes(c) / 2, std::uint16_t{0x7e00});
    return true;
  }
  if (dtype == DType::f32) {
    std::fill_n(out.as<float>(c), out.nbytes(c) / 4, std::numeric_limits<float>::quiet_NaN());
    return true;
  }
  if (dtype == DType::f64) {
    std::fill_n(out.as<double>(c), out.nbytes(c) / 8, std::numeric_limits<double>::quiet_NaN());
    return true;
  }
  return false;
}

/// "ParquetDataset: <file>: row group <g>, row <r>, column "<c>"" (r counted in the file).
std::string at_row(const ParquetTable& t, std::size_t g, std::size_t row, std::size_t c) {
  const TableGroup& tg = t.groups[g];
  return std::string(kParquetWho) + ": " + t.files[tg.file].name + ": row group " +
         std::to_string(tg.group) + ", row " + std::to_string(tg.file_row + row) + ", column " +
         in_quotes(t.columns[c].name);
}

/// Row `row` (sample `index`) of list column c, of row group g, into `out`: its values; a null
/// row or a null inside as TableOptions::missing says (Missing::nan fills a fixed shape of
/// floats with NaN; a ragged list's null is an error, as ArrowDataset's).
void read_list(const ParquetTable& t, std::size_t g, const parquet::RawColumn& v, std::size_t row,
               std::size_t index, std::size_t c, const SampleRef& out) {
  const TableColumn& col = t.columns[c];
  const bool null_row = !v.is_valid(row);
  if (!v.wrong.empty() && !null_row) {
    const auto it = std::lower_bound(
        v.wrong.begin(), v.wrong.end(), row,
        [](const parquet::RawColumn::WrongLength& w, std::size_t r) { return w.row < r; });
    if (it != v.wrong.end() && it->row == row) {
      std::string shape;
      for (const std::int64_t n : col.shape) {
        shape += shape.empty() ? "(" : ", ";
        shape += n < 0 ? "None" : std::to_string(n);
      }
      throw DataError(at_row(t, g, row, c) + ": a list of " + std::to_string(it->length) +
                      " at dimension " + std::to_string(it->level) + " where its shape " + shape +
                      ") has " + std::to_string(col.shape[it->level]));
    }
  }
  if (null_row || (!v.null_inside.empty() && v.null_inside[row] != 0)) {
    const bool floating = col.dtype == DType::f32 || col.dtype == DType::f64;
    if (t.options.missing == Missing::nan && !col.ragged() && fill_nan(col.dtype, out, c)) return;
    throw DataError(at_row(t, g, row, c) + (null_row ? ": a null" : ": a null inside its values") +
                    (floating && !col.ragged()
                         ? std::string(" (TableOptions::missing is Missing::error)")
                         : std::string(" (Missing::nan reads nulls only in float and categorical "
                                       "columns of a fixed shape)")));
  }
  const std::size_t from = v.offsets[row] * v.width;
  const std::size_t bytes = v.offsets[row + 1] * v.width - from;
  if (col.ragged() && v.lengths[row] != col.lengths[index]) {
    throw DataError(at_row(t, g, row, c) + ": " + std::to_string(v.lengths[row]) +
                    " values where its length said " + std::to_string(col.lengths[index]) +
                    " (the file changed?)");
  }
  if (bytes != out.nbytes(c)) {
    throw DataError(at_row(t, g, row, c) + ": " + std::to_string(bytes) +
                    " bytes of values where its shape makes " + std::to_string(out.nbytes(c)));
  }
  if (bytes > 0) std::memcpy(out.data(c), v.fixed.data() + from, bytes);
}

}  // namespace

ParquetTable::ParquetTable() = default;
ParquetTable::~ParquetTable() = default;

parquet::RawColumn ParquetTable::decode_raw(std::size_t g, std::size_t c,
                                            std::span<const std::byte> bytes,
                                            const parquet::RawColumn& shape) const {
  const TableGroup& tg = groups[g];
  const ParquetFile& f = files[tg.file];
  const parquet::ColumnChunk& ch = f.groups[tg.group].columns[f.leaves[c].leaf];
  std::vector<std::byte> fetched;  // a URL's chunk, read for this call alone
  if (bytes.empty() && f.remote) {
    fetched = fetch_chunk(g, c);
    bytes = fetched;
  } else if (bytes.empty()) {
    bytes = chunk_bytes(f, ch);
  }
  chunks_decoded.fetch_add(1, std::memory_order_relaxed);
  try {
    if (columns[c].kind == TableField::list) {
      return parquet::decode_list_chunk(bytes, columns[c].physical, ch.codec, f.leaves[c].lists,
                                        columns[c].shape, static_cast<std::size_t>(ch.num_values),
                                        tg.rows);
    }
    return parquet::decode_chunk(bytes, columns[c].physical, ch.codec, f.leaves[c].max_def, tg.rows,
                                 shape);
  } catch (const parquet::ChunkError& e) {
    throw DataError(FileLabel{kParquetWho, f.name}.prefix() + "row group " +
                    std::to_string(tg.group) + " (rows " + std::to_string(tg.file_row) + " to " +
                    std::to_string(tg.file_row + tg.rows - 1) + "), column " +
                    in_quotes(columns[c].name) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    // Its values are more than this process can hold (a dictionary's value repeated by every
    // row may make gigabytes of a few bytes): the place, not a bare bad_alloc.
    throw DataError(FileLabel{kParquetWho, f.name}.prefix() + "row group " +
                    std::to_string(tg.group) + " (rows " + std::to_string(tg.file_row) + " to " +
                    std::to_string(tg.file_row + tg.rows - 1) + "), column " +
                    in_quotes(columns[c].name) +
                    ": out of memory: its decoded values are more than this process can allocate");
  }
}

std::shared_ptr<const DecodedGroup> ParquetTable::decode(std::size_t g) const {
  auto d = std::make_shared<DecodedGroup>();
  d->columns.reserve(columns.size());
  // A URL's chunks of this row group, fetched together and dropped once decoded.
  FetchedChunks fetched;
  if (files[groups[g].file].remote) {
    try {
      std::optional<FetchedChunks> early = ahead ? ahead->take(g) : std::nullopt;
      fetched = early ? std::move(*early) : fetch_chunks(g);
    } catch (const DataError& e) {  // named by the row group too
      const TableGroup& tg = groups[g];
      const std::string label = FileLabel{kParquetWho, files[tg.file].name}.prefix();
      std::string why = e.what();
      if (why.starts_with(label)) why.erase(0, label.size());
      throw DataError(label + "row group " + std::to_string(tg.group) + " (rows " +
                      std::to_string(tg.file_row) + " to " +
                      std::to_string(tg.file_row + tg.rows - 1) + "): " + why);
    }
  }
  for (std::size_t c = 0; c < columns.size(); ++c) {
    std::span<const std::byte> bytes =
        fetched.chunks.empty() ? std::span<const std::byte>{} : fetched.chunks[c];
    std::vector<std::byte> kept_chunk;  // open() fetched it
    if (bytes.empty() && files[groups[g].file].remote) {
      kept_chunk = take_kept(g, c);
      bytes = kept_chunk;
    }
    parquet::RawColumn raw = decode_raw(g, c, bytes);
    const TableColumn& col = columns[c];
    if (col.kind == TableField::scalar || col.kind == TableField::list) {
      if (col.physical == parquet::Physical::int32 && dtype_size(col.dtype) < 4) {
        const TableGroup& tg = groups[g];
        narrow_int32(raw, col.dtype,
                     FileLabel{kParquetWho, files[tg.file].name}.prefix() + "row group " +
                         std::to_string(tg.group) + ", column " + in_quotes(col.name) + ": ");
      }
    } else if (col.kind == TableField::categorical) {
      std::vector<std::byte> codes(raw.rows * 8);
      for (std::size_t r = 0; r < raw.rows; ++r) {
        std::int64_t code = -1;
        if (raw.is_valid(r)) {
          const auto v = raw.value(r);
          const std::string_view text(reinterpret_cast<const char*>(v.data()), v.size());
          const auto it = std::lower_bound(col.categories.begin(), col.categories.end(), text);
          if (it == col.categories.end() || *it != text) {
            throw DataError(FileLabel{kParquetWho, files[groups[g].file].name}.prefix() + "row " +
                            std::to_string(groups[g].file_row + r) + ", column " +
                            in_quotes(col.name) +
                            ": a value not met when the file was opened "
                            "(the file changed?)");
          }
          code = it - col.categories.begin();
        }
        std::memcpy(codes.data() + r * 8, &code, 8);
      }
      raw.fixed = std::move(codes);
      raw.width = 8;
      raw.offsets.clear();
      raw.bytes.clear();
    }
    d->columns.push_back(std::move(raw));
  }
  return d;
}

}  // namespace detail

ParquetDataset::~ParquetDataset() = default;

std::shared_ptr<ParquetDataset> ParquetDataset::open(std::vector<std::filesystem::path> files,
                                                     TableOptions options) {
  std::shared_ptr<ParquetDataset> ds(new ParquetDataset());
  ds->table_ = detail::open_parquet(std::move(files), std::move(options));
  return ds;
}

std::size_t ParquetDataset::size() const { return table_->size; }

std::vector<FieldSpec> ParquetDataset::fields() const { return table_->fields; }

std::span<const std::size_t> ParquetDataset::shard_starts() const noexcept {
  return table_->starts;
}

void ParquetDataset::will_read(std::span<const std::size_t> indices) const noexcept {
  // A new pass: row groups whose fetch failed in an earlier one are fetched again.
  table_->cache.forget_failures();
  if (table_->ahead) table_->ahead->plan(indices);
}

bool ParquetDataset::wants_read_order() const noexcept { return table_->ahead != nullptr; }

double ParquetDataset::network_wait_seconds() const noexcept {
  double total = 0;
  for (const detail::ParquetFile& f : table_->files) {
    if (f.remote) total += f.remote->wait_seconds();
  }
  return total;
}

std::uint64_t ParquetDataset::reader_memory(std::uint64_t sample_bytes) const noexcept {
  static_cast<void>(sample_bytes);
  const detail::ParquetTable& t = *table_;
  // The row groups kept and decoded, and one decode's scratch (its pages as they decompress).
  const std::uint64_t kept = t.cache.reader_memory(t.largest_decoded, t.total_decoded);
  return kept > ~t.largest_scratch ? ~std::uint64_t{0} : kept + t.largest_scratch;
}

void ParquetDataset::fit_reader_memory(std::uint64_t bytes) const noexcept {
  const detail::ParquetTable& t = *table_;
  t.cache.fit(bytes > t.largest_scratch ? bytes - t.largest_scratch : 0, t.largest_decoded);
}

std::size_t ParquetDataset::num_row_groups() const noexcept { return table_->groups.size(); }

std::uint64_t ParquetDataset::chunks_decoded() const noexcept {
  return table_->chunks_decoded.load(std::memory_order_relaxed);
}

void ParquetDataset::read(std::size_t index, SampleRef out) const {
  using detail::TableField;
  const detail::ParquetTable& t = *table_;
  if (index >= t.size) {
    throw ConfigError(std::string(detail::kParquetWho) + ": sample " + std::to_string(index) +
                      " of " + std::to_string(t.size));
  }
  const std::size_t g = detail::group_of(t, index);
  const detail::DecodedGroup* d = detail::t_parquet_held.find(t.id, g);
  if (d == nullptr) {
    detail::LastGroup& last = detail::t_last;
    if (last.id != t.id || last.group != g || last.columns == nullptr) {
      last.columns = nullptr;
      t.last_groups.keep(nullptr);  // a thread holds one row group besides the cache's and its
                                    // share's
      std::shared_ptr<const detail::DecodedGroup> columns =
          t.cache.get(g, [&] { return t.decode(g); });
      last.columns = columns.get();
      t.last_groups.keep(std::move(columns));
      last.id = t.id;
      last.group = g;
    }
    d = last.columns;
  }
  const std::size_t row = index - t.groups[g].first;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const detail::TableColumn& col = t.columns[c];
    const detail::parquet::RawColumn& v = d->columns[c];
    if (col.kind == TableField::list) {
      detail::read_list(t, g, v, row, index, c, out);
      continue;
    }
    if (!v.is_valid(row)) {
      const bool nan = t.options.missing == Missing::nan;
      if (nan && col.kind == TableField::scalar && detail::fill_nan(col.dtype, out, c)) continue;
      if (nan && col.kind == TableField::categorical) {
        *out.as<std::int64_t>(c) = -1;
        continue;
      }
      const detail::TableGroup& tg = t.groups[g];
      throw DataError(std::string(detail::kParquetWho) + ": " + t.files[tg.file].name + ": row " +
                      std::to_string(tg.file_row + row) + ", column " +
                      detail::parquet::in_quotes(col.name) + ": a null" +
                      (col.kind == TableField::bytes || !is_floating(col.dtype)
                           ? std::string(" (Missing::nan reads nulls only in float and "
                                         "categorical columns)")
                           : std::string(" (TableOptions::missing is Missing::error)")));
    }
    if (col.kind == TableField::image) {
      const detail::TableGroup& tg = t.groups[g];
      decode_image(v.value(row), t.options.image, out.seed(),
                   {out.as<std::uint8_t>(c), out.nbytes(c)},
                   std::string(detail::kParquetWho) + ": " + t.files[tg.file].name + ": row " +
                       std::to_string(tg.file_row + row) + ", column " +
                       detail::parquet::in_quotes(col.name));
    } else if (col.kind == TableField::audio) {
      const detail::TableGroup& tg = t.groups[g];
      decode_audio(v.value(row), t.options.audio_options, out.seed(),
                   {out.as<float>(c), out.nbytes(c) / sizeof(float)},
                   std::string(detail::kParquetWho) + ": " + t.files[tg.file].name + ": row " +
                       std::to_string(tg.file_row + row) + ", column " +
                       detail::parquet::in_quotes(col.name));
    } else if (col.kind == TableField::bytes) {
      const auto bytes = v.value(row);
      if (bytes.size() != out.nbytes(c)) {
        throw DataError(std::string(detail::kParquetWho) + ": " + t.files[t.groups[g].file].name +
                        ": row " + std::to_string(t.groups[g].file_row + row) + ", column " +
                        detail::parquet::in_quotes(col.name) + ": " + std::to_string(bytes.size()) +
                        " bytes where its length said " + std::to_string(out.nbytes(c)));
      }
      if (!bytes.empty()) std::memcpy(out.data(c), bytes.data(), bytes.size());
    } else {
      const std::byte* from = v.fixed.data() + row * v.width;
      switch (v.width) {  // the common widths copied inline, not through a call
        case 4:
          std::memcpy(out.data(c), from, 4);
          break;
        case 8:
          std::memcpy(out.data(c), from, 8);
          break;
        default:
          std::memcpy(out.data(c), from, v.width);
      }
    }
  }
}

void ParquetDataset::prefetch(std::size_t index) const noexcept {
  // Only from the row groups this thread holds (no lock): its columns' lines for this row.
  const detail::ParquetTable& t = *table_;
  if (index >= t.size) return;
  const std::size_t g = detail::group_of(t, index);
  const detail::DecodedGroup* d = detail::t_parquet_held.find(t.id, g);
  if (d == nullptr) {
    const detail::LastGroup& last = detail::t_last;
    if (last.id != t.id || last.group != g || last.columns == nullptr) return;
    d = last.columns;
  }
  const std::size_t row = index - t.groups[g].first;
  for (const detail::parquet::RawColumn& c : d->columns) {
    if (c.width != 0 && !c.list) {
      __builtin_prefetch(c.fixed.data() + row * c.width, 0, 1);
    } else {  // byte arrays and lists: their offsets
      __builtin_prefetch(c.offsets.data() + row, 0, 1);
    }
    if (!c.valid.empty()) __builtin_prefetch(c.valid.data() + row, 0, 1);
  }
}

void ParquetDataset::begin_reads(std::span<const std::size_t> indices,
                                 std::span<const SampleRef> out) const noexcept {
  static_cast<void>(out);
  const detail::ParquetTable& t = *table_;
  detail::HeldGroups& held = detail::t_parquet_held;
  if (held.depth++ > 0) return;
  held.clear();
  held.id = t.id;
  try {
    for (const std::size_t index : indices) {
      if (held.groups.size() == detail::HeldGroups::kMost) break;
      if (index >= t.size) continue;
      const std::size_t g = detail::group_of(t, index);
      if (std::find(held.groups.begin(), held.groups.end(), g) != held.groups.end()) continue;
      std::shared_ptr<const detail::DecodedGroup> d = t.cache.find(g);
      if (!d) continue;  // read() decodes it
      held.groups.push_back(g);
      held.decoded.push_back(std::move(d));
    }
  } catch (...) {  // out of memory: a hint dropped
    held.clear();
  }
}

void ParquetDataset::end_reads() const noexcept {
  detail::HeldGroups& held = detail::t_parquet_held;
  if (held.depth > 0 && --held.depth == 0) held.clear();
}

std::int64_t ParquetDataset::length(std::size_t index, std::size_t field) const {
  const detail::ParquetTable& t = *table_;
  if (field >= t.columns.size() || !t.columns[field].ragged()) {
    throw ConfigError(std::string(detail::kParquetWho) + ": length() of field " +
                      std::to_string(field) + ", which is not ragged");
  }
  if (index >= t.size) {
    throw ConfigError(std::string(detail::kParquetWho) + ": length() of sample " +
                      std::to_string(index) + " of " + std::to_string(t.size));
  }
  return t.columns[field].lengths[index];
}

std::int64_t ParquetDataset::max_length(std::size_t field) const {
  const detail::ParquetTable& t = *table_;
  if (field >= t.columns.size() || !t.columns[field].ragged()) return -1;
  return t.columns[field].max_length;
}

const std::vector<std::string>& ParquetDataset::categories(std::string_view column) const {
  for (const detail::TableColumn& col : table_->columns) {
    if (col.name == column && col.kind == detail::TableField::categorical) return col.categories;
  }
  throw ConfigError(std::string(detail::kParquetWho) + ": categories(\"" + std::string(column) +
                    "\"): not a categorical column (TableOptions::categorical)");
}

}  // namespace ferry
