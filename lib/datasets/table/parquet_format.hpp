#pragma once

// Parquet's metadata, as the reader needs it (the Parquet format specification,
// parquet.thrift): the footer's schema and row groups, and a page's header, decoded from Thrift's
// compact protocol. Field ids and enum values are the specification's.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace ferry::detail::parquet {

enum class Physical : std::int32_t {
  boolean = 0,
  int32 = 1,
  int64 = 2,
  int96 = 3,
  float32 = 4,
  float64 = 5,
  byte_array = 6,
  fixed_len_byte_array = 7,
};

enum class Codec : std::int32_t {
  uncompressed = 0,
  snappy = 1,
  gzip = 2,
  lzo = 3,
  brotli = 4,
  lz4 = 5,
  zstd = 6,
  lz4_raw = 7,
};

namespace encoding {
inline constexpr std::int32_t plain = 0;
inline constexpr std::int32_t plain_dictionary = 2;
inline constexpr std::int32_t rle = 3;
inline constexpr std::int32_t bit_packed = 4;
inline constexpr std::int32_t delta_binary_packed = 5;
inline constexpr std::int32_t delta_length_byte_array = 6;
inline constexpr std::int32_t delta_byte_array = 7;
inline constexpr std::int32_t rle_dictionary = 8;
inline constexpr std::int32_t byte_stream_split = 9;
}  // namespace encoding

namespace page_type {
inline constexpr std::int32_t data = 0;
inline constexpr std::int32_t index = 1;
inline constexpr std::int32_t dictionary = 2;
inline constexpr std::int32_t data_v2 = 3;
}  // namespace page_type

/// The LogicalType union's member that is set (its field id), with IntType's two values.
struct Logical {
  int which = 0;  ///< 0: none; 1 STRING, 4 ENUM, 10 INTEGER, 12 JSON, ... (parquet.thrift)
  int bit_width = 0;
  bool is_signed = true;
};

struct SchemaElement {
  std::optional<Physical> type;  ///< absent for a group
  std::int32_t type_length = 0;
  std::int32_t repetition = 0;  ///< 0 REQUIRED, 1 OPTIONAL, 2 REPEATED
  std::string name;
  std::int32_t num_children = 0;
  std::optional<std::int32_t> converted;
  Logical logical;
};

struct ColumnChunk {
  Physical type = Physical::int32;
  Codec codec = Codec::uncompressed;
  std::int64_t num_values = 0;
  std::int64_t total_uncompressed_size = 0;
  std::int64_t total_compressed_size = 0;
  std::int64_t data_page_offset = 0;
  std::optional<std::int64_t> dictionary_page_offset;
  bool has_metadata = false;
  bool external = false;  ///< file_path set: the chunk lies in another file
};

struct RowGroup {
  std::int64_t num_rows = 0;
  std::vector<ColumnChunk> columns;
};

struct FileMetaData {
  std::vector<SchemaElement> schema;
  std::int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  /// The key-value metadata's ARROW:schema (base64 of the Arrow IPC Schema message the writer
  /// wrote from); empty without.
  std::string arrow_schema;
  /// The key-value metadata's "huggingface" (JSON: Hugging Face's features); empty without.
  std::string huggingface;
};

/// Decodes the footer's FileMetaData. \throws thrift::ThriftError saying what is wrong.
FileMetaData parse_file_metadata(std::span<const std::byte> bytes);

struct PageHeader {
  std::int32_t type = 0;
  std::int32_t uncompressed_size = 0;
  std::int32_t compressed_size = 0;
  std::int32_t num_values = 0;
  std::int32_t encoding = 0;
  // v1: the levels' encoding; v2: the levels' lengths and whether the values are compressed.
  std::int32_t def_encoding = encoding::rle;
  std::int32_t rep_encoding = encoding::rle;
  std::int32_t num_nulls = 0;
  std::int32_t def_length = 0;
  std::int32_t rep_length = 0;
  bool is_compressed = true;
  bool has_body = false;  ///< the header of its type (data, dictionary, v2) was there
};

/// Decodes a page header from the start of `bytes`; `consumed` is its length.
/// \throws thrift::ThriftError saying what is wrong.
PageHeader parse_page_header(std::span<const std::byte> bytes, std::size_t& consumed);

}  // namespace ferry::detail::parquet
