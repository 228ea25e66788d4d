// A record batch's buffers located in its body and, where the body is compressed (LZ4 frames or
// zstd, each buffer after its decompressed length), decompressed: each stored range once, and
// never into more memory than its data really makes.

#include <lz4frame.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "datasets/table/arrow_table.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::arrow {
namespace {

// The most bytes a decompressed buffer may hold: far above real files, and low enough that no
// product of it overflows.
constexpr std::int64_t kMaxBuffer = std::int64_t{1} << 36;

struct FreeLz4 {
  void operator()(LZ4F_dctx* d) const noexcept { LZ4F_freeDecompressionContext(d); }
};
struct FreeZstd {
  void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

/// A decompressed buffer of the length its prefix says: whole at once when that is what data of
/// common ratios makes (up to 64-fold), else grown as the data decompresses, so that a forged
/// length costs no more memory than the data really makes.
class Growing {
 public:
  Growing(std::size_t length, std::size_t packed)
      : length_(length),
        cap_(length <= packed * 64 + (std::size_t{1} << 20) ? length
                                                            : std::min(length, packed * 16)),
        mem_(new std::byte[cap_]) {}
  /// Whether the whole length is there to be filled.
  bool whole() const noexcept { return cap_ == length_; }
  /// Where the next bytes go; empty once `length` bytes are there.
  std::span<std::byte> room() {
    if (size_ == cap_ && cap_ < length_) {
      const std::size_t step = std::max<std::size_t>(cap_ * 4, 65536);
      const std::size_t cap = step >= length_ - cap_ ? length_ : cap_ + step;
      auto mem = std::unique_ptr<std::byte[]>(new std::byte[cap]);
      if (size_ > 0) std::memcpy(mem.get(), mem_.get(), size_);
      mem_ = std::move(mem);
      cap_ = cap;
    }
    return {mem_.get() + size_, cap_ - size_};
  }
  void advance(std::size_t n) noexcept { size_ += n; }
  bool full() const noexcept { return size_ == length_; }
  std::unique_ptr<std::byte[]> take() noexcept { return std::move(mem_); }

 private:
  std::size_t length_;
  std::size_t size_ = 0;
  std::size_t cap_;
  std::unique_ptr<std::byte[]> mem_;
};

void lz4_frame(std::span<const std::byte> in, Growing& out) {
  thread_local std::unique_ptr<LZ4F_dctx, FreeLz4> ctx = [] {
    LZ4F_dctx* d = nullptr;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION))) d = nullptr;
    return std::unique_ptr<LZ4F_dctx, FreeLz4>(d);
  }();
  if (!ctx) throw FormatError("cannot decompress: out of memory");
  LZ4F_resetDecompressionContext(ctx.get());
  std::size_t ip = 0;
  for (;;) {
    std::byte spill[1];  // where bytes past the length would go
    std::span<std::byte> room = out.room();
    const bool full = room.empty();
    if (full) room = spill;
    std::size_t src = in.size() - ip;
    std::size_t dst = room.size();
    const std::size_t r =
        LZ4F_decompress(ctx.get(), room.data(), &dst, in.data() + ip, &src, nullptr);
    if (LZ4F_isError(r)) {
      throw FormatError(std::string("corrupt LZ4 frame: ") + LZ4F_getErrorName(r));
    }
    if (full && dst > 0)
      throw FormatError("the LZ4 frame decompresses to more than its length says");
    ip += src;
    if (!full) out.advance(dst);
    if (r == 0) {  // a frame ended: another may follow
      if (ip == in.size()) break;
      continue;
    }
    if (src == 0 && dst == 0) throw FormatError("the LZ4 frame ends early");
  }
  if (!out.full()) throw FormatError("the LZ4 frame decompresses to less than its length says");
}

void zstd(std::span<const std::byte> in, Growing& out) {
  if (out.whole()) {  // in one pass, with this thread's context
    thread_local std::unique_ptr<ZSTD_DCtx, FreeZstd> ctx(ZSTD_createDCtx());
    if (!ctx) throw FormatError("cannot decompress: out of memory");
    const std::span<std::byte> all = out.room();
    const std::size_t r =
        ZSTD_decompressDCtx(ctx.get(), all.data(), all.size(), in.data(), in.size());
    if (ZSTD_isError(r) != 0) {
      throw FormatError(std::string("corrupt ZSTD data: ") + ZSTD_getErrorName(r));
    }
    if (r != all.size())
      throw FormatError("the ZSTD data decompresses to less than its length says");
    out.advance(r);
    return;
  }
  // Streamed, with a context of its own: the window it buffers goes with it.
  const std::unique_ptr<ZSTD_DCtx, FreeZstd> ctx(ZSTD_createDCtx());
  if (!ctx) throw FormatError("cannot decompress: out of memory");
  ZSTD_inBuffer src{in.data(), in.size(), 0};
  std::size_t left = 1;  // 0: a frame ended
  while (src.pos < src.size || left != 0) {
    std::byte spill[1];  // where bytes past the length would go
    std::span<std::byte> room = out.room();
    const bool full = room.empty();
    if (full) room = spill;
    ZSTD_outBuffer dst{room.data(), room.size(), 0};
    const std::size_t before = src.pos;
    left = ZSTD_decompressStream(ctx.get(), &dst, &src);
    if (ZSTD_isError(left) != 0) {
      throw FormatError(std::string("corrupt ZSTD data: ") + ZSTD_getErrorName(left));
    }
    if (full && dst.pos > 0) {
      throw FormatError("the ZSTD data decompresses to more than its length says");
    }
    if (!full) out.advance(dst.pos);
    if (dst.pos == 0 && src.pos == before) throw FormatError("the ZSTD data ends early");
  }
  if (!out.full()) throw FormatError("the ZSTD data decompresses to less than its length says");
}

}  // namespace

