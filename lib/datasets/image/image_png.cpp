// The image decoder's PNGs: the common ones without libspng (image_png_fast.hpp), the others by
// libspng, within the limits set before it reads the header.

#include <spng.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "core/checked.hpp"
#include "datasets/image/image_internal.hpp"
#include "datasets/image/image_png_fast.hpp"

namespace ferry::detail::image {
namespace {

// RGB (3 bytes a pixel) to gray, in place.
void rgb_to_gray(std::uint8_t* px, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) px[i] = luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
}

struct SpngFree {
  void operator()(spng_ctx* ctx) const noexcept { spng_ctx_free(ctx); }
};

[[noreturn]] void png_fail(std::string_view name, int code, const char* what) {
  if (code == SPNG_ECHUNK_LIMITS) {
    // Ancillary chunks over kPngChunkBytes are skipped unread; these are the ones kept.
    fail(name, "PNG ancillary chunks over the limits (" + std::to_string(kPngChunkCacheBytes) +
                   " bytes of them kept, or libspng's count): " + spng_strerror(code));
  }
  fail(name, std::string(code == SPNG_EOF || code == SPNG_IO_EOF ? "truncated PNG" : what) + ": " +
                 spng_strerror(code));
}

}  // namespace

void decode_png(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                std::uint8_t* out, std::string_view name) {
  // The decoded image, at its own size, to the output's geometry.
  const auto finish = [&](const std::uint8_t* px, int width, int height) {
    const ImagePlan plan = plan_image(width, height, o, seed);
    const Fit& fit = fit_image(plan, o, 1.0, width, height, name);
    place({px, width, 0, 0}, plan, fit, o, out);
  };
  PngFast fast;
  if (png_fast_enabled() && decode_png_fast(bytes, o.channels, o.max_pixels, fast)) {
    finish(fast.pixels, fast.width, fast.height);
    return;
  }
  const std::unique_ptr<spng_ctx, SpngFree> ctx(spng_ctx_new(0));
  if (ctx == nullptr) throw std::bad_alloc();
  // libspng's own limits, so that a hostile header or chunk is refused as it is read: a side
  // over max_pixels (or 2^24, which keeps the resizer's row sizes small), one ancillary chunk
  // and all of them kept. The pixel count is checked below.
  const auto side = static_cast<std::uint32_t>(std::min<std::int64_t>(o.max_pixels, 1 << 24));
  int rc = spng_set_image_limits(ctx.get(), side, side);
  if (rc == 0) rc = spng_set_chunk_limits(ctx.get(), kPngChunkBytes, kPngChunkCacheBytes);
  if (rc == 0) rc = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  spng_ihdr ihdr{};
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  if ((rc == SPNG_EUSER_WIDTH || rc == SPNG_EUSER_HEIGHT) && bytes.size() >= 24) {
    // The sides libspng refused, from IHDR (the chunk right after the signature): named as
    // any image over the limits is.
    const std::int64_t width = big_endian32(bytes.data() + 16);
    const std::int64_t height = big_endian32(bytes.data() + 20);
    const std::optional<std::int64_t> pixels = try_mul<std::int64_t>(width, height);
    if (!pixels || *pixels > o.max_pixels) fail_too_large(name, "PNG", width, height, o.max_pixels);
    fail(name, "PNG of " + std::to_string(width) + " x " + std::to_string(height) +
                   " pixels, a side over the " + std::to_string(side) + " ImageFolder decodes");
  }
  if (rc != 0) png_fail(name, rc, "corrupt PNG header");
  check_size(ihdr.width, ihdr.height, o.max_pixels, name, "PNG");
  const auto width = static_cast<int>(ihdr.width);
  const auto height = static_cast<int>(ihdr.height);
  // spng expands palettes, low bit depths and 16 bits (to their high byte) itself; G8 takes
  // only gray of 8 bits or fewer, so other images come as RGB and are turned gray here.
  const bool gray_source = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8;
  int format = SPNG_FMT_RGB8;
  int flags = 0;
  if (o.channels == 1 && gray_source) {
    format = SPNG_FMT_G8;
  } else if (o.channels == 4) {
    format = SPNG_FMT_RGBA8;
    flags = SPNG_DECODE_TRNS;  // tRNS becomes alpha
  }
  std::size_t bytes_out = 0;
  rc = spng_decoded_image_size(ctx.get(), format, &bytes_out);
  if (rc != 0) png_fail(name, rc, "corrupt PNG");
  const int format_channels = format == SPNG_FMT_G8 ? 1 : format == SPNG_FMT_RGB8 ? 3 : 4;
  std::uint8_t* px = pixel_buffer(width, height, format_channels, name);
  if (bytes_out != static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                       static_cast<std::size_t>(format_channels)) {
    fail(name, "corrupt PNG: libspng sizes it " + std::to_string(bytes_out) + " bytes");
  }
  rc = spng_decode_image(ctx.get(), px, bytes_out, format, flags);
  if (rc != 0) png_fail(name, rc, "corrupt PNG");
  const std::size_t count = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  if (o.channels == 1 && !gray_source) rgb_to_gray(px, count);
  finish(px, width, height);
}

}  // namespace ferry::detail::image
