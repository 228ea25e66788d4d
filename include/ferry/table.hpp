#pragma once

/// \file Tables in Parquet files and Arrow IPC files: the files that Hugging Face `datasets`,
/// pandas, Polars, Spark and DuckDB write.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/audio.hpp"
#include "ferry/csv_dataset.hpp"  // Missing
#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/image.hpp"
#include "ferry/remote.hpp"

namespace ferry {

namespace detail {
struct ParquetTable;
struct ArrowTable;
}  // namespace detail

/// How a table's columns become fields.
struct TableOptions {
  /// The columns read, as fields in this order; empty: all (in the file's order).
  std::vector<std::string> columns;
  /// Columns of encoded images (binary, or HF's Image struct{bytes, path}), decoded as
  /// ImageFolder does (a null `path` beside bytes is not a null sample; a null `bytes` is a
  /// null). Read by ArrowDataset and ParquetDataset.
  std::vector<std::string> images;
  ImageOptions image;  ///< for those columns
  /// Columns of encoded sound files (binary, or HF's Audio struct{bytes, path}), decoded as
  /// AudioFolder does with audio_options, whose sample_rate and channels must not be 0 and
  /// whose clip_seconds must be > 0 (whole files of a table are not read yet: ConfigError).
  /// A column whose Hugging Face feature is Audio is read as if named here.
  std::vector<std::string> audio;
  AudioOptions audio_options;  ///< for those columns
  /// String columns read as i64 [] codes: the column's distinct values (over all the files)
  /// numbered in sorted byte order from 0, as CsvDataset; categories(name) lists them.
  std::vector<std::string> categorical;
  /// A null: DataError naming the file, the row and the column, raised when that row is read;
  /// Missing::nan: NaN in a float column, -1 as a categorical code (a null elsewhere stays an
  /// error).
  Missing missing = Missing::error;
  /// Files given as URLs (http, https, s3, file), read by ranges: the footer (or an Arrow
  /// stream's message headers), then the column chunks or buffers needed (ParquetDataset,
  /// ArrowDataset). Of these options: retries and timeout_seconds.
  RemoteOptions remote;
};

/// Parquet files: the rows of all the files, in order, are the samples; each column read is a
/// field named as the column.
///
/// Column types and their fields:
/// - boolean -> u8 []; INT32 / INT64 with their logical (or converted) integer types ->
///   i8, i16, i32, i64, u8, u16, u32, u64 [] (the type the column declares); FLOAT -> f32 [];
///   DOUBLE -> f64 []; FLOAT16 (FIXED_LEN_BYTE_ARRAY(2), as arrow-rs and pyarrow write
///   float16) -> f16 [] (a null: NaN under Missing::nan).
/// - BYTE_ARRAY (binary, string) -> ragged u8 [L], the bytes as stored; named in
///   TableOptions::categorical -> i64 [] codes; named in TableOptions::images -> u8
///   image_shape(options.image), decoded as ImageFolder's (image_field()).
/// - Hugging Face's Image struct (a group of two BYTE_ARRAY leaves, `bytes` and `path`, neither
///   repeated), named in TableOptions::images: decoded as ImageFolder's from `bytes` (the `path`
///   chunk is not read; a null `path` is not a null sample, a null struct or `bytes` is).
/// - A list of those numbers (a LIST group, 3-level or a legacy 2-level form, or a repeated
///   number) -> ragged dtype [L]. As the Arrow schema the writer stored says (ARROW:schema, as
///   pyarrow and arrow-rs write it): fixed_size_list<T>[n] -> dtype [n], nested ones
///   [n, m, ...], list<fixed_size_list<T>[m]> -> ragged [L, m], Hugging Face's Array2D..Array5D
///   -> their metadata's shape. A row whose lists are not of that shape is a DataError naming
///   the file, row group, row and column when it is read. A null list or a null inside follows
///   TableOptions::missing as ArrowDataset's (NaN slots only in a fixed shape of floats).
/// - Any other type in a column that is read (timestamps, decimals, maps, other structs, lists
///   of lists that vary inside, lists of byte arrays, other fixed-length byte arrays, INT96):
///   ConfigError naming the column and its type.
///
/// What is read: PLAIN, dictionary (PLAIN_DICTIONARY, RLE_DICTIONARY), DELTA_BINARY_PACKED,
/// DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY and BYTE_STREAM_SPLIT values, RLE booleans,
/// RLE/bit-packed repetition and definition levels (a row of pages v1 may span pages), data
/// pages v1 and v2; uncompressed, snappy, gzip, zstd,
/// LZ4_RAW, LZ4 (Hadoop's framing or a bare block) and brotli chunks (LZO: a DataError naming
/// the codec, when the chunk is read).
///
/// Random access: open() reads each file's footer and keeps rows per row group and the place of
/// each column chunk. A read decodes its row group's selected columns whole, once: the decoded
/// row groups are shared by the reading threads and kept, the least recently used leaving when
/// they pass 512 MiB (at least two are kept, and none a thread is reading). These count in
/// LoaderOptions::memory_budget (reader_memory(), as the largest row group's decoded columns,
/// estimated at open, makes them, and a decode's scratch: its largest column chunk's pages as
/// they decompress, by the footer, and 4 bytes a row): a loader with a budget (the default
/// budget too) lowers the 512 MiB to what it leaves, a decode starts only while the decodes
/// under way fit it, and a budget that cannot hold three of the largest row groups and a
/// scratch beside the loader's own is a ConfigError that says the bytes the dataset's reads
/// need. A pass in order, or a shuffled epoch
/// with LoaderOptions::shuffle_window (shard_starts() gives the row groups) whose window fits,
/// decodes each row group once; so does any epoch of a table whose decoded columns fit whole. A
/// shuffled epoch over more without a window decodes a row group for nearly every sample.
/// Byte-array and list columns' lengths (and categorical columns' values) are read at open: 4 bytes
/// a row per ragged field.
///
/// Files may be URLs (http://, https://, s3://, file://; TableOptions::remote), read by ranges
/// into memory, never whole and not through the cache: at open, the last 64 KiB (the footer,
/// with a second range for a longer one) and the chunks of byte-array columns (their lengths and
/// categories), kept (up to 256 MiB of them) for their row group's first decode, so fetched
/// once; then a row group's decode fetches its other chunks of the columns read alone, chunks
/// less than 8 KiB apart in one ranged GET, and drops them once decoded; a thread of the
/// dataset's fetches the next two row groups' chunks ahead, in the loader's order (will_read();
/// with LoaderOptions::shuffle_window, as WebDataset's shards), skipping those still decoded. A
/// file that changes between ranges (its size or ETag) is a DataError naming the URL; a server that
/// ignores Range is read from the start of the file up to the bytes asked, for each range (one
/// that sends no Content-Length, in chunks, is read whole for the footer, its size learnt so). A
/// row group whose fetch fails (after RemoteOptions::retries) fails once: a DataError naming the
/// URL and the row group, which every read of that row group meets at once, without fetching it
/// again, until the loader's next pass (will_read()).
///
/// A corrupt or truncated file: DataError naming the file and the place (footer, row group,
/// column, page), at open or when the row is read, never a crash. (A local file is
/// memory-mapped: one cut short in place while a loader reads it faults the process, as
/// docs/FAULTS.md says; replace a file by renaming a new one over it.)
class FERRY_API ParquetDataset final : public Dataset {
 public:
  /// \throws ConfigError for no files, a column named twice or absent (naming it), a column of
  /// a type not read (naming the column and its type), an image column of another type, image
  /// options image_shape() refuses, files whose schemas differ; DataError for a file that cannot be
  /// read or is not Parquet.
  static std::shared_ptr<ParquetDataset> open(std::vector<std::filesystem::path> files,
                                              TableOptions options = {});
  ~ParquetDataset() override;

