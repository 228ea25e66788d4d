#include "datasets/image/image_decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>

#include "core/checked.hpp"
#include "datasets/common/file_io.hpp"
#include "datasets/image/image_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::image {

[[noreturn]] void fail(std::string_view name, const std::string& why) {
  throw DataError(std::string(name) + ": " + why);
}

Scratch& file_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& pixel_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& resize_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& transpose_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

[[noreturn]] void fail_too_large(std::string_view name, const char* format, std::int64_t width,
                                 std::int64_t height, std::int64_t max_pixels) {
  fail(name, std::string(format) + " of " + std::to_string(width) + " x " + std::to_string(height) +
                 " pixels, more than max_pixels (" + std::to_string(max_pixels) + ")");
}

// The header's size, before anything is allocated for it: within 1 .. max_pixels pixels.
void check_size(std::int64_t width, std::int64_t height, std::int64_t max_pixels,
                std::string_view name, const char* format) {
  if (width < 1 || height < 1) {
    fail(name, std::string("corrupt ") + format + " header: " + std::to_string(width) + " x " +
                   std::to_string(height) + " pixels");
  }
  const std::optional<std::int64_t> pixels = try_mul<std::int64_t>(width, height);
  if (!pixels || *pixels > max_pixels) fail_too_large(name, format, width, height, max_pixels);
}

// Bytes of `pixels` pixels (width × height) of `channels` bytes each, in this thread's scratch.
std::uint8_t* pixel_buffer(int width, int height, int channels, std::string_view name) {
  const std::string what = std::string(name) + ": decoded image";
  return pixel_scratch().get(checked_mul<std::size_t, DataError>(
      checked_mul<std::size_t, DataError>(width, height, what), channels, what));
}

namespace {

// Releases what one large image left in this thread's buffers (see kScratchKeepBytes).
void trim_scratch() noexcept {
  file_scratch().trim(kScratchKeepBytes);
  pixel_scratch().trim(kScratchKeepBytes);
  resize_scratch().trim(kScratchKeepBytes);
  transpose_scratch().trim(kScratchKeepBytes);
}

std::string hex_start(std::span<const std::uint8_t> bytes) {
  std::string out;
  char two[4];
  for (std::size_t i = 0; i < bytes.size() && i < 4; ++i) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned>(bytes[i]));
    if (!out.empty()) out += ' ';
    out += two;
  }
  return out;
}

}  // namespace

}  // namespace ferry::detail::image

namespace ferry::detail {

using namespace image;

ImageFormat sniff_image(std::span<const std::uint8_t> bytes) noexcept {
  static constexpr std::uint8_t kJpeg[] = {0xff, 0xd8, 0xff};
  static constexpr std::uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= sizeof kJpeg && std::equal(std::begin(kJpeg), std::end(kJpeg), bytes.begin()))
    return ImageFormat::jpeg;
  if (bytes.size() >= sizeof kPng && std::equal(std::begin(kPng), std::end(kPng), bytes.begin()))
    return ImageFormat::png;
  return ImageFormat::unknown;
}

