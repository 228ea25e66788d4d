#pragma once

// ArrowDataset's state: the files (mapped), the index of their record batches (where each
// message lies, its rows), the columns read and how each becomes a field, the dictionaries, and
// what open() learnt of every row (categories, ragged lengths). A record batch is made readable
// once per read of it (its buffers located and checked, decompressed when the file compresses
// them) and kept in a cache shared by the reading threads.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "datasets/remote/range_reader.hpp"
#include "datasets/table/arrow_format.hpp"
#include "datasets/table/parquet_cache.hpp"
#include "datasets/table/thread_kept.hpp"
#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/table.hpp"

namespace ferry::detail {

/// How a column's arrays become its field.
enum class ArrowKind {
  scalar,       ///< fixed-width values (fixed_size_lists of them): dtype [inner...]
  list,         ///< list / large_list of those: dtype [ragged, inner...]
  bytes,        ///< binary / string: ragged u8 [L]
  image,        ///< binary, or struct{bytes, path}: decoded image
  audio,        ///< binary, or struct{bytes, path}: decoded sound (f32)
  categorical,  ///< string: i64 [] codes into `categories`
  dictionary,   ///< dictionary-encoded string: i64 [] codes into `categories`
  array,        ///< Hugging Face's ArrayND (list<list<...>>, shape in the field's metadata)
};

struct ArrowColumn {
  std::string name;
  arrow::Field field;  ///< as the first file declares it
  ArrowKind kind = ArrowKind::scalar;
  DType dtype = DType::i32;
  std::vector<std::int64_t> inner;      ///< fixed_size_list sizes, outermost first
  std::size_t per_row = 1;              ///< leaf values a row (scalar) or a list element (list)
  std::size_t width = 0;                ///< bytes of a leaf value; 0: bit-packed bool
  std::size_t leaf = 0;                 ///< the leaf array among the column's arrays
  bool large = false;                   ///< 64-bit offsets
  std::vector<std::string> categories;  ///< sorted; categorical and dictionary only
  std::vector<std::uint32_t> lengths;   ///< per sample; list and bytes only
  std::int64_t max_length = 0;
  std::size_t dictionary = 0;  ///< dictionary only: its place in ArrowBatch::dictionaries
  /// array only: the shape its metadata gives (-1: a first dimension that varies, then ragged
  /// and in `lengths`), and per list level (shape.size() of them) whether its offsets are 64-bit.
  std::vector<std::int64_t> shape;
  std::vector<bool> level_large;
};

/// One array of a record batch: its node and buffers (validity first; then offsets and data, or
/// data), located and checked against what its type needs.
struct ArrowArray {
  arrow::Node node;
  std::array<std::span<const std::byte>, 3> buffers{};

