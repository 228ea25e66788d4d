#include "datasets/table/parquet_codec.hpp"

#include <brotli/decode.h>
#include <libdeflate.h>
#include <lz4.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <string>

namespace ferry::detail::parquet {
namespace {

struct FreeDeflate {
  void operator()(libdeflate_decompressor* d) const noexcept { libdeflate_free_decompressor(d); }
};
struct FreeZstd {
  void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

libdeflate_decompressor* deflate_context() {
  thread_local std::unique_ptr<libdeflate_decompressor, FreeDeflate> d(
      libdeflate_alloc_decompressor());
  if (!d) throw ChunkError("cannot decompress: out of memory");
  return d.get();
}

ZSTD_DCtx* zstd_context() {
  thread_local std::unique_ptr<ZSTD_DCtx, FreeZstd> d(ZSTD_createDCtx());
  if (!d) throw ChunkError("cannot decompress: out of memory");
  return d.get();
}

/// An LZ4 block into exactly `out`; false when it is not one.
bool lz4_block(std::span<const std::byte> in, std::span<std::byte> out) {
  if (in.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE) ||
      out.size() > static_cast<std::size_t>(LZ4_MAX_INPUT_SIZE) * 2) {
    return false;
  }
  const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in.data()),
                                      reinterpret_cast<char*>(out.data()),
                                      static_cast<int>(in.size()), static_cast<int>(out.size()));
  return got >= 0 && static_cast<std::size_t>(got) == out.size();
}

std::uint32_t load_be32(const std::byte* p) noexcept {
  return (static_cast<std::uint32_t>(p[0]) << 24) | (static_cast<std::uint32_t>(p[1]) << 16) |
         (static_cast<std::uint32_t>(p[2]) << 8) | static_cast<std::uint32_t>(p[3]);
}

/// Hadoop's LZ4 framing (the LZ4 codec of old writers): blocks, each after its 4-byte big-endian
/// decompressed and compressed sizes, that make `total` bytes in all. `block(packed, at, raw)`
/// takes each block's bytes, where its output starts and its size; false when the framing (or a
/// block) is not that.
template <class Block>
bool hadoop_blocks(std::span<const std::byte> in, std::size_t total, Block&& block) {
  std::size_t ip = 0;
  std::size_t op = 0;
  while (ip < in.size()) {
    if (in.size() - ip < 8) return false;
    const std::uint32_t raw = load_be32(in.data() + ip);
    const std::uint32_t packed = load_be32(in.data() + ip + 4);
    ip += 8;
    if (packed > in.size() - ip || raw > total - op) return false;
    if (!block(in.subspan(ip, packed), op, raw)) return false;
    ip += packed;
    op += raw;
  }
  return op == total;
}

/// Hadoop's framing into exactly `out` (or, failing that, the caller tries one bare block).
bool lz4_hadoop(std::span<const std::byte> in, std::span<std::byte> out) {
  return hadoop_blocks(in, out.size(),
                       [&](std::span<const std::byte> packed, std::size_t at, std::size_t raw) {
                         return lz4_block(packed, out.subspan(at, raw));
                       });
}

struct FreeBrotli {
  void operator()(BrotliDecoderState* s) const noexcept { BrotliDecoderDestroyInstance(s); }
};

