#include "datasets/image/image_png_fast.hpp"

#include <libdeflate.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "core/checked.hpp"
#include "datasets/image/image_internal.hpp"

namespace ferry::detail::image {
namespace {

constexpr std::array<std::uint8_t, 8> kSignature = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
constexpr std::size_t kMaxChunks = 64;  // more: libspng, whose chunk limits apply

bool is(const std::uint8_t* type, const char (&name)[5]) { return std::memcmp(type, name, 4) == 0; }

struct DecompressorFree {
  void operator()(libdeflate_decompressor* d) const noexcept { libdeflate_free_decompressor(d); }
};

libdeflate_decompressor* decompressor() {
  thread_local std::unique_ptr<libdeflate_decompressor, DecompressorFree> d(
      libdeflate_alloc_decompressor());
  return d.get();
}

// PNG's Paeth predictor.
std::uint8_t paeth(int a, int b, int c) {
  const int p = a + b - c;
  const int pa = std::abs(p - a);
  const int pb = std::abs(p - b);
  const int pc = std::abs(p - c);
  if (pa <= pb && pa <= pc) return static_cast<std::uint8_t>(a);
  return static_cast<std::uint8_t>(pb <= pc ? b : c);
}

// Reverses row `y`'s filter from `in` (its filter byte, then `n` bytes) into `out`, given the
// row above (`prev`, nullptr for the first). False for an unknown filter.
bool unfilter(const std::uint8_t* in, const std::uint8_t* prev, std::size_t n, std::size_t bpp,
              std::uint8_t* out) {
  const std::uint8_t filter = in[0];
  const std::uint8_t* raw = in + 1;
  switch (filter) {
    case 0:
      std::memcpy(out, raw, n);
      return true;
    case 1:
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = static_cast<std::uint8_t>(raw[i] + (i >= bpp ? out[i - bpp] : 0));
      }
      return true;
    case 2:
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = static_cast<std::uint8_t>(raw[i] + (prev != nullptr ? prev[i] : 0));
      }
      return true;
    case 3:
      for (std::size_t i = 0; i < n; ++i) {
        const int a = i >= bpp ? out[i - bpp] : 0;
        const int b = prev != nullptr ? prev[i] : 0;
        out[i] = static_cast<std::uint8_t>(raw[i] + ((a + b) >> 1));
      }
      return true;
    case 4:
      for (std::size_t i = 0; i < n; ++i) {
        const int a = i >= bpp ? out[i - bpp] : 0;
        const int b = prev != nullptr ? prev[i] : 0;
        const int c = (i >= bpp && prev != nullptr) ? prev[i - bpp] : 0;
        out[i] = static_cast<std::uint8_t>(raw[i] + paeth(a, b, c));
      }
      return true;
    default:
      return false;
  }
}

std::atomic<bool> fast_enabled{true};

}  // namespace

bool set_png_fast(bool enabled) noexcept { return fast_enabled.exchange(enabled); }
bool png_fast_enabled() noexcept { return fast_enabled.load(std::memory_order_relaxed); }