std::vector<std::span<const std::byte>> body_buffers(
    const RecordBatch& batch, std::span<const std::byte> body,
    std::vector<std::unique_ptr<std::byte[]>>& owned, std::size_t& owned_bytes,
    const std::vector<bool>* only) {
  std::vector<std::span<const std::byte>> raw(batch.buffers.size());
  for (std::size_t i = 0; i < batch.buffers.size(); ++i) {
    if (only != nullptr && !(*only)[i]) continue;
    const Buffer& b = batch.buffers[i];
    if (b.offset < 0 || b.length < 0 || static_cast<std::uint64_t>(b.offset) > body.size() ||
        static_cast<std::uint64_t>(b.length) > body.size() - static_cast<std::uint64_t>(b.offset)) {
      throw FormatError("buffer " + std::to_string(i) + ": " + std::to_string(b.length) +
                        " bytes at " + std::to_string(b.offset) + ", outside the message body of " +
                        std::to_string(body.size()) + " bytes");
    }
    raw[i] = body.subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.length));
  }
  return unpack_buffers(batch, raw, owned, owned_bytes);
}

std::size_t unpacked_bytes(const RecordBatch& batch, std::span<const std::byte> body,
                           const std::vector<bool>& only) {
  std::size_t n = 0;
  std::set<std::pair<std::int64_t, std::int64_t>> counted;
  for (std::size_t i = 0; i < batch.buffers.size(); ++i) {
    if (!only[i]) continue;
    const Buffer& b = batch.buffers[i];
    if (!counted.emplace(b.offset, b.length).second) continue;  // as unpack_buffers(): once
    if (b.offset < 0 || b.length < 0 || static_cast<std::uint64_t>(b.offset) > body.size() ||
        static_cast<std::uint64_t>(b.length) > body.size() - static_cast<std::uint64_t>(b.offset)) {
      continue;  // refused when read (body_buffers())
    }
    const auto bytes =
        body.subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.length));
    if (batch.compression == Compression::none || bytes.size() < 8) {
      n += bytes.size();
      continue;
    }
    std::int64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    const auto packed = static_cast<std::int64_t>(bytes.size() - 8);
    if (length < 0) {  // -1: stored as it is
      n += static_cast<std::size_t>(packed);
      continue;
    }
    // As unpack_buffers() allows, and refuses beyond.
    const auto limit = batch.compression == Compression::lz4_frame ? packed * 256 + 1024
                                                                   : packed * 32768 + (1 << 17);
    n += static_cast<std::size_t>(std::min({length, limit, kMaxBuffer}));
  }
  return n;
}

std::vector<std::span<const std::byte>> unpack_buffers(
    const RecordBatch& batch, const std::vector<std::span<const std::byte>>& raw,
    std::vector<std::unique_ptr<std::byte[]>>& owned, std::size_t& owned_bytes) {
  std::vector<std::span<const std::byte>> out;
  out.reserve(raw.size());
  std::map<std::pair<const std::byte*, std::size_t>, std::size_t> unpacked;  // range: buffer
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const std::string which = "buffer " + std::to_string(i) + ": ";
    const auto bytes = raw[i];
    if (batch.compression == Compression::none || bytes.empty()) {
      out.push_back(bytes);
      continue;
    }
    // Buffers may share their stored bytes (a file of 10 KB pointed 64 columns at one frame of
    // 64 MiB): each stored range is decompressed once, and its buffers view it.
    const auto [same, fresh] = unpacked.try_emplace({bytes.data(), bytes.size()}, i);
    if (!fresh) {
      out.push_back(out[same->second]);
      continue;
    }
    if (bytes.size() < 8) throw FormatError(which + "a compressed buffer of under 8 bytes");
    std::int64_t length = 0;
    std::memcpy(&length, bytes.data(), 8);
    const auto packed = bytes.subspan(8);
    if (length == -1) {
      out.push_back(packed);
      continue;
    }
    // LZ4 frames expand at most 255-fold; zstd much more (an RLE block: 128 KiB in 4 bytes),
    // but not without limit: a forged length cannot ask for more than the data could make,
    // and the buffer grows only as the data decompresses.
    const auto limit = batch.compression == Compression::lz4_frame
                           ? static_cast<std::int64_t>(packed.size()) * 256 + 1024
                           : static_cast<std::int64_t>(packed.size()) * 32768 + (1 << 17);
    if (length < 0 || length > kMaxBuffer || length > limit) {
      throw FormatError(which + "a decompressed length of " + std::to_string(length) +
                        " bytes for " + std::to_string(packed.size()) + " compressed");
    }
    Growing dst(static_cast<std::size_t>(length), packed.size());
    try {
      if (batch.compression == Compression::lz4_frame) {
        lz4_frame(packed, dst);
      } else {
        zstd(packed, dst);
      }
    } catch (const FormatError& e) {
      throw FormatError(which + e.what());
    }
    owned.push_back(dst.take());
    owned_bytes += static_cast<std::size_t>(length);
    out.emplace_back(owned.back().get(), static_cast<std::size_t>(length));
  }
  return out;
}

}  // namespace ferry::detail::arrow
