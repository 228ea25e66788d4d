#pragma once

// ImageFolder's decoding stage, usable on bytes in memory (the fuzzer and the benchmark call it
// directly): JPEG through TurboJPEG (scaled in the DCT domain when the output needs at most
// half the source's resolution), PNG through libspng, then the geometry (resize, crop, flip)
// with stb_image_resize, written as u8 [height, width, channels] into the caller's buffer.
//
// Every function here may be called from many threads at once. Each thread keeps its own
// TurboJPEG handle and scratch buffers (file bytes, decoded pixels), reused from call to call,
// so steady-state decoding allocates nothing of ferry's own (the codecs and the resizer still
// allocate their small working state per image).

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "ferry/image_folder.hpp"

namespace ferry::detail {

/// Largest image decoded, in source pixels (width × height): larger ones raise DataError
/// instead of asking for gigabytes.
inline constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 26;

enum class ImageFormat { unknown, jpeg, png };

/// The format by its magic bytes (not by the file's name).
ImageFormat sniff_image(std::span<const std::uint8_t> bytes) noexcept;

/// \throws ConfigError (messages start with `who`) for options ImageFolder cannot honour:
/// height or width < 1, channels not 1, 3 or 4, resize < 0, a bad normalize.
void check_image_options(const ImageOptions& options, std::string_view who);

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

/// A TurboJPEG scaling factor num/denom.
struct JpegScale {
  int num = 1, denom = 1;
};

/// The DCT-domain scale for an output that needs `need_x` × `need_y` output pixels per source
/// pixel: 1/1 unless both are at most 1/2, else the smallest factor TurboJPEG offers that is
/// still at least both.
JpegScale pick_jpeg_scale(double need_x, double need_y);

/// Decodes a JPEG or PNG held in memory and writes options.height × options.width ×
/// options.channels bytes (HWC) to `out`. `seed` drives random_resized_crop and random_flip.
/// \throws DataError "<name>: <reason>" for bytes that are not a whole, valid JPEG or PNG
/// (TurboJPEG's warnings count as errors) or an image over kMaxImagePixels.
void decode_image(std::span<const std::uint8_t> bytes, const ImageOptions& options,
                  std::uint64_t seed, std::uint8_t* out, std::string_view name);

/// The whole file, in this thread's buffer: valid until this thread's next call.
/// \throws DataError "<name>: cannot open: <why>" (or cannot read).
std::span<const std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                              std::string_view name);

}  // namespace ferry::detail