bool decode_png_fast(std::span<const std::uint8_t> bytes, int channels, std::int64_t max_pixels,
                     PngFast& got) {
  const std::uint8_t* p = bytes.data();
  const std::uint8_t* const end = p + bytes.size();
  // The signature, then IHDR first, as PNG requires.
  if (bytes.size() < kSignature.size() + 25 ||
      std::memcmp(p, kSignature.data(), kSignature.size()) != 0) {
    return false;
  }
  p += kSignature.size();
  std::uint32_t width = 0;
  std::uint32_t height = 0;
  int bpp = 0;                         // bytes a pixel
  const std::uint8_t* idat = nullptr;  // the one IDAT's data, or the first of several
  std::size_t idat_bytes = 0;
  std::size_t idat_chunks = 0;
  bool idat_ended = false;  // a chunk other than IDAT came after IDATs
  bool ended = false;
  std::uint8_t* joined = nullptr;  // several IDATs' data, one after the other
  for (std::size_t chunk = 0; !ended; ++chunk) {
    if (chunk == kMaxChunks || end - p < 12) return false;
    const std::uint32_t length = big_endian32(p);
    const std::uint8_t* type = p + 4;
    const std::uint8_t* data = p + 8;
    if (length > 0x7fffffffU || static_cast<std::size_t>(end - data) < std::size_t{length} + 4) {
      return false;
    }
    if (libdeflate_crc32(0, type, std::size_t{length} + 4) != big_endian32(data + length))
      return false;
    p = data + length + 4;
    if (chunk == 0) {
      // IHDR: 8-bit samples, no interlace, and a color type whose samples are the output's.
      if (!is(type, "IHDR") || length != 13) return false;
      width = big_endian32(data);
      height = big_endian32(data + 4);
      const std::uint8_t depth = data[8];
      const std::uint8_t color = data[9];
      if (depth != 8 || data[10] != 0 || data[11] != 0 || data[12] != 0) return false;
      if (color == 0 && channels == 1) {
        bpp = 1;
      } else if (color == 2 && channels == 3) {
        bpp = 3;
      } else if (color == 6 && channels == 4) {
        bpp = 4;
      } else {
        return false;
      }
      if (width == 0 || height == 0 || width > (1U << 24) || height > (1U << 24)) return false;
      const std::optional<std::int64_t> pixels =
          try_mul<std::int64_t>(std::int64_t{width}, std::int64_t{height});
      if (!pixels || *pixels > max_pixels) return false;
      continue;
    }
    if (is(type, "IDAT")) {
      if (idat_ended) return false;
      if (idat_chunks == 0) {
        idat = data;
      } else {
        if (idat_chunks == 1) {
          // From the second on, the data is copied together: at most the file's size.
          joined = transpose_scratch().get(bytes.size());
          std::memcpy(joined, idat, idat_bytes);
          idat = joined;
        }
        std::memcpy(joined + idat_bytes, data, length);
      }
      idat_bytes += length;
      ++idat_chunks;
      continue;
    }
    if (idat_chunks != 0) idat_ended = true;
    if (is(type, "IEND")) {
      ended = true;
    } else if ((type[0] & 0x20) == 0 || is(type, "tRNS")) {
      // A critical chunk (PLTE, or one unknown), or transparency: libspng's case.
      return false;
    }
    // Other ancillary chunks (text, gamma, times...) do not change the samples decoded.
  }
  if (idat_chunks == 0) return false;
  const std::size_t row = std::size_t{width} * static_cast<std::size_t>(bpp);
  const std::size_t filtered = (row + 1) * height;  // within 2^24 × (2^26 + 1): no overflow
  // Deflate expands at most about 1032 times: a header that promises more than the data can
  // give is not worth its buffers here (libspng then says what is wrong).
  constexpr std::size_t kMaxInflation = 1032;
  if (filtered / kMaxInflation > idat_bytes + 64) return false;
  libdeflate_decompressor* inflater = decompressor();
  if (inflater == nullptr) return false;
  // The filtered rows in the pixel buffer's space: after the pixels, which the rows then fill.
  const std::size_t pixel_bytes = row * height;
  std::uint8_t* buffer = pixel_scratch().get(pixel_bytes + filtered);
  std::uint8_t* rows = buffer + pixel_bytes;
  // Exactly the image's filtered rows, the Adler-32 checked; anything else: libspng's case.
  if (libdeflate_zlib_decompress(inflater, idat, idat_bytes, rows, filtered, nullptr) !=
      LIBDEFLATE_SUCCESS) {
    return false;
  }
  for (std::uint32_t y = 0; y < height; ++y) {
    std::uint8_t* out = buffer + y * row;
    if (!unfilter(rows + y * (row + 1), y == 0 ? nullptr : out - row, row,
                  static_cast<std::size_t>(bpp), out)) {
      return false;
    }
  }
  got.pixels = buffer;
  got.width = static_cast<int>(width);
  got.height = static_cast<int>(height);
  return true;
}

}  // namespace ferry::detail::image
