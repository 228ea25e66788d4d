#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ferry/dataset.hpp"
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

/// Photos in class folders: root/<class>/<file>, classes sorted by name, files with extensions
/// .jpg, .jpeg or .png in any case (others are ignored). Fields: "image" u8 [H, W, C] (see
/// ImageOptions::normalize) and "label" i64 []. JPEG is decoded by libjpeg-turbo (scaled in the
/// DCT domain when the target is at most half the source), PNG by libspng.
class ImageFolder final : public Dataset {
 public:
  /// Lists the folder (no image is opened yet). \throws DataError when root is missing, not a
  /// folder, or holds no images; ConfigError naming the member for bad options (see
  /// ImageOptions: a size below 1, channels not 1, 3 or 4, resize set for a geometry that does
  /// not use it, limits out of range, a normalize that does not fit the channels).
  static std::shared_ptr<ImageFolder> open(const std::filesystem::path& root,
                                           const ImageOptions& options = {});

  std::size_t size() const override { return files_.size(); }
  std::vector<FieldSpec> fields() const override;
  /// Decodes, resizes and crops one image. \throws DataError naming the file for a corrupt,
  /// truncated, empty or non-image file, one that vanished after listing, or one over
  /// ImageOptions' limits; ConfigError for an index >= size().
  void read(std::size_t index, SampleRef out) const override;

  /// Class names, sorted; label i is classes()[i].
  const std::vector<std::string>& classes() const noexcept { return classes_; }
  /// Images per class.
  std::vector<std::size_t> class_counts() const;
  /// Sample i's file and label. \throws ConfigError for i >= size().
  const std::filesystem::path& path(std::size_t i) const;
  std::int64_t label(std::size_t i) const;
  const ImageOptions& options() const noexcept { return options_; }

 private:
  ImageFolder() = default;
  ImageOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
};

}  // namespace ferry
