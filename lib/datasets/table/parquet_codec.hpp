#pragma once

// Parquet's codecs (uncompressed, snappy, gzip, zstd), decompressing a page whose decompressed
// size its header gives: into exactly that many bytes, or ChunkError.

#include <cstddef>
#include <cstring>
#include <span>

#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_format.hpp"

namespace ferry::detail::parquet {

/// \throws ChunkError for a codec ferry does not read.
void check_codec(Codec codec);

/// Decompresses `in` into all of `out`. \throws ChunkError when the data is corrupt or does not
/// decompress to exactly out.size() bytes.
void decompress(Codec codec, std::span<const std::byte> in, std::span<std::byte> out);

}  // namespace ferry::detail::parquet
