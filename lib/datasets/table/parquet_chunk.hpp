#pragma once

// A column chunk of a flat (top-level, not repeated) Parquet column, decoded whole: its pages
// decompressed, definition levels read, PLAIN or dictionary values decoded. Decoding is checked
// throughout: every size in a page header, every run of levels and every dictionary index is
// checked against the bytes and values there are, and a page decompresses to at most the size
// its header gives. A problem throws ChunkError saying which page and what is wrong; the caller
// adds the file, the row group and the column.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "datasets/table/parquet_format.hpp"

namespace ferry::detail::parquet {

class ChunkError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The values of a column chunk, one per row, as stored: fixed-width values at their physical
/// width (a boolean as one byte 0 or 1), or byte arrays as offsets into `bytes`. A null row has
/// valid[row] == 0 and a zero value (an empty byte array).
struct RawColumn {
  std::size_t rows = 0;
  std::size_t width = 0;               ///< bytes per value; 0 for byte arrays
  std::vector<std::uint8_t> valid;     ///< empty: every row has a value
  std::vector<std::byte> fixed;        ///< rows * width
  std::vector<std::uint64_t> offsets;  ///< byte arrays: rows + 1
  std::vector<std::byte> bytes;

  bool is_valid(std::size_t row) const noexcept { return valid.empty() || valid[row] != 0; }
  std::span<const std::byte> value(std::size_t row) const noexcept {
    return {bytes.data() + offsets[row], bytes.data() + offsets[row + 1]};
  }
};

/// Bytes per value of a fixed-width physical type (boolean: 1, as decoded); 0 for byte arrays.
std::size_t physical_width(Physical type) noexcept;

/// Decodes `chunk`, whose bytes are `bytes` (the chunk's range of the file, from its first
/// page), of a column with maximum definition level `max_def` (0 or 1), expecting `rows` rows.
/// \throws ChunkError naming the page (from 0) and the problem.
RawColumn decode_chunk(std::span<const std::byte> bytes, Physical type, Codec codec, int max_def,
                       std::size_t rows);

/// The name of an encoding or a codec, for messages: "DELTA_BINARY_PACKED", "LZ4_RAW".
const char* encoding_name(std::int32_t encoding) noexcept;
const char* codec_name(Codec codec) noexcept;

}  // namespace ferry::detail::parquet
