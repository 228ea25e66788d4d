// The DELTA encodings and BYTE_STREAM_SPLIT (the Parquet specification, "Encodings"), checked
// against the bytes there are at every step.

#include <cstring>
#include <string>
#include <utility>

#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_values.hpp"

namespace ferry::detail::parquet {
namespace {

class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> data) : data_(data) {}
  std::size_t position() const noexcept { return pos_; }
  std::size_t left() const noexcept { return data_.size() - pos_; }

  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) throw ChunkError("DELTA values end early (a header)");
      const auto b = static_cast<std::uint8_t>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw ChunkError("a DELTA header's number longer than 10 bytes");
  }
  std::int64_t zigzag() {
    const std::uint64_t v = varint();
    return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
  }
  std::uint8_t byte() {
    if (pos_ >= data_.size()) throw ChunkError("DELTA values end early (a bit width)");
    return static_cast<std::uint8_t>(data_[pos_++]);
  }
  /// Value i of a run of bit-packed values of `width` bits starting here (not consumed).
  std::uint64_t unpack(std::size_t i, int width) const {
    if (width == 0) return 0;
    const std::uint64_t bit = static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(width);
    const std::uint64_t first = bit / 8;
    const std::uint64_t last = (bit + static_cast<std::uint64_t>(width) - 1) / 8;
    if (last >= left()) throw ChunkError("DELTA values end early (a miniblock)");
    std::uint64_t lo = 0;
    std::uint64_t hi = 0;  // bits beyond the 64 a shifted 9-byte span may hold
    for (std::uint64_t b = first; b <= last; ++b) {
      const auto byte = static_cast<std::uint64_t>(static_cast<std::uint8_t>(data_[pos_ + b]));
      const std::uint64_t at = 8 * (b - first);
      if (at < 64) lo |= byte << at;
      if (at > 0) hi |= at < 64 ? byte >> (64 - at) : byte << (at - 64);
    }
    const unsigned shift = static_cast<unsigned>(bit % 8);
    std::uint64_t v = shift == 0 ? lo : (lo >> shift) | (hi << (64 - shift));
    if (width < 64) v &= (std::uint64_t{1} << width) - 1;
    return v;
  }
  void skip(std::size_t n) {
    if (n > left()) throw ChunkError("DELTA values end early (a miniblock)");
    pos_ += n;
  }

 private:
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

/// Decodes n values of DELTA_BINARY_PACKED (as 64-bit two's complement sums, which int32
/// columns truncate); returns the bytes it took.
std::size_t delta_values(std::span<const std::byte> data, std::size_t n,
                         std::vector<std::uint64_t>& out) {
  Cursor c(data);
  const std::uint64_t block = c.varint();
  const std::uint64_t minis = c.varint();
  const std::uint64_t total = c.varint();
  std::uint64_t value = static_cast<std::uint64_t>(c.zigzag());
  if (block == 0 || block % 128 != 0 || block > (1U << 20) || minis == 0 || block % minis != 0 ||
      (block / minis) % 32 != 0) {
    throw ChunkError("a DELTA_BINARY_PACKED header with blocks of " + std::to_string(block) +
                     " values in " + std::to_string(minis) + " miniblocks");
  }
  if (total < n) {
    throw ChunkError("DELTA_BINARY_PACKED holds " + std::to_string(total) + " values, not " +
                     std::to_string(n));
  }
  const std::size_t per_mini = block / minis;
  out.clear();
  out.reserve(n);
  if (n == 0) return c.position();
  out.push_back(value);
  std::uint8_t widths[1024];
  if (minis > std::size(widths)) throw ChunkError("DELTA_BINARY_PACKED: too many miniblocks");
  while (out.size() < n) {
    const auto min_delta = static_cast<std::uint64_t>(c.zigzag());
    for (std::uint64_t m = 0; m < minis; ++m) {
      widths[m] = c.byte();
      if (widths[m] > 64) throw ChunkError("DELTA_BINARY_PACKED: a bit width above 64");
    }
    for (std::uint64_t m = 0; m < minis && out.size() < n; ++m) {
      const std::size_t take = std::min(per_mini, n - out.size());
      for (std::size_t i = 0; i < take; ++i) {
        value += min_delta + c.unpack(i, widths[m]);  // modulo 2^64, as the writer's
        out.push_back(value);
      }
      c.skip(per_mini * widths[m] / 8);
    }
  }
  return c.position();
}

/// n lengths by DELTA_BINARY_PACKED, each checked to be a length; returns the bytes taken.
std::size_t lengths(std::span<const std::byte> data, std::size_t n,
                    std::vector<std::uint64_t>& out) {
  const std::size_t used = delta_values(data, n, out);
  for (const std::uint64_t l : out) {
    if (l > (std::uint64_t{1} << 31)) {
      throw ChunkError("a DELTA length of " + std::to_string(static_cast<std::int64_t>(l)));
    }
  }
  return used;
}

}  // namespace