void check_image_options(const ImageOptions& o, std::string_view who) {
  const std::string w(who);
  if (o.max_pixels < 1 || o.max_pixels > kMaxPixelsLimit) {
    throw ConfigError(w + ": max_pixels must be 1 to " + std::to_string(kMaxPixelsLimit) +
                      ", got " + std::to_string(o.max_pixels));
  }
  if (o.max_jpeg_scans < 1) {
    throw ConfigError(w + ": max_jpeg_scans must be at least 1, got " +
                      std::to_string(o.max_jpeg_scans));
  }
  if (o.height < 1 || o.width < 1) {
    throw ConfigError(w + ": height and width must be at least 1, got " + std::to_string(o.height) +
                      " x " + std::to_string(o.width));
  }
  if (std::int64_t{o.height} * o.width > o.max_pixels) {  // ints: no overflow in 64 bits
    throw ConfigError(w + ": height x width, " + std::to_string(o.height) + " x " +
                      std::to_string(o.width) + ", is more than max_pixels (" +
                      std::to_string(o.max_pixels) + ")");
  }
  if (o.channels != 1 && o.channels != 3 && o.channels != 4) {
    throw ConfigError(w + ": channels must be 1 (gray), 3 (RGB) or 4 (RGBA), got " +
                      std::to_string(o.channels));
  }
  if (o.geometry != Geometry::resize_then_center_crop &&
      o.geometry != Geometry::random_resized_crop && o.geometry != Geometry::resize) {
    throw ConfigError(w + ": unknown geometry " + std::to_string(static_cast<int>(o.geometry)));
  }
  if (o.resize < 0 || o.resize > (1 << 20)) {
    throw ConfigError(w + ": resize must be 0 (automatic) or a side of at most 2^20 pixels, got " +
                      std::to_string(o.resize));
  }
  if (o.resize != 0 && o.geometry != Geometry::resize_then_center_crop) {
    throw ConfigError(
        w + ": resize (" + std::to_string(o.resize) +
        ") applies to Geometry::resize_then_center_crop only; leave it 0 for " +
        (o.geometry == Geometry::resize ? "Geometry::resize" : "Geometry::random_resized_crop"));
  }
  if (!o.normalize) return;
  const Normalize& n = *o.normalize;
  const auto c = static_cast<std::size_t>(o.channels);
  for (const auto* values : {&n.mean, &n.std}) {
    const char* what = values == &n.mean ? "mean" : "std";
    if (values->size() != 1 && values->size() != c) {
      throw ConfigError(w + ": normalize." + what + " has " + std::to_string(values->size()) +
                        " values; give 1 or one per channel (" + std::to_string(c) + ")");
    }
    for (const float v : *values) {
      if (!std::isfinite(v)) throw ConfigError(w + ": normalize." + what + " is not finite");
    }
  }
  for (const float s : n.std) {
    if (s == 0.0f) throw ConfigError(w + ": normalize.std has a 0");
  }
  if (!std::isfinite(n.scale)) throw ConfigError(w + ": normalize.scale is not finite");
  if (n.dtype != DType::f32 && n.dtype != DType::f16 && n.dtype != DType::bf16) {
    throw ConfigError(w + ": normalize.dtype must be f32, f16 or bf16, got " +
                      std::string(dtype_name(n.dtype)));
  }
}

std::size_t max_file_bytes(const ImageOptions& options) {
  return checked_add(checked_mul(options.max_pixels, 8, "ImageFolder: max_pixels"),
                     kPngChunkCacheBytes, "ImageFolder: max_pixels");
}

std::size_t decode_scratch_bytes() noexcept {
  return file_scratch().capacity() + pixel_scratch().capacity() + resize_scratch().capacity() +
         transpose_scratch().capacity();
}

void decode_image(std::span<const std::uint8_t> bytes, const ImageOptions& options,
                  std::uint64_t seed, std::uint8_t* out, std::string_view name) {
  // However the decode ends, a buffer one large image grew is not kept.
  struct Trim {
    Trim() = default;
    Trim(const Trim&) = delete;
    Trim& operator=(const Trim&) = delete;
    ~Trim() { trim_scratch(); }
  } const trim;
  switch (sniff_image(bytes)) {
    case ImageFormat::jpeg:
      decode_jpeg(bytes, options, seed, out, name);
      return;
    case ImageFormat::png:
      decode_png(bytes, options, seed, out, name);
      return;
    case ImageFormat::unknown:
      break;
  }
  if (bytes.empty()) fail(name, "empty file");
  fail(name, "not a JPEG or PNG (starts with " + hex_start(bytes) + ")");
}

std::span<const std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                              std::string_view name, std::size_t max_bytes) {
  static const std::string what_fits = "an image within max_pixels takes (8 bytes a pixel, plus " +
                                       std::to_string(kPngChunkCacheBytes) + " of chunks)";
  try {
    const std::span<const std::byte> bytes = read_file(
        path, FileLabel{{}, name}, max_bytes, what_fits,
        [](std::size_t n) { return reinterpret_cast<std::byte*>(file_scratch().get(n)); });
    return {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()};
  } catch (...) {
    file_scratch().trim(kScratchKeepBytes);  // a failed read keeps no large buffer either
    throw;
  }
}

}  // namespace ferry::detail