  bool is_valid(std::int64_t row) const noexcept {
    return node.null_count == 0 ||
           ((static_cast<unsigned>(buffers[0][static_cast<std::size_t>(row >> 3)]) >> (row & 7)) &
            1U) != 0;
  }
};

/// A record batch made readable: each column's arrays, in pre-order of its type, pointing into
/// the mapped file, into `owned` (decompressed buffers) or into `fetched` (a URL's ranges).
struct FERRY_HIDDEN ArrowBatchData {
  std::vector<std::vector<ArrowArray>> columns;
  std::vector<std::unique_ptr<std::byte[]>> owned;
  std::vector<std::vector<std::byte>> fetched;
  std::size_t owned_bytes = 0;
  /// Per column: where row 0's values begin when the column is fixed-width values without a
  /// null in this batch (a row is then ArrowColumn::per_row * width bytes at row * that), else
  /// null. read() copies such columns without looking at their arrays.
  std::vector<const std::byte*> plain;
};
std::size_t decoded_bytes(const ArrowBatchData& d) noexcept;

/// A dictionary-encoded column's dictionary in one file, as its versions (a stream may replace
/// one or add to it between record batches): index -> code (-1: a null value).
struct ArrowDictionary {
  std::vector<std::vector<std::string>> values;  ///< per version, as stored (open only)
  std::vector<std::vector<std::uint8_t>> valid;  ///< per version
  std::vector<std::vector<std::int64_t>> codes;  ///< per version
  bool last_used = false;  ///< a record batch reads the last version (open only)
  std::size_t held = 0;    ///< the bytes its versions' values hold (open only)
};

struct ArrowFile {
  std::string name;
  std::unique_ptr<MappedFile> map;
  std::unique_ptr<remote::RangeReader> remote;  ///< a URL's, read by ranges (no map then)
  bool file_format = false;
  std::vector<std::size_t> tops;  ///< per column read: its place among the schema's fields
  std::vector<arrow::Field> schema;
  std::string huggingface;  ///< the schema's "huggingface" metadata (Hugging Face's features)
  std::vector<ArrowDictionary> dictionaries;  ///< per dictionary column
};

/// One record batch, at its place among all the rows.
struct ArrowBatch {
  std::size_t file = 0;
  std::size_t number = 0;   ///< among its file's record batches
  std::size_t message = 0;  ///< among its file's messages (stream format)
  std::size_t metadata = 0;
  std::size_t metadata_length = 0;
  std::size_t body = 0;
  std::size_t body_length = 0;
  std::size_t first = 0;  ///< first sample
  std::size_t rows = 0;
  std::size_t file_row = 0;                 ///< its first row's place in its file
  std::vector<std::uint32_t> dictionaries;  ///< per dictionary column: the version in force
  std::vector<std::byte> metadata_bytes;    ///< a URL's: the message's flatbuffer, read at open
};

class ArrowAhead;

struct FERRY_HIDDEN ArrowTable {
  std::uint64_t id = 0;
  TableOptions options;
  std::vector<ArrowFile> files;
  std::vector<ArrowColumn> columns;
  std::vector<ArrowBatch> batches;
  std::vector<std::size_t> starts;  ///< batches' first samples, then size
  std::size_t size = 0;
  std::vector<FieldSpec> fields;
  bool compressed = false;  ///< some record batch compresses its body
  bool remote = false;      ///< some file is a URL
  mutable std::atomic<std::uint64_t> batches_decoded{0};
  static constexpr std::size_t kDecodedBudget = std::size_t{512} << 20;
  mutable BasicGroupCache<ArrowBatchData> cache{kDecodedBudget};
  /// A compressed table's (or a URL's) record batch each thread read last, kept with the table.
  mutable ThreadKept<ArrowBatchData> held;
  /// The largest record batch's decoded bytes, as estimated at open: 0 when every batch is a
  /// view of a mapped file (uncompressed, local); else its body's bytes, and its fixed fields'
  /// bytes of its rows (what decompression may make of them).
  std::size_t largest_decoded = 0;
  /// Every record batch's decoded bytes together, as estimated at open (0 as above): the most the
  /// cache and the threads' last batches can hold.
  std::uint64_t total_decoded = 0;

  /// Record batch b made readable (arrow_batch.cpp).
  /// \throws DataError naming the file, the record batch and what is wrong.
  std::shared_ptr<const ArrowBatchData> decode(std::size_t b) const;
  /// "ArrowDataset: <file>: record batch <n> (message <m>): ".
  std::string where(std::size_t b) const;
  /// Record batch b's message, parsed again, and checked to be the record batch it was at open.
  /// \throws arrow::FormatError.
  arrow::Message batch_message(std::size_t b) const;

  /// Record batch `b`'s buffers of the columns read as decode() makes them (a local file's:
  /// their length prefixes; a URL's: its body's bytes, its prefixes unread before a read).
  std::size_t unpacked_bytes(std::size_t b) const;