void delta_binary_packed(std::span<const std::byte> data, Physical type, std::size_t n,
                         Values& out) {
  if (type != Physical::int32 && type != Physical::int64) {
    throw ChunkError("DELTA_BINARY_PACKED values in a column that is not INT32 or INT64");
  }
  std::vector<std::uint64_t> v;
  delta_values(data, n, v);
  out.count = n;
  const std::size_t width = type == Physical::int32 ? 4 : 8;
  out.fixed.resize(n * width);
  for (std::size_t i = 0; i < n; ++i) {
    if (width == 4) {
      const auto x = static_cast<std::uint32_t>(v[i]);
      std::memcpy(out.fixed.data() + i * 4, &x, 4);
    } else {
      std::memcpy(out.fixed.data() + i * 8, &v[i], 8);
    }
  }
}

void delta_length_byte_array(std::span<const std::byte> data, std::size_t n, Values& out) {
  std::vector<std::uint64_t> len;
  std::size_t pos = lengths(data, n, len);
  out.count = n;
  out.offsets.assign(1, 0);
  for (std::size_t i = 0; i < n; ++i) {
    if (len[i] > data.size() - pos) throw ChunkError("DELTA_LENGTH_BYTE_ARRAY values end early");
    out.bytes.insert(out.bytes.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
                     data.begin() + static_cast<std::ptrdiff_t>(pos + len[i]));
    pos += len[i];
    out.offsets.push_back(out.bytes.size());
  }
}

void delta_byte_array(std::span<const std::byte> data, std::size_t n, Values& out) {
  std::vector<std::uint64_t> prefix;
  const std::size_t used = lengths(data, n, prefix);
  Values suffix;
  delta_length_byte_array(data.subspan(used), n, suffix);
  // The values' lengths first, from the prefixes and the suffixes' lengths: prefixes repeat
  // bytes for a few bits each, so a page of a megabyte can claim values of terabytes (each one
  // byte longer than the one before); they are bounded as a page's decompressed bytes are,
  // before anything is made.
  std::size_t total = 0;
  std::size_t prev_len = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (prefix[i] > prev_len) {
      throw ChunkError("DELTA_BYTE_ARRAY: a prefix of " + std::to_string(prefix[i]) +
                       " bytes of a value of " + std::to_string(prev_len));
    }
    const std::size_t length = prefix[i] + (suffix.offsets[i + 1] - suffix.offsets[i]);
    if (length > kMaxPageBytes - total) {
      throw ChunkError("DELTA_BYTE_ARRAY values of more than 1 GiB in one page (value " +
                       std::to_string(i) + ")");
    }
    total += length;
    prev_len = length;
  }
  out.count = n;
  out.offsets.assign(1, 0);
  out.bytes.reserve(total);
  std::size_t prev = 0;  // the value before's first byte in out.bytes
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t start = out.bytes.size();
    out.bytes.resize(start + prefix[i]);
    if (prefix[i] > 0) std::memmove(out.bytes.data() + start, out.bytes.data() + prev, prefix[i]);
    out.bytes.insert(out.bytes.end(),
                     suffix.bytes.begin() + static_cast<std::ptrdiff_t>(suffix.offsets[i]),
                     suffix.bytes.begin() + static_cast<std::ptrdiff_t>(suffix.offsets[i + 1]));
    out.offsets.push_back(out.bytes.size());
    prev = start;
  }
}

void fixed_width(Values& values, std::size_t width) {
  for (std::size_t i = 0; i < values.count; ++i) {
    const std::uint64_t length = values.offsets[i + 1] - values.offsets[i];
    if (length != width) {
      throw ChunkError("a FIXED_LEN_BYTE_ARRAY value of " + std::to_string(length) +
                       " bytes, not " + std::to_string(width));
    }
  }
  values.fixed = std::move(values.bytes);  // the values one after another, each `width` long
  values.bytes.clear();
  values.offsets.assign(1, 0);
}

void byte_stream_split(std::span<const std::byte> data, Physical type, std::size_t n, Values& out) {
  const std::size_t width = physical_width(type);
  if (width == 0 || type == Physical::boolean) {
    throw ChunkError("BYTE_STREAM_SPLIT values in a column that is not of fixed width");
  }
  if (n > data.size() / width) throw ChunkError("BYTE_STREAM_SPLIT values end early");
  out.count = n;
  out.fixed.resize(n * width);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < width; ++k) out.fixed[i * width + k] = data[k * n + i];
  }
}

}  // namespace ferry::detail::parquet
