#pragma once

// ParquetDataset's state: the files' index (row groups, their rows and column chunks), the
// columns read and how each becomes a field, and what open() learnt of them (categories,
// ragged lengths).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "datasets/remote/range_reader.hpp"
#include "datasets/table/parquet_cache.hpp"
#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_format.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "datasets/table/thread_kept.hpp"
#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/table.hpp"

namespace ferry::detail {

/// How a column's values become its field.
enum class TableField {
  scalar,       ///< a number: dtype [] from the physical value
  bytes,        ///< ragged u8 [L]: the bytes as stored
  categorical,  ///< i64 [] codes into `categories`
  image,        ///< u8 image_shape(): a BYTE_ARRAY or an Image struct's `bytes`, decoded
  audio,        ///< f32 audio_field(): a BYTE_ARRAY or an Audio struct's `bytes`, decoded
  list,         ///< a list (lists of lists) of numbers: dtype `shape` (ragged first or fixed)
};

/// A column read, as the first file declares it.
struct TableColumn {
  std::string name;
  parquet::Physical physical = parquet::Physical::int32;
  TableField kind = TableField::scalar;
  DType dtype = DType::i32;
  std::vector<std::string> categories;  ///< sorted; categorical only
  std::vector<std::uint32_t> lengths;   ///< per sample; bytes and ragged lists only
  std::int64_t max_length = 0;          ///< bytes and ragged lists only
  /// list only: per level of lists its length (-1: ragged, the first level only).
  std::vector<std::int64_t> shape;
  bool ragged() const noexcept {
    return kind == TableField::bytes || (!shape.empty() && shape[0] < 0);
  }
};

/// Where a column lies in one file: its leaf (column chunk index) and definition level; a list
/// column's levels.
struct TableLeaf {
  std::size_t leaf = 0;
  int max_def = 0;
  parquet::ListLevels lists;
};

struct ParquetFile {
  std::string name;  ///< as the user gave it, for messages
  std::unique_ptr<MappedFile> map;
  std::unique_ptr<remote::RangeReader> remote;  ///< a URL's, read by ranges (no map then)
  std::vector<parquet::RowGroup> groups;
  std::vector<TableLeaf> leaves;  ///< per column read
};

class AheadFetcher;

/// One row group of one file, at its place among all the rows.
struct TableGroup {
  std::size_t file = 0;
  std::size_t group = 0;
  std::size_t first = 0;  ///< first sample
  std::size_t rows = 0;
  std::size_t file_row = 0;  ///< its first row's place in its file
};

/// A row group's columns, decoded into their fields' form: fixed holds `rows` values of the
/// field's dtype (codes for a categorical column); bytes columns keep offsets and bytes.
struct FERRY_HIDDEN DecodedGroup {
  std::vector<parquet::RawColumn> columns;
};

struct FERRY_HIDDEN ParquetTable {
  std::uint64_t id = 0;  ///< unique per dataset: the key of the threads' decoded row groups
  TableOptions options;
  std::vector<ParquetFile> files;
  std::vector<TableColumn> columns;
  std::vector<TableGroup> groups;
  std::vector<std::size_t> starts;  ///< groups' first samples, then size
  std::size_t size = 0;
  std::vector<FieldSpec> fields;
  mutable std::atomic<std::uint64_t> chunks_decoded{0};
  /// Decoded row groups, shared by the reading threads: up to 512 MiB of them.
  static constexpr std::size_t kDecodedBudget = std::size_t{512} << 20;
  mutable GroupCache cache{kDecodedBudget};
  /// The row group each thread read last (its LastGroup's), kept with the table.
  mutable ThreadKept<DecodedGroup> last_groups;
  /// The largest row group's decoded columns, as estimated at open (estimated_decoded_bytes()).
  std::size_t largest_decoded = 0;
  /// Every row group's decoded columns together, as estimated at open: the most the cache and
  /// the threads' last row groups can hold (each row group decoded at most once at a time).
  std::uint64_t total_decoded = 0;
  /// What a row group's decode holds besides its values, at most (decode_scratch_bytes()).
  std::uint64_t largest_scratch = 0;