  std::size_t size() const override;
  std::vector<FieldSpec> fields() const override;
  void read(std::size_t index, SampleRef out) const override;
  std::int64_t length(std::size_t index, std::size_t field) const override;
  /// Starts loading the row's values when the calling thread holds its row group decoded.
  void prefetch(std::size_t index) const noexcept override;
  /// The calling thread holds the share's row groups that are decoded in the cache (up to 16)
  /// until end_reads(): its reads and prefetches of their rows take no lock.
  void begin_reads(std::span<const std::size_t> indices,
                   std::span<const SampleRef> out) const noexcept override;
  void end_reads() const noexcept override;
  std::int64_t max_length(std::size_t field) const override;
  /// The first row of each row group, then size().
  std::span<const std::size_t> shard_starts() const noexcept override;
  /// The loader's reading order, for URLs: their next row groups' chunks are fetched ahead.
  void will_read(std::span<const std::size_t> indices) const noexcept override;
  /// Whether any file is a URL.
  bool wants_read_order() const noexcept override;
  /// Seconds the reads of URLs have waited for their ranges (all threads; open's included).
  double network_wait_seconds() const noexcept override;
  /// The decoded cache's budget and one row group (record batch) decoded past it: the most
  /// decoded data the dataset holds (see memory_budget above).
  std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept override;
  /// The decoded cache's budget lowered to fit `bytes` (never below two of the largest).
  void fit_reader_memory(std::uint64_t bytes) const noexcept override;

