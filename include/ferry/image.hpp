#pragma once

/// \file Photos to samples: what ImageFolder does to each file, for any dataset. A dataset of
/// one's own (photos listed in a file, held in an archive, fetched from a store) declares
/// image_field() among its fields and, in read(), calls decode_image() (or decode_image_file())
/// with SampleRef::seed(): its samples are then exactly ImageFolder's for the same bytes.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/ops.hpp"

namespace ferry {

/// How a decoded image becomes height × width.
enum class Geometry {
  /// The shorter side to `resize` (aspect kept), then the central height × width: torchvision's
  /// Resize(resize) + CenterCrop((height, width)).
  resize_then_center_crop,
  /// A random area of 8%–100% of the image with aspect 3/4–4/3 (up to 10 tries, then the central
  /// crop), resized to height × width: torchvision's RandomResizedCrop. Random from the sample
  /// seed.
  random_resized_crop,
  /// Straight to height × width, aspect not kept.
  resize,
};

/// How a photo becomes a sample (ImageFolder, decode_image()).
struct ImageOptions {
  int height = 224, width = 224, channels = 3;  ///< channels 1 (gray), 3 (RGB) or 4 (RGBA)
  Geometry geometry = Geometry::resize_then_center_crop;
  /// resize_then_center_crop: the shorter side before the crop, up to 2^20; 0: max(height,
  /// width) × 8 / 7 (256 for 224, as the ImageNet recipe). The other geometries take only 0.
  int resize = 0;
  bool random_flip = false;  ///< mirror left-right with probability 1/2 (from the sample seed)
  /// Per-channel mean/std: "image" is then delivered as normalize->dtype [C, H, W], converted on
  /// the loader's device after the copy (uint8 crosses the bus). Without it: u8 [H, W, C].
  std::optional<Normalize> normalize;
  /// The largest image handled, in pixels: a file whose header claims more (width × height)
  /// raises DataError naming the file and its size before anything is allocated for it, and
  /// height × width must fit too (ConfigError). A decode holds up to 4 bytes a source pixel
  /// (plus, for a progressive JPEG, libjpeg's 2 bytes a pixel and component), and a file larger
  /// than 8 bytes a pixel plus 64 MiB is refused unread. 1 to 2^28; default 2^26 (8192 × 8192,
  /// more than any camera's photo).
  std::int64_t max_pixels = std::int64_t{1} << 26;
  /// The most scans a JPEG may have. A progressive JPEG is decoded scan by scan, each a pass over
  /// the whole image; real ones have about 10, and a forged one with thousands would take
  /// minutes. More raise DataError naming the file and the count (counted from the markers,
  /// before decoding). At least 1; default 256.
  int max_jpeg_scans = 256;
};

/// The shape an image is written in under `options`: {height, width, channels} (u8, HWC).
/// Any thread may call it.
/// \throws ConfigError naming the member for options decoding refuses (see ImageOptions: a size
/// below 1, channels not 1, 3 or 4, resize set for a geometry that does not use it, limits out of
/// range, a normalize that does not fit the channels).
FERRY_API std::vector<std::int64_t> image_shape(const ImageOptions& options);

/// The field a dataset declares for images decoded under `options`, as ImageFolder's "image":
/// `name`, u8 image_shape(options), and options.normalize (so the loader converts the field on
/// its device). \throws ConfigError as image_shape() does.
FERRY_API FieldSpec image_field(const ImageOptions& options, std::string name = "image");

/// Decodes one JPEG or PNG held in memory (the format from its first bytes), fits it to
/// height × width by options.geometry, and writes it as u8 [height, width, channels] into `out`.
/// `seed` draws random_resized_crop's area and random_flip: pass SampleRef::seed() and the result
/// is byte for byte ImageFolder's for the same bytes and sample. JPEG is decoded by libjpeg-turbo,
/// only the rows and columns the output needs (and scaled in the DCT domain by 1/2, 1/4 or 1/8
/// when the output needs at most that), PNG by libspng; the resize is PIL's antialiased
/// bilinear in fixed point. Any thread may call it (each thread keeps its own decoder and
/// scratch memory).
/// \throws ConfigError for options image_shape() refuses, or an `out` whose size is not
/// height × width × channels bytes; DataError "<name>: <reason>" for bytes that are not a
/// whole, valid JPEG or PNG (a JPEG without its end-of-image marker is "truncated", whichever
/// rows the output reads), an image over options.max_pixels, a JPEG of more scans than
/// options.max_jpeg_scans, or one whose resize would need unreasonable memory.
FERRY_API void decode_image(std::span<const std::byte> encoded, const ImageOptions& options,
                            std::uint64_t seed, std::span<std::uint8_t> out, std::string_view name);

/// decode_image() of a file's bytes, read with one open and one read. A file larger than an
/// image within options.max_pixels can take (8 bytes a pixel, plus 64 MiB of PNG chunks) is
/// refused unread. `name` starts the messages; empty: the file's path.
/// \throws as decode_image() does, and DataError "<name>: cannot open: <why>" (or "cannot read:
/// ...", for a folder, a FIFO or a failed read) or "<name>: file of <n> bytes, more than ...".
FERRY_API void decode_image_file(const std::filesystem::path& file, const ImageOptions& options,
                                 std::uint64_t seed, std::span<std::uint8_t> out,
                                 std::string_view name = {});

}  // namespace ferry
