// What ParquetDataset checks of a file's row groups at open (their chunks there, apart, and of
// the shape read) and of a chunk's values when decoded (8- and 16-bit integers in their range).

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "datasets/table/parquet_schema.hpp"
#include "datasets/table/parquet_table.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

using parquet::in_quotes;

constexpr std::string_view kParquetCheckWho = "ParquetDataset";
// The most rows a row group may have: far above what writers make, and pages count in 32 bits.
constexpr std::int64_t kMaxGroupRows = std::int64_t{1} << 31;

template <class T>
void narrow_to(parquet::RawColumn& c, const std::string& where) {
  const std::size_t count = c.fixed.size() / 4;  // a list column's: all its rows' values
  std::vector<std::byte> out(count * sizeof(T));
  for (std::size_t r = 0; r < count; ++r) {
    std::int32_t v = 0;
    std::memcpy(&v, c.fixed.data() + r * 4, 4);
    // A null's slot holds 0; a value outside T is not of the column's type.
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      throw DataError(where + "value " + std::to_string(r) + " is " + std::to_string(v) +
                      ", outside its declared type (" +
                      std::to_string(std::numeric_limits<T>::min()) + " to " +
                      std::to_string(std::numeric_limits<T>::max()) + ")");
    }
    const auto n = static_cast<T>(v);
    std::memcpy(out.data() + r * sizeof(T), &n, sizeof(T));
  }
  c.fixed = std::move(out);
  c.width = sizeof(T);
}

}  // namespace

/// Checks the chunks of the columns read: there, in this file, within its data.
void check_chunks(const ParquetFile& f, std::size_t g, std::size_t data_end,
                  const std::vector<TableColumn>& columns, std::size_t leaves) {
  const FileLabel label{kParquetCheckWho, f.name};
  const parquet::RowGroup& rg = f.groups[g];
  const std::string at = label.prefix() + "row group " + std::to_string(g) + ": ";
  if (rg.num_rows < 0 || rg.num_rows > kMaxGroupRows) {
    throw DataError(at + std::to_string(rg.num_rows) + " rows (0 to 2^31 read)");
  }
  if (rg.columns.size() != leaves) {
    throw DataError(at + std::to_string(rg.columns.size()) + " column chunks for a schema of " +
                    std::to_string(leaves) + " columns");
  }
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const parquet::ColumnChunk& ch = rg.columns[f.leaves[c].leaf];
    const std::string where = at + "column " + in_quotes(columns[c].name) + ": ";
    if (!ch.has_metadata) throw DataError(where + "the chunk has no metadata");
    if (ch.external) throw DataError(where + "the chunk lies in another file, not read");
    if (ch.type != columns[c].physical) {
      throw DataError(where + "the chunk's type differs from the schema's");
    }
    const std::int64_t start = chunk_start(ch);
    if (start < 4 || ch.total_compressed_size < 0 || static_cast<std::uint64_t>(start) > data_end ||
        static_cast<std::uint64_t>(ch.total_compressed_size) >
            data_end - static_cast<std::uint64_t>(start)) {
      throw DataError(where + "the chunk's bytes (" + std::to_string(ch.total_compressed_size) +
                      " from byte " + std::to_string(start) +
                      ") lie outside the file's data (bytes 4 to " + std::to_string(data_end) +
                      ")");
    }
    if (columns[c].kind == TableField::list ? ch.num_values < rg.num_rows
                                            : ch.num_values != rg.num_rows) {
      throw DataError(where + "the chunk holds " + std::to_string(ch.num_values) + " values for " +
                      std::to_string(rg.num_rows) + " rows");
    }
    // A fixed shape (the stored Arrow schema's fixed_size_list sizes): one row's values must be
    // among the chunk's (a forged size of 2^31 - 1 over rows of 2 made a field of 16 GiB).
    if (columns[c].kind == TableField::list && !columns[c].ragged() && rg.num_rows > 0) {
      std::int64_t per_row = 1;
      for (const std::int64_t n : columns[c].shape) per_row *= std::max<std::int64_t>(n, 1);
      if (per_row > ch.num_values) {
        throw DataError(where + "its fixed shape needs " + std::to_string(per_row) +
                        " values a row, the chunk holds " + std::to_string(ch.num_values) +
                        " for " + std::to_string(rg.num_rows) + " rows");
      }
    }
  }
}

/// Refuses column chunks whose bytes overlap (one chunk listed by several row groups, or by two
/// columns): every row they claim would be decoded from the same bytes again, and a small file
/// could claim rows without end. Chunks of the columns read, sorted by where they start.
void check_chunks_apart(const ParquetFile& f, const std::vector<TableColumn>& columns) {
  struct Span {
    std::int64_t start, end;
    std::size_t group, column;
  };
  std::vector<Span> spans;
  for (std::size_t g = 0; g < f.groups.size(); ++g) {
    if (f.groups[g].num_rows == 0) continue;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const parquet::ColumnChunk& ch = f.groups[g].columns[f.leaves[c].leaf];
      const std::int64_t start = chunk_start(ch);
      spans.push_back({start, start + ch.total_compressed_size, g, c});
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return std::tie(a.start, a.group, a.column) < std::tie(b.start, b.group, b.column);
  });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    const Span& a = spans[i - 1];
    const Span& b = spans[i];
    if (b.start < a.end && b.end > b.start && a.end > a.start) {
      throw DataError(FileLabel{kParquetCheckWho, f.name}.prefix() + "row group " +
                      std::to_string(b.group) + ", column " + in_quotes(columns[b.column].name) +
                      ": the chunk's bytes (from byte " + std::to_string(b.start) +
                      ") overlap those of row group " + std::to_string(a.group) + ", column " +
                      in_quotes(columns[a.column].name) + " (bytes " + std::to_string(a.start) +
                      " to " + std::to_string(a.end) + ")");
    }
  }
}

void narrow_int32(parquet::RawColumn& c, DType dtype, const std::string& where) {
  switch (dtype) {
    case DType::i8:
      return narrow_to<std::int8_t>(c, where);
    case DType::u8:
      return narrow_to<std::uint8_t>(c, where);
    case DType::i16:
      return narrow_to<std::int16_t>(c, where);
    case DType::u16:
      return narrow_to<std::uint16_t>(c, where);
    default:
      return;
  }
}

}  // namespace ferry::detail