  /// The categories of categorical column `column`, code i being the i-th.
  /// \throws ConfigError when `column` is not one of TableOptions::categorical.
  const std::vector<std::string>& categories(std::string_view column) const;

  /// Row groups in all the files.
  std::size_t num_row_groups() const noexcept;
  /// Column chunks decoded since open (all threads, open's own reads of byte-array columns
  /// included).
  std::uint64_t chunks_decoded() const noexcept;

 private:
  ParquetDataset() = default;
  std::unique_ptr<detail::ParquetTable> table_;
};

/// Arrow IPC files: the stream format (Hugging Face `datasets`' cache files and save_to_disk
/// shards, data-00000-of-000NN.arrow) or the file format ("ARROW1" and a footer). The rows of all
/// the files, in order, are the samples; each column read is a field named as the column.
///
/// Column types and their fields:
/// - bool -> u8 []; int8..int64, uint8..uint64 -> that dtype []; float16/32/64 -> f16, f32,
///   f64 []; fixed_size_list<T>[n] (nested: [n, m, ...]) of those -> dtype [n, ...].
/// - list<T> / large_list<T> of those -> ragged dtype [L, ...] (list<fixed_size_list<T>[n]>:
///   [L, n]).
/// - Hugging Face datasets' Array2D..Array5D features: the extension type
///   (ARROW:extension:name "...ArrayNDExtensionType" in the field's metadata) stored as N levels
///   of lists of numbers, its ARROW:extension:metadata the JSON [shape, dtype] -> dtype [shape]
///   (shape[0] null, a first dimension that varies: ragged [L, d1, ...]). Each row's lists are
///   checked against the shape: one of another length is a DataError naming the file, the row
///   and the column when the row is read.
/// - binary / string (and large_) -> ragged u8 [L], the bytes as stored; named in
///   TableOptions::images (binary, or HF's Image struct{bytes, path}) -> the decoded image, as
///   ImageFolder's (image_field()); named in TableOptions::categorical -> i64 [] codes.
/// - dictionary-encoded strings -> i64 [] codes into categories(name): every value of the
///   columns' dictionaries (in all the files), in sorted byte order.
/// - Any other type in a column that is read: ConfigError naming the column and its type; so
///   list<list<T>> without HF's extension metadata, and lists of strings.
///
/// A null: as TableOptions::missing says. In a fixed-shape field (fixed_size_list, HF's arrays)
/// a null slot or a null inside its values is, under Missing::nan in a float column, NaN in
/// every place of the slot; else a DataError naming the file, the row and the column (which
/// ErrorPolicy::skip drops). A null inside a variable list's values is a DataError.
///
/// Uncompressed files are memory-mapped, and values copied straight from the mapping into the
/// loader's batch. A record batch compressed (LZ4_FRAME or ZSTD body compression) is
/// decompressed once when read and kept, shared by the reading threads (512 MiB of them, the
/// least recently used leaving first, counted in LoaderOptions::memory_budget and lowered to fit
/// it, as ParquetDataset's row groups). open() reads the footer
/// (file format) or steps once over the messages (stream format), keeping each record batch's
/// place and rows; ragged fields' lengths (4 bytes a row) and categorical columns' values are
/// read at open.
///
/// Files may be URLs (http://, https://, s3://, file://; TableOptions::remote), read by ranges
/// into memory, never whole and not through the cache. At open: the last 64 KiB; then, in the
/// file format, the footer (a second range for a longer one) and each record batch's metadata
/// (metadata less than 8 KiB apart in one ranged GET); in the stream format, the messages from
/// the start, each one's framing and metadata in one GET of at least 4 KiB; a dictionary
/// batch's body only when a column read uses it. A record batch's read fetches the buffers of
/// the columns read alone (buffers less than 8 KiB apart in one ranged GET), decompresses them
/// when compressed, and keeps them in the decoded cache above. With a ragged or categorical
/// column among those read, open() reads every record batch so (for the lengths and values) and
/// the cache keeps them: the reads fetch them again only once the cache has let them go. A file
/// that changes between ranges (its size or ETag) is a DataError naming the URL; a server that
/// ignores Range is read from the start of the file up to the bytes asked (as ParquetDataset's).
/// A record batch whose fetch fails fails once, as a row group of ParquetDataset. A thread of the
/// dataset's fetches (and decompresses) the next two record batches past the farthest one read,
/// in the loader's order (will_read()), skipping those still decoded.
///
/// A corrupt or truncated file: DataError naming the file and the place (footer, message,
/// record batch, buffer), at open or when the row is read, never a crash. (A local file is
/// memory-mapped: one cut short in place while a loader reads it faults the process, as
/// docs/FAULTS.md says; replace a file by renaming a new one over it.)
class FERRY_API ArrowDataset final : public Dataset {
 public:
  /// \throws ConfigError for no files, a column named twice or absent (naming it), a column of
  /// a type not read (naming the column and its type), files whose schemas differ, RemoteOptions
  /// check_options() refuses (with URLs); DataError for a file that cannot be read or is not
  /// Arrow IPC.
  static std::shared_ptr<ArrowDataset> open(std::vector<std::filesystem::path> files,
                                            TableOptions options = {});
  ~ArrowDataset() override;

