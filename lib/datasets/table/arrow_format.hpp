#pragma once

// Arrow IPC metadata as ArrowDataset reads it, decoded by hand: a small bounds-checked reader of
// FlatBuffers tables, and the messages (Schema, DictionaryBatch, RecordBatch) and the file
// format's footer built from it. Every offset, length and count is checked against the bytes
// there are before it is used; a problem throws FormatError saying what is wrong, and the
// caller adds the file and the place (message, record batch, footer).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ferry::detail::arrow {

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A table inside a FlatBuffers buffer: its fields by slot, each checked before it is read.
class FlatTable {
 public:
  /// The root table of `buf`. \throws FormatError when it lies outside the buffer.
  static FlatTable root(std::span<const std::byte> buf);
  /// Whether field `slot` is present.
  bool has(int slot) const;
  /// A scalar field, or `fallback` when absent.
  template <class T>
  T scalar(int slot, T fallback) const;
  /// A table field, or nothing when absent.
  std::optional<FlatTable> table(int slot) const;
  /// A string field; empty when absent.
  std::string_view string(int slot) const;
  /// A vector field: its element count and where its first element lies (0, 0 when absent).
  struct Vector {
    std::size_t count = 0;
    std::size_t at = 0;
  };
  Vector vector(int slot, std::size_t element_size) const;
  /// Element i of a vector of tables.
  FlatTable table_at(const Vector& v, std::size_t i) const;
  /// A little-endian value at byte `at` of the buffer (checked).
  template <class T>
  T load(std::size_t at) const;
  /// The bytes of the whole buffer.
  std::size_t buffer_size() const noexcept { return buf_.size(); }

 private:
  FlatTable(std::span<const std::byte> buf, std::size_t pos);
  std::size_t field(int slot) const;         // its byte in buf, 0 when absent
  std::size_t follow(std::size_t at) const;  // the target of the uoffset at `at`
  std::span<const std::byte> buf_;
  std::size_t pos_ = 0;
  std::size_t vtable_ = 0;
  std::size_t vsize_ = 0;
};

/// Arrow's Type union, as numbered in Schema.fbs.
enum class TypeId : std::uint8_t {
  none = 0,
  null = 1,
  int_ = 2,
  floating = 3,
  binary = 4,
  utf8 = 5,
  boolean = 6,
  decimal = 7,
  date = 8,
  time = 9,
  timestamp = 10,
  interval = 11,
  list = 12,
  struct_ = 13,
  union_ = 14,
  fixed_size_binary = 15,
  fixed_size_list = 16,
  map = 17,
  duration = 18,
  large_binary = 19,
  large_utf8 = 20,
  large_list = 21,
  run_end_encoded = 22,
  binary_view = 23,
  utf8_view = 24,
  list_view = 25,
  large_list_view = 26,
};

struct Field {
  std::string name;
  bool nullable = true;
  TypeId type = TypeId::none;
  int bit_width = 0;  ///< int: 8, 16, 32, 64
  bool is_signed = false;
  int precision = 0;        ///< floating: 0 half, 1 single, 2 double
  int list_size = 0;        ///< fixed_size_list, fixed_size_binary
  int union_mode = 0;       ///< 0 sparse, 1 dense
  bool dictionary = false;  ///< dictionary-encoded: the record batch holds indices
  std::int64_t dictionary_id = 0;
  int index_bits = 32;
  bool index_signed = true;
  std::vector<Field> children;
  /// The field's custom metadata ARROW:extension:name and ARROW:extension:metadata (empty
  /// without): an extension type stored as this type.
  std::string extension_name;
  std::string extension_metadata;
};

/// The type as messages name it: "int32", "list<float>", "timestamp", "dictionary<utf8>"; an
/// extension type's name and metadata after its storage type.
std::string type_text(const Field& f);

struct Schema {
  std::vector<Field> fields;
  /// The schema's custom metadata "huggingface" (JSON: Hugging Face's features); empty without.
  std::string huggingface;
};

struct Node {
  std::int64_t length = 0;
  std::int64_t null_count = 0;
};
struct Buffer {
  std::int64_t offset = 0;
  std::int64_t length = 0;
};
enum class Compression : std::int8_t { none = -1, lz4_frame = 0, zstd = 1 };

struct RecordBatch {
  std::int64_t length = 0;
  std::vector<Node> nodes;
  std::vector<Buffer> buffers;
  Compression compression = Compression::none;
  std::vector<std::int64_t> variadic;  ///< variadicBufferCounts
  bool v4 = false;  ///< its message is of metadata version V4: a union has a validity bitmap
};

enum class HeaderType : std::uint8_t {
  none = 0,
  schema = 1,
  dictionary_batch = 2,
  record_batch = 3
};

struct Message {
  HeaderType type = HeaderType::none;
  std::int64_t body_length = 0;
  Schema schema;      ///< type schema
  RecordBatch batch;  ///< record_batch, or dictionary_batch's data
  std::int64_t dictionary_id = 0;
  bool is_delta = false;
};

/// Parses a Message flatbuffer. \throws FormatError.
Message parse_message(std::span<const std::byte> flatbuffer);

/// Where a file-format footer says a message lies: its metadata (from the continuation marker)
/// at `offset`, `metadata_length` bytes, then its body.
struct Block {
  std::int64_t offset = 0;
  std::int32_t metadata_length = 0;
  std::int64_t body_length = 0;
};
struct Footer {
  Schema schema;
  std::vector<Block> dictionaries;
  std::vector<Block> batches;
};

/// Parses the file format's footer flatbuffer. \throws FormatError, also for blocks that repeat
/// or overlap one another (dictionaries and record batches alike), named, before any is read.
Footer parse_footer(std::span<const std::byte> flatbuffer);

/// One framed message of a stream: where its metadata flatbuffer and its body lie in `bytes`.
struct Frame {
  bool end = false;  ///< the end-of-stream marker, or the end of the bytes
  std::size_t metadata = 0;
  std::size_t metadata_length = 0;
  std::size_t body = 0;  ///< its first byte
  std::size_t next = 0;  ///< the next message's first byte (after the body)
  Message message;
};

/// Reads the message at byte `at` of `bytes` (the continuation marker 0xFFFFFFFF and a length,
/// or the length alone as older writers framed it), and checks that its body lies within
/// `bytes`. \throws FormatError.
Frame read_frame(std::span<const std::byte> bytes, std::size_t at);

}  // namespace ferry::detail::arrow
