#pragma once

// Parquet's codecs (uncompressed, snappy, gzip, zstd), decompressing a page whose decompressed
// size its header gives: into exactly that many bytes, or ChunkError.

#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_format.hpp"

namespace ferry::detail::parquet {

/// \throws ChunkError for a codec ferry does not read.
void check_codec(Codec codec);

/// The most bytes `in` bytes of `codec` can decompress to (the codec's own limit: snappy's and
/// LZ4's copies, deflate's 258 bytes in a bit, a zstd block of one byte repeated); brotli has
/// none that helps (a few bytes can make 16 MiB) and decompress() grows its output as it goes.
std::size_t max_decompressed(Codec codec, std::size_t in) noexcept;

/// Decompresses `in` into `out`, resized to `size` bytes (brotli's: as the data decompresses, so
/// that a forged size costs only what the data makes). \throws ChunkError when `size` is more than
/// max_decompressed(), or the data is corrupt or does not decompress to exactly `size` bytes.
void decompress(Codec codec, std::span<const std::byte> in, std::vector<std::byte>& out,
                std::size_t size);

}  // namespace ferry::detail::parquet