  std::size_t size() const override;
  std::vector<FieldSpec> fields() const override;
  void read(std::size_t index, SampleRef out) const override;
  std::int64_t length(std::size_t index, std::size_t field) const override;
  /// Starts loading the row's values when the calling thread holds its record batch.
  void prefetch(std::size_t index) const noexcept override;
  std::int64_t max_length(std::size_t field) const override;
  /// The first row of each record batch, then size().
  std::span<const std::size_t> shard_starts() const noexcept override;

  /// The categories of a categorical or dictionary-encoded column, code i being the i-th.
  /// \throws ConfigError when `column` is neither.
  const std::vector<std::string>& categories(std::string_view column) const;

  /// Seconds spent waiting for URLs' ranges (all threads, open's reads included); 0 for local
  /// files.
  double network_wait_seconds() const noexcept override;
  /// The decoded cache's budget and one row group (record batch) decoded past it: the most
  /// decoded data the dataset holds (see memory_budget above).
  std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept override;
  /// The decoded cache's budget lowered to fit `bytes` (never below two of the largest).
  void fit_reader_memory(std::uint64_t bytes) const noexcept override;
  /// URLs: the loader's order, in which the next two record batches past the farthest one read
  /// are fetched ahead (local files: nothing).
  void will_read(std::span<const std::size_t> indices) const noexcept override;
  bool wants_read_order() const noexcept override;

  /// Record batches (with rows) in all the files.
  std::size_t num_record_batches() const noexcept;
  /// Record batches made readable since open (located and checked; decompressed when
  /// compressed), all threads, open's own reads included.
  std::uint64_t batches_decoded() const noexcept;

 private:
  ArrowDataset() = default;
  std::unique_ptr<detail::ArrowTable> table_;
};

}  // namespace ferry
