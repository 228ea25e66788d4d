#pragma once

// The decoding behind image.hpp's decode_image() (and so ImageFolder's), on bytes in memory (the
// fuzzer and the benchmark call it directly): JPEG through libjpeg-turbo's libjpeg API, which
// decodes only the rows and columns the output needs (jpeg_crop_scanline, jpeg_skip_scanlines,
// and DCT scaling at 1/2, 1/4 or 1/8 when the output needs at most that), PNG through libspng,
// then the geometry (resize, crop, flip) with ferry's fixed-point resampler
// (image_resample.hpp), written as u8 [height, width, channels] into the caller's buffer.
//
// Every function here may be called from many threads at once. Each thread keeps its own
// libjpeg decompressor and scratch buffers (file bytes, decoded pixels, the resizer's working
// memory), reused from call to call, so steady-state decoding allocates nothing of ferry's own
// (the codecs still allocate their small working state per image). A buffer that one large
// image grew beyond kScratchKeepBytes is released when its decode_image() returns, so one huge
// image does not keep its memory resident for the thread's life.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "ferry/image.hpp"

namespace ferry::detail {

/// ImageOptions::max_pixels' default: the largest image decoded, in source pixels.
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 26;
/// The most ImageOptions::max_pixels may be: 4 bytes a pixel then still fit the int offsets of
/// libjpeg and the resampler.
inline constexpr std::int64_t kMaxPixelsLimit = std::int64_t{1} << 28;
/// libspng's limits for a PNG's ancillary chunks (text, ICC profile, EXIF: none of which
/// ImageFolder uses): a chunk over kPngChunkBytes is skipped unread; those kept may take
/// kPngChunkCacheBytes in all (and libspng keeps at most 1000), more raise DataError.
inline constexpr std::size_t kPngChunkBytes = std::size_t{16} << 20;
inline constexpr std::size_t kPngChunkCacheBytes = std::size_t{64} << 20;
/// The most working memory the resize may take for one image (weights, the image between its
/// two passes). Ordinary resizes take a few hundred kilobytes; only absurd outputs (a one-pixel
/// image stretched to 2^26 pixels) need more, and are refused with DataError rather than
/// asking for gigabytes.
inline constexpr std::size_t kMaxResizeBytes = std::size_t{256} << 20;
/// Each per-thread scratch buffer keeps at most this much between images (16 MiB: a 5-megapixel
/// RGB image at full size, or any photo a JPEG's DCT scaling shrinks for a training-sized
/// output). A larger one is released after its image, costing that image one allocation.
inline constexpr std::size_t kScratchKeepBytes = std::size_t{16} << 20;

enum class ImageFormat { unknown, jpeg, png };

/// The format by its magic bytes (not by the file's name).
ImageFormat sniff_image(std::span<const std::uint8_t> bytes) noexcept;

/// \throws ConfigError (messages start with `who` and name the member) for options ImageFolder
/// cannot honour: height or width < 1 or height × width over max_pixels, channels not 1, 3 or 4,
/// resize < 0 or over 2^20, resize set with a geometry other than resize_then_center_crop, an
/// unknown geometry, max_pixels outside [1, kMaxPixelsLimit], max_jpeg_scans < 1, a bad
/// normalize.
void check_image_options(const ImageOptions& options, std::string_view who);

/// The largest file read for `options`: 8 bytes a pixel of max_pixels (a 16-bit RGBA PNG
/// stored uncompressed) plus kPngChunkCacheBytes of ancillary chunks.
std::size_t max_file_bytes(const ImageOptions& options);

/// The number of scans (SOS markers) of a JPEG, found by walking its markers and skipping the
/// entropy-coded data, up to EOI or the end of the bytes: what libjpeg would decode, counted in
/// one cheap pass. Bytes that are not a JPEG count what markers they happen to have.
std::size_t jpeg_scan_count(std::span<const std::uint8_t> bytes) noexcept;

/// What one walk over a JPEG's markers finds: its scans (as jpeg_scan_count()), and whether it
/// reaches the EOI marker (a file cut short does not).
struct JpegMarkers {
  std::size_t scans = 0;
  bool ends = false;
};
JpegMarkers jpeg_markers(std::span<const std::uint8_t> bytes) noexcept;

/// This thread's decode scratch, in bytes (all its buffers), for tests of kScratchKeepBytes.
std::size_t decode_scratch_bytes() noexcept;

/// How one source image maps onto the output: source pixels [x0, x1) × [y0, y1) (fractional
/// where the geometry says so) fill output pixels [out_x0, out_x1) × [out_y0, out_y1); output
/// pixels outside that window are 0 (resize_then_center_crop pads when the crop is larger than
/// the resized image, as torchvision's CenterCrop does).
struct ImagePlan {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  int out_x0 = 0, out_y0 = 0, out_x1 = 0, out_y1 = 0;
  bool flip = false;  ///< mirror the output left-right
};

/// The plan for a `width` × `height` source under `options`; random_resized_crop and
/// random_flip draw from `seed` only.
ImagePlan plan_image(int width, int height, const ImageOptions& options, std::uint64_t seed);

/// A DCT scaling factor num/denom.
struct JpegScale {
  int num = 1, denom = 1;
};

/// How many times over a DCT-scaled image must cover the output: twice for the evaluation
/// geometries (resize_then_center_crop, resize), 1.5 times for random_resized_crop, whose
/// training crops trade a little fidelity (still within 1.0 u8 level of PIL's on real photos,
/// tests/image_resize_test.cpp) for decoding up to 4× fewer pixels.
inline constexpr double kEvalCover = 2.0;
inline constexpr double kRandomCropCover = 1.5;

/// The DCT-domain scale for an output that needs `need_x` × `need_y` output pixels per source
/// pixel: 1/1 unless both are at most 1 / (2 cover), else the smallest of 1/2, 1/4 and 1/8
/// (the factors libjpeg-turbo's SIMD code covers) that is still at least `cover` times both, so
/// that the scaled image covers the output `cover` times over and the resize after it does the
/// filtering.
JpegScale pick_jpeg_scale(double need_x, double need_y, double cover = kEvalCover);

/// Decodes a JPEG or PNG held in memory and writes options.height × options.width ×
/// options.channels bytes (HWC) to `out`. `seed` drives random_resized_crop and random_flip.
/// `options` must pass check_image_options().
/// \throws DataError "<name>: <reason>" (name is the whole prefix: "ImageFolder: <file>") for bytes
/// that are not a whole, valid JPEG or PNG (libjpeg's warnings count as errors, and a JPEG
/// must end with its EOI marker), an image over
/// options.max_pixels, a JPEG of more than options.max_jpeg_scans scans, PNG ancillary chunks over
/// kPngChunkCacheBytes, or a resize needing over kMaxResizeBytes.
void decode_image(std::span<const std::uint8_t> bytes, const ImageOptions& options,
                  std::uint64_t seed, std::uint8_t* out, std::string_view name);

/// The whole file, in this thread's buffer: valid until this thread's next call (of this
/// function or decode_image()).
/// \throws DataError "<name>: cannot open: <why>" (or cannot read, or not a
/// regular file), or for a file larger than `max_bytes`, before reading it.
std::span<const std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                              std::string_view name,
                                              std::size_t max_bytes = max_file_bytes({}));

}  // namespace ferry::detail
