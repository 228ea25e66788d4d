#pragma once

// The common PNG decoded without libspng: 8-bit gray, RGB or RGBA, not interlaced, with no
// palette or transparency chunk, into as many channels as it has. Its IDAT data is inflated by
// libdeflate in one call (the zlib stream's Adler-32 checked, and every chunk's CRC), and the
// rows' filters reversed here. Anything else, or anything irregular (a bad CRC, a stream that
// does not give exactly the image's rows, an unknown filter, a critical chunk it does not
// know), is left to libspng (decode_png()), which then decodes it or names what is wrong: the
// bytes out are libspng's either way. Internal to lib/datasets/image.

#include <cstdint>
#include <span>

namespace ferry::detail::image {

/// Where decode_png_fast() left the pixels (this thread's pixel scratch) and their size.
struct PngFast {
  const std::uint8_t* pixels = nullptr;
  int width = 0;
  int height = 0;
};

/// Decodes `bytes` as `channels` (1, 3 or 4) per pixel, if the file is such a PNG of at most
/// `max_pixels` pixels. False: not decoded (nothing is thrown: the caller asks libspng).
bool decode_png_fast(std::span<const std::uint8_t> bytes, int channels, std::int64_t max_pixels,
                     PngFast& got);

/// The tests' switch: off, every PNG goes to libspng. Returns the previous setting.
bool set_png_fast(bool enabled) noexcept;
bool png_fast_enabled() noexcept;

}  // namespace ferry::detail::image