/// Brotli into `out`, grown as the data decompresses up to `size` bytes.
void brotli(std::span<const std::byte> in, std::vector<std::byte>& out, std::size_t size,
            const std::string& sizes) {
  const std::unique_ptr<BrotliDecoderState, FreeBrotli> state(
      BrotliDecoderCreateInstance(nullptr, nullptr, nullptr));
  if (!state) throw ChunkError("cannot decompress: out of memory");
  out.resize(std::min(size, in.size() * 16 + 65536));
  std::size_t in_left = in.size();
  const auto* next_in = reinterpret_cast<const std::uint8_t*>(in.data());
  std::size_t done = 0;
  for (;;) {
    if (done == out.size() && out.size() < size) out.resize(std::min(size, out.size() * 4));
    std::uint8_t spill[1];  // where output past `size` would go: a sign of a wrong size
    const bool full = done == out.size();
    std::size_t room = full ? 1 : out.size() - done;
    const std::size_t had = room;
    auto* next_out = full ? spill : reinterpret_cast<std::uint8_t*>(out.data()) + done;
    const BrotliDecoderResult r =
        BrotliDecoderDecompressStream(state.get(), &in_left, &next_in, &room, &next_out, nullptr);
    if (full && room != had) throw ChunkError("a brotli page of more bytes than it claims" + sizes);
    if (!full) done += had - room;
    if (r == BROTLI_DECODER_RESULT_SUCCESS) break;
    if (r != BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT) {
      throw ChunkError("a corrupt brotli page" + sizes);
    }
  }
  if (done != size) throw ChunkError("a brotli page of fewer bytes than it claims" + sizes);
}

/// Zstd into `out`, grown as the data decompresses up to `size` bytes: for a page that claims
/// more than common ratios make (a zstd RLE block makes 128 KiB of 4 bytes, so a few KiB may claim
/// a GiB), with a context of its own, whose window goes with it.
void zstd_grown(std::span<const std::byte> in, std::vector<std::byte>& out, std::size_t size,
                const std::string& sizes) {
  const std::unique_ptr<ZSTD_DCtx, FreeZstd> ctx(ZSTD_createDCtx());
  if (!ctx) throw ChunkError("cannot decompress: out of memory");
  out.resize(std::min(size, in.size() * 16 + 65536));
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  std::size_t done = 0;
  for (;;) {
    if (done == out.size() && out.size() < size) out.resize(std::min(size, out.size() * 4));
    std::byte spill[1];  // where output past `size` would go: a sign of a wrong size
    const bool full = done == out.size();
    ZSTD_outBuffer dst{full ? spill : out.data() + done, full ? 1 : out.size() - done, 0};
    const std::size_t read = src.pos;
    const std::size_t r = ZSTD_decompressStream(ctx.get(), &dst, &src);
    if (ZSTD_isError(r) != 0) {
      throw ChunkError(std::string("a corrupt zstd page: ") + ZSTD_getErrorName(r) + sizes);
    }
    if (full && dst.pos > 0) throw ChunkError("a zstd page of more bytes than it claims" + sizes);
    done += dst.pos;
    if (r == 0 && src.pos == src.size) break;  // the last frame ended
    if (dst.pos == 0 && src.pos == read) throw ChunkError("a zstd page that ends early" + sizes);
  }
  if (done != size) throw ChunkError("a zstd page of the wrong size" + sizes);
}

/// Gzip into `out`, grown as the data decompresses up to `size` bytes (zlib's inflate, which
/// streams; libdeflate needs the whole claimed size at once).
void gzip_grown(std::span<const std::byte> in, std::vector<std::byte>& out, std::size_t size,
                const std::string& sizes) {
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
    throw ChunkError("cannot decompress: out of memory");
  const std::unique_ptr<z_stream, int (*)(z_stream*)> end(&z, inflateEnd);
  out.resize(std::min(size, in.size() * 16 + 65536));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in.data()));
  std::size_t done = 0;
  std::size_t in_left = in.size();
  for (;;) {
    if (done == out.size() && out.size() < size) out.resize(std::min(size, out.size() * 4));
    std::byte spill[1];  // where output past `size` would go: a sign of a wrong size
    const bool full = done == out.size();
    const auto give = static_cast<uInt>(std::min<std::size_t>(in_left, 1U << 30));
    const auto room =
        full ? 1U : static_cast<uInt>(std::min<std::size_t>(out.size() - done, 1U << 30));
    z.avail_in = give;
    z.next_out = reinterpret_cast<Bytef*>(full ? spill : out.data() + done);
    z.avail_out = room;
    const int r = inflate(&z, Z_NO_FLUSH);
    in_left -= give - z.avail_in;
    const std::size_t made = room - z.avail_out;
    if (r != Z_OK && r != Z_STREAM_END && r != Z_BUF_ERROR) {
      throw ChunkError("a corrupt gzip page" + sizes);
    }
    if (full && made > 0) throw ChunkError("a gzip page of more bytes than it claims" + sizes);
    done += made;
    if (r == Z_STREAM_END) {
      if (in_left == 0) break;
      if (inflateReset(&z) != Z_OK)
        throw ChunkError("a corrupt gzip page" + sizes);  // a member more
      continue;
    }
    if (made == 0 && give == z.avail_in) throw ChunkError("a gzip page that ends early" + sizes);
  }
  if (done != size) throw ChunkError("a gzip page of the wrong size" + sizes);
}

