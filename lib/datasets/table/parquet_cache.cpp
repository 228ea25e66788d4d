#include "datasets/table/parquet_cache.hpp"

#include "datasets/table/parquet_table.hpp"

namespace ferry::detail {

std::size_t decoded_bytes(const DecodedGroup& d) noexcept {
  std::size_t n = 0;
  for (const parquet::RawColumn& c : d.columns) {
    n += c.valid.size() + c.fixed.size() + c.offsets.size() * sizeof(std::uint64_t) +
         c.bytes.size() + c.lengths.size() * sizeof(std::uint32_t) + c.null_inside.size() +
         c.wrong.size() * sizeof(parquet::RawColumn::WrongLength);
  }
  return n;
}

std::uint64_t decode_scratch_bytes(const ParquetTable& t, std::size_t g) noexcept {
  const TableGroup& tg = t.groups[g];
  const ParquetFile& f = t.files[tg.file];
  std::uint64_t most = 0;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const auto& ch = f.groups[tg.group].columns[f.leaves[c].leaf];
    const auto pages =
        static_cast<std::uint64_t>(std::max<std::int64_t>(ch.total_uncompressed_size, 0));
    const std::uint64_t indices = std::uint64_t{4} * tg.rows;
    most = std::max(most, pages > ~indices ? ~std::uint64_t{0} : pages + indices);
  }
  return most;
}

std::size_t estimated_decoded_bytes(const ParquetTable& t, std::size_t g) noexcept {
  const TableGroup& tg = t.groups[g];
  const ParquetFile& f = t.files[tg.file];
  const std::size_t rows = tg.rows;
  std::size_t n = 0;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    const TableColumn& col = t.columns[c];
    n += rows;  // validity
    if (col.kind != TableField::scalar && col.kind != TableField::categorical) {
      n += (rows + 1) * sizeof(std::uint64_t);  // offsets
    }
    const std::size_t width = col.kind == TableField::categorical ? 8 : dtype_size(col.dtype);
    if (col.kind == TableField::scalar || col.kind == TableField::categorical) {
      n += rows * width;
    } else if (col.kind == TableField::image || col.kind == TableField::audio) {
      n += static_cast<std::size_t>(
          f.groups[tg.group].columns[f.leaves[c].leaf].total_compressed_size);
    } else {  // bytes and lists: their lengths at open, or a fixed shape
      std::size_t inner = 1;
      for (std::size_t d = col.ragged() ? 1 : 0; d < col.shape.size(); ++d) {
        inner *= static_cast<std::size_t>(col.shape[d]);
      }
      if (col.kind == TableField::bytes) inner = 1;
      if (col.ragged()) {
        for (std::size_t r = tg.first; r < tg.first + rows && r < col.lengths.size(); ++r) {
          n += col.lengths[r] * inner * width;
        }
      } else {
        n += rows * inner * width;
      }
    }
  }
  return n;
}

}  // namespace ferry::detail