  ArrowTable();
  ~ArrowTable();
  /// URLs' record batches read ahead in the loader's order (arrow_ahead.hpp); null without
  /// URLs. The last member: it goes first, while the files it reads are still there.
  std::unique_ptr<ArrowAhead> ahead;
};

namespace arrow {

/// The buffers of `batch`, whose body is `body`: views into it, or decompressed into `owned`;
/// `only` (by buffer index): just those, the others empty. \throws FormatError naming the buffer.
std::vector<std::span<const std::byte>> body_buffers(
    const RecordBatch& batch, std::span<const std::byte> body,
    std::vector<std::unique_ptr<std::byte[]>>& owned, std::size_t& owned_bytes,
    const std::vector<bool>* only = nullptr);
/// The buffers of `batch` from their stored bytes `raw` (one per buffer; empty for one not
/// needed): the same views, or decompressed into `owned`. \throws FormatError naming the buffer.
std::vector<std::span<const std::byte>> unpack_buffers(
    const RecordBatch& batch, const std::vector<std::span<const std::byte>>& raw,
    std::vector<std::unique_ptr<std::byte[]>>& owned, std::size_t& owned_bytes);

/// Which of `batch`'s buffers belong to the schema's top fields marked in `read`.
/// \throws FormatError when the batch has fewer nodes or buffers than the schema needs.
std::vector<bool> read_buffers(const std::vector<Field>& schema, const RecordBatch& batch,
                               const std::vector<bool>& read);
/// The bytes the buffers marked in `only` take unpacked, as their stored bytes say (a compressed
/// buffer's length prefix, at most what its codec makes of its bytes): what body_buffers() makes
/// of them, counted before anything is decompressed.
std::size_t unpacked_bytes(const RecordBatch& batch, std::span<const std::byte> body,
                           const std::vector<bool>& only);

/// The arrays of `field` (pre-order of its type) from `batch`'s nodes and buffers at `node` and
/// `buffer` (advanced past them). `check`: every size and offset a read uses is checked against
/// what the buffers hold (a column not read is only stepped over). \throws FormatError.
std::vector<ArrowArray> field_arrays(const Field& field, const RecordBatch& batch,
                                     const std::vector<std::span<const std::byte>>& buffers,
                                     std::size_t& node, std::size_t& buffer, std::size_t& variadic,
                                     bool check);

/// Value `i` of a binary/string array (offsets 32 or 64 bits, checked by field_arrays()).
std::span<const std::byte> binary_value(const ArrowArray& a, bool large, std::int64_t i);
/// Offsets [i, i+1] of a list or binary array.
std::pair<std::int64_t, std::int64_t> offsets_at(const ArrowArray& a, bool large, std::int64_t i);
/// That a list or binary array's offsets buffer holds its rows' offsets, none negative, none
/// going down, the last at most `limit` (its values). \throws FormatError naming `what`.
void check_offsets(const ArrowArray& a, bool large, std::int64_t limit, const char* what);

}  // namespace arrow

/// Which of `batch`'s buffers (a record batch of `f`) decode() reads: its columns'.
std::vector<bool> read_buffers(const ArrowFile& f, const arrow::RecordBatch& batch);

/// What open_arrow() does with each file's messages (arrow_open.cpp), for the local and the
/// remote readers alike. map_schema(): the columns read, from the first file's schema; the later
/// files' checked against them. \throws ConfigError.
void map_schema(ArrowTable& t, ArrowFile& f, bool first);
/// Whether a column read uses the dictionary `id` (its body is needed).
bool reads_dictionary(const ArrowTable& t, const ArrowFile& f, std::int64_t id);
/// A dictionary batch `m`, whose body is `body`. \throws FormatError.
void add_dictionary(const ArrowTable& t, ArrowFile& f, const arrow::Message& m,
                    std::span<const std::byte> body);
/// A record batch, framed as `fr` (places in the file). \throws FormatError.
void add_batch(ArrowTable& t, ArrowFile& f, const arrow::Frame& fr, std::size_t message,
               std::size_t& file_row, std::size_t& number);

/// A URL's schema, record batches and dictionaries, read by ranges (arrow_remote.cpp): the
/// file format's footer from the file's end, or the stream's messages from its start.
/// \throws DataError naming the URL and the place.
void index_remote(ArrowTable& t, ArrowFile& f, bool first);
/// Record batch b's buffers of the columns read, fetched from its URL (close ones in one
/// ranged GET) into d.fetched, and decompressed as needed; the other buffers empty. `only`
/// (by buffer index): just those of the columns read.
/// \throws FormatError, DataError (the transfer).
std::vector<std::span<const std::byte>> fetch_buffers(const ArrowTable& t, std::size_t b,
                                                      const arrow::RecordBatch& batch,
                                                      ArrowBatchData& d,
                                                      const std::vector<bool>* only = nullptr);

/// The categories of dictionary-encoded columns, and each dictionary version's codes
/// (arrow_scan.cpp).
void number_dictionaries(ArrowTable& t);
/// Reads every record batch's ragged and categorical columns: lengths and categories.
/// \throws DataError as ArrowTable::decode().
void scan_rows(ArrowTable& t);

/// The dtype of a boolean, integer or floating-point field (not dictionary-encoded); nothing for
/// any other type (arrow_open.cpp).
std::optional<DType> scalar_dtype(const arrow::Field& f);
/// Whether `f` is Hugging Face datasets' Array2D..Array5D extension type (arrow_nested.cpp):
/// then `col` becomes its column (kind array: dtype [d0, d1, ...], or [ragged, d1, ...] when the
/// first dimension varies). `what` begins the messages. \throws ConfigError for metadata that
/// is not a shape, or a storage type that is not as many levels of lists of numbers.
bool map_hf_array(const arrow::Field& f, ArrowColumn& col, const std::string& what);
/// Row r of an array column: its leaf values' place [first, first + count), every list on the
/// way checked against the shape (the first dimension against `first_length` when it varies);
/// nothing when a null list or value lies inside. \throws DataError, its text `where()` then
/// what is wrong, for a list whose length is not the shape's.
std::optional<std::pair<std::int64_t, std::int64_t>> array_values(
    const ArrowColumn& col, const std::vector<ArrowArray>& arrays, std::int64_t r,
    std::int64_t first_length, const std::function<std::string()>& where);

/// Opens the files and builds the index (arrow_open.cpp).
std::unique_ptr<ArrowTable> open_arrow(std::vector<std::filesystem::path> files,
                                       TableOptions options);

}  // namespace ferry::detail