  /// Decodes row group g's columns into their fields' form.
  /// \throws DataError naming the file, the row group, the column and the page.
  std::shared_ptr<const DecodedGroup> decode(std::size_t g) const;
  /// Decodes one column of row group g as stored, from `bytes` (its chunk's), or, when empty,
  /// from the mapped file or a range of the URL. \throws DataError as decode().
  parquet::RawColumn decode_raw(std::size_t g, std::size_t column,
                                std::span<const std::byte> bytes = {},
                                const parquet::RawColumn& shape = {}) const;
  /// The chunks of row group g's columns read, fetched from a URL (parquet_ranges.cpp): one
  /// ranged GET for chunks that lie close together, no byte of the other columns' chunks
  /// farther than kRangeGap. chunks[c] is column c's.
  struct FetchedChunks {
    std::vector<std::vector<std::byte>> buffers;
    std::vector<std::span<const std::byte>> chunks;
  };
  FetchedChunks fetch_chunks(std::size_t g) const;
  /// One column chunk of row group g, fetched from its URL in one ranged GET.
  std::vector<std::byte> fetch_chunk(std::size_t g, std::size_t column) const;

  /// A URL's chunks that open() fetched (byte-array columns: their lengths and categories),
  /// kept for the first decode of their row group, which takes them instead of fetching them
  /// again; fetch_chunks() leaves them out. At most kKeptBudget bytes are kept: past that, a
  /// chunk is fetched again when decoded.
  static constexpr std::size_t kKeptBudget = std::size_t{256} << 20;
  void keep_chunk(std::size_t g, std::size_t column, std::vector<std::byte> bytes);
  bool is_kept(std::size_t g, std::size_t column) const;
  /// The kept chunk (then no longer kept), or an empty one.
  std::vector<std::byte> take_kept(std::size_t g, std::size_t column) const;
  mutable std::mutex kept_mutex;
  mutable std::map<std::pair<std::size_t, std::size_t>, std::vector<std::byte>> kept;
  std::size_t kept_bytes = 0;  ///< kept by open(), taken or not

  ParquetTable();
  ~ParquetTable();
  /// URLs' row groups fetched ahead in the loader's order (parquet_ahead.hpp); null without
  /// URLs. The last member: it goes first, while the files it reads are still there.
  std::unique_ptr<AheadFetcher> ahead;
};

/// Row group g's decoded columns' bytes, estimated from the index: the fields' bytes of its rows
/// (a ragged field's by its lengths), validity and offsets, and an image's or audio's encoded
/// bytes by its column chunk's size.
std::size_t estimated_decoded_bytes(const ParquetTable& t, std::size_t g) noexcept;
/// What decoding row group g holds besides its values, at most: a column's pages as they
/// decompress (its chunk's uncompressed size, as the footer gives it) and its dictionary
/// indices (4 bytes a row).
std::uint64_t decode_scratch_bytes(const ParquetTable& t, std::size_t g) noexcept;

/// Where a column chunk's bytes start (its dictionary page, else its first data page).
std::int64_t chunk_start(const parquet::ColumnChunk& ch) noexcept;

/// Checks row group g's chunks of the columns read (parquet_checks.cpp): there, in this file,
/// within its data (which ends at `data_end`), holding the values their rows and shapes need.
/// \throws DataError naming the file, the row group and the column.
void check_chunks(const ParquetFile& f, std::size_t g, std::size_t data_end,
                  const std::vector<TableColumn>& columns, std::size_t leaves);
/// Refuses column chunks of the columns read whose bytes overlap (one chunk listed by several
/// row groups, or by two columns): every row they claim would be decoded from the same bytes
/// again, and a small file could claim rows without end. \throws DataError naming both.
void check_chunks_apart(const ParquetFile& f, const std::vector<TableColumn>& columns);
/// Narrows a chunk's int32 values to `dtype` (8 or 16 bits, signed or not), in place; other
/// dtypes are left as they are. \throws DataError `where` + a value its declared type cannot hold.
void narrow_int32(parquet::RawColumn& c, DType dtype, const std::string& where);

/// Chunks of one row group closer than this are fetched in one ranged GET (the gap read too).
inline constexpr std::uint64_t kRangeGap = std::uint64_t{8} << 10;

/// Opens the files and builds the index (parquet_open.cpp).
std::unique_ptr<ParquetTable> open_parquet(std::vector<std::filesystem::path> files,
                                           TableOptions options);

}  // namespace ferry::detail