/// The bytes an LZ4 block makes, read from its sequences without making them; nullopt when it
/// is not a well-formed block.
std::optional<std::size_t> lz4_block_size(std::span<const std::byte> in) {
  std::size_t ip = 0;
  std::size_t made = 0;
  const auto length = [&](std::size_t n) -> std::optional<std::size_t> {
    if (n != 15) return n;
    for (;;) {
      if (ip >= in.size()) return std::nullopt;
      const auto b = std::to_integer<std::size_t>(in[ip++]);
      n += b;
      if (b != 255) return n;
    }
  };
  while (ip < in.size()) {
    const auto token = std::to_integer<std::size_t>(in[ip++]);
    const auto literals = length(token >> 4);
    if (!literals || *literals > in.size() - ip) return std::nullopt;
    ip += *literals;
    made += *literals;
    if (ip == in.size()) return made;  // the last sequence: literals only
    if (in.size() - ip < 2) return std::nullopt;
    ip += 2;  // the match's offset
    const auto match = length(token & 15);
    if (!match) return std::nullopt;
    made += *match + 4;
  }
  return std::nullopt;
}

/// Whether `in` is Hadoop's LZ4 framing of blocks that make `size` bytes in all (each block's
/// size read from its sequences, as lz4_block_size()).
bool lz4_hadoop_size(std::span<const std::byte> in, std::size_t size) {
  return hadoop_blocks(in, size,
                       [](std::span<const std::byte> packed, std::size_t, std::size_t raw) {
                         return lz4_block_size(packed) == raw;
                       });
}

}  // namespace

const char* codec_name(Codec codec) noexcept {
  switch (codec) {
    case Codec::uncompressed:
      return "UNCOMPRESSED";
    case Codec::snappy:
      return "SNAPPY";
    case Codec::gzip:
      return "GZIP";
    case Codec::lzo:
      return "LZO";
    case Codec::brotli:
      return "BROTLI";
    case Codec::lz4:
      return "LZ4";
    case Codec::zstd:
      return "ZSTD";
    case Codec::lz4_raw:
      return "LZ4_RAW";
  }
  return "an unknown codec";
}

void check_codec(Codec codec) {
  switch (codec) {
    case Codec::uncompressed:
    case Codec::snappy:
    case Codec::gzip:
    case Codec::zstd:
    case Codec::lz4_raw:
    case Codec::lz4:
    case Codec::brotli:
      return;
    default:
      throw ChunkError(std::string("compressed with ") + codec_name(codec) + " (codec " +
                       std::to_string(static_cast<int>(codec)) +
                       "), which ferry does not read (it reads UNCOMPRESSED, SNAPPY, GZIP, ZSTD, "
                       "LZ4_RAW, LZ4 and BROTLI)");
  }
}

