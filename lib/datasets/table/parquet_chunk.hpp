#pragma once

// A column chunk of a flat (top-level, not repeated) Parquet column, decoded whole: its pages
// decompressed, definition levels read, PLAIN or dictionary values decoded. Decoding is checked
// throughout: every size in a page header, every run of levels and every dictionary index is
// checked against the bytes and values there are, and a page decompresses to at most the size
// its header gives. A problem throws ChunkError saying which page and what is wrong; the caller
// adds the file, the row group and the column.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include "datasets/table/parquet_format.hpp"
#include "datasets/table/parquet_values.hpp"

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
  /// Byte arrays decoded for their sizes alone (offsets, no bytes: what open() scans), or
  /// their bytes up to `max_bytes` (more: a ChunkError; a dictionary's value may be repeated
  /// by every row of a chunk, so a few bytes of it may ask for terabytes).
  bool sizes_only = false;
  std::size_t max_bytes = std::numeric_limits<std::size_t>::max();

  /// A list column's (decode_list_chunk()): `offsets` count values, not bytes (a row's values
  /// are fixed[offsets[row] * width, offsets[row + 1] * width)); per row, its outer list's
  /// length and whether a null lies inside it (empty: none does); the rows whose lists are not
  /// of the length their shape gives.
  bool list = false;
  std::vector<std::uint32_t> lengths;
  std::vector<std::uint8_t> null_inside;
  struct WrongLength {
    std::size_t row = 0;
    std::size_t level = 0;  ///< the dimension, from 0
    std::uint64_t length = 0;
  };
  std::vector<WrongLength> wrong;

  bool is_valid(std::size_t row) const noexcept { return valid.empty() || valid[row] != 0; }
  std::size_t size(std::size_t row) const noexcept {
    return static_cast<std::size_t>(offsets[row + 1] - offsets[row]);
  }
  std::span<const std::byte> value(std::size_t row) const noexcept {
    return {bytes.data() + offsets[row], bytes.data() + offsets[row + 1]};
  }
};

/// One data page's levels: repetition (empty when the column repeats nothing) and definition
/// levels, one each per value the page counts (nulls and empty lists included).
struct PageLevels {
  const std::vector<std::uint32_t>& rep;
  const std::vector<std::uint32_t>& def;
};
/// What decode_pages() hands on of each data page: its levels, then its values, PLAIN (or
/// another encoding's, decoded) or the dictionary with `indices` into it, one per definition
/// level at its maximum.
using PageSink = std::function<void(const PageLevels& levels, const Values& values,
                                    const std::vector<std::uint32_t>* indices)>;

/// Decodes the pages of `chunk` (as decode_chunk() says) up to `total` values counted by the
/// pages' headers, handing each data page on to `sink`; levels are checked against `max_def`
/// and `max_rep`. \throws ChunkError naming the page.
void decode_pages(std::span<const std::byte> bytes, Physical type, Codec codec, int max_def,
                  int max_rep, std::size_t total, const PageSink& sink);

/// Bytes per value of a fixed-width physical type (boolean: 1, as decoded;
/// FIXED_LEN_BYTE_ARRAY: 2, as FLOAT16's, the only one read); 0 for byte arrays.
std::size_t physical_width(Physical type) noexcept;

/// Decodes `chunk`, whose bytes are `bytes` (the chunk's range of the file, from its first
/// page), of a column with maximum definition level `max_def` (0 or 1), expecting `rows` rows.
/// \throws ChunkError naming the page (from 0) and the problem.
/// `shape`: a RawColumn whose sizes_only and max_bytes say how byte arrays are kept.
RawColumn decode_chunk(std::span<const std::byte> bytes, Physical type, Codec codec, int max_def,
                       std::size_t rows, const RawColumn& shape = {});

/// The name of an encoding or a codec, for messages: "DELTA_BINARY_PACKED", "LZ4_RAW".
const char* encoding_name(std::int32_t encoding) noexcept;
const char* codec_name(Codec codec) noexcept;

}  // namespace ferry::detail::parquet
