#pragma once

// Values decoded from one page (or a dictionary page): fixed-width values at their physical
// width, or byte arrays as offsets into their bytes. The decoders of the encodings other than
// PLAIN and dictionary indices (parquet_delta.cpp) fill them as PLAIN's do.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "datasets/table/parquet_format.hpp"

namespace ferry::detail::parquet {

/// The most bytes one page may decompress (or its values decode) to: far above what writers make
/// (about 1 MiB), and a bound on what a forged header can make the reader allocate.
inline constexpr std::size_t kMaxPageBytes = std::size_t{1} << 30;

struct Values {
  std::size_t count = 0;
  std::vector<std::byte> fixed;
  std::vector<std::uint64_t> offsets{0};
  std::vector<std::byte> bytes;
};

/// DELTA_BINARY_PACKED (int32 and int64 columns): n values into out.fixed.
/// \throws ChunkError when the data is malformed or ends early.
void delta_binary_packed(std::span<const std::byte> data, Physical type, std::size_t n,
                         Values& out);
/// DELTA_LENGTH_BYTE_ARRAY: n byte arrays.
void delta_length_byte_array(std::span<const std::byte> data, std::size_t n, Values& out);
/// DELTA_BYTE_ARRAY (incremental: a prefix of the value before, then a suffix): n byte arrays.
void delta_byte_array(std::span<const std::byte> data, std::size_t n, Values& out);
/// Byte arrays (DELTA_BYTE_ARRAY's of a FIXED_LEN_BYTE_ARRAY column) as fixed-width values.
/// \throws ChunkError for a value of another length.
void fixed_width(Values& values, std::size_t width);
/// BYTE_STREAM_SPLIT (fixed-width values, their bytes in `width` streams): n values.
void byte_stream_split(std::span<const std::byte> data, Physical type, std::size_t n, Values& out);

}  // namespace ferry::detail::parquet