std::size_t max_decompressed(Codec codec, std::size_t in) noexcept {
  constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();
  const auto times = [&](std::size_t ratio, std::size_t extra) {
    return in > (kNoLimit - extra) / ratio ? kNoLimit : in * ratio + extra;
  };
  switch (codec) {
    case Codec::uncompressed:
      return in;
    case Codec::snappy:  // a copy of 64 bytes in 3
      return times(22, 64);
    case Codec::gzip:  // deflate: 258 bytes in a code of 2 bits, at most 1032 to 1
      return times(1032, 1024);
    case Codec::lz4:  // a byte of 255 in a match's length: 255 bytes more
    case Codec::lz4_raw:
      return times(256, 1024);
    case Codec::zstd:  // an RLE block: 128 KiB in 4 bytes
      return times(32768, std::size_t{1} << 17);
    default:
      return kNoLimit;
  }
}

void decompress(Codec codec, std::span<const std::byte> in, std::vector<std::byte>& page,
                std::size_t size) {
  const std::string sizes =
      " (" + std::to_string(in.size()) + " bytes that should give " + std::to_string(size) + ")";
  if (size > max_decompressed(codec, in.size())) {
    throw ChunkError(std::string("a page that claims more bytes decompressed than ") +
                     codec_name(codec) + " makes of its bytes" + sizes);
  }
  if (codec == Codec::brotli) return brotli(in, page, size, sizes);
  // A page that claims more than common ratios make (up to zstd's 32768 to 1, gzip's 1032 and
  // LZ4's 256) costs only what its bytes make: zstd and gzip grow as they decompress, and an
  // LZ4 block's size is read from its sequences before anything is made.
  if (size > in.size() * 64 + (std::size_t{1} << 20)) {
    if (codec == Codec::zstd) return zstd_grown(in, page, size, sizes);
    if (codec == Codec::gzip) return gzip_grown(in, page, size, sizes);
    if (codec == Codec::lz4_raw && lz4_block_size(in) != size) {
      throw ChunkError("a corrupt LZ4_RAW page" + sizes);
    }
    if (codec == Codec::lz4 && !lz4_hadoop_size(in, size) && lz4_block_size(in) != size) {
      throw ChunkError("a corrupt LZ4 page" + sizes);
    }
  }
  page.resize(size);
  const std::span<std::byte> out(page);
  switch (codec) {
    case Codec::uncompressed:
      if (in.size() != out.size()) {
        throw ChunkError("an uncompressed page whose sizes differ" + sizes);
      }
      if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
      return;
    case Codec::snappy: {
      const auto* src = reinterpret_cast<const char*>(in.data());
      std::size_t n = 0;
      if (snappy_uncompressed_length(src, in.size(), &n) != SNAPPY_OK || n != out.size()) {
        throw ChunkError("a corrupt snappy page" + sizes);
      }
      std::size_t got = out.size();
      if (snappy_uncompress(src, in.size(), reinterpret_cast<char*>(out.data()), &got) !=
              SNAPPY_OK ||
          got != out.size()) {
        throw ChunkError("a corrupt snappy page" + sizes);
      }
      return;
    }
    case Codec::gzip: {
      std::size_t got = 0;
      const libdeflate_result r = libdeflate_gzip_decompress(
          deflate_context(), in.data(), in.size(), out.data(), out.size(), &got);
      if (r != LIBDEFLATE_SUCCESS || got != out.size()) {
        throw ChunkError("a corrupt gzip page" + sizes);
      }
      return;
    }
    case Codec::zstd: {
      const std::size_t got =
          ZSTD_decompressDCtx(zstd_context(), out.data(), out.size(), in.data(), in.size());
      if (ZSTD_isError(got) != 0) {
        throw ChunkError(std::string("a corrupt zstd page: ") + ZSTD_getErrorName(got) + sizes);
      }
      if (got != out.size()) throw ChunkError("a zstd page of the wrong size" + sizes);
      return;
    }
    case Codec::lz4_raw:
      if (!lz4_block(in, out)) throw ChunkError("a corrupt LZ4_RAW page" + sizes);
      return;
    case Codec::lz4:
      if (!lz4_hadoop(in, out) && !lz4_block(in, out)) {
        throw ChunkError("a corrupt LZ4 page" + sizes);
      }
      return;
    default:
      check_codec(codec);
  }
}

}  // namespace ferry::detail::parquet
