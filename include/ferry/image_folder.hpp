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
  /// resize_then_center_crop: the shorter side before the crop; 0: max(height, width) × 8 / 7
  /// (256 for 224, as the ImageNet recipe).
  int resize = 0;
  bool random_flip = false;  ///< mirror left-right with probability 1/2 (from the sample seed)
  /// Per-channel mean/std: "image" is then delivered as normalize->dtype [C, H, W], converted on
  /// the loader's device after the copy (uint8 crosses the bus). Without it: u8 [H, W, C].
  std::optional<Normalize> normalize;
};

/// Photos in class folders: root/<class>/<file>, classes sorted by name, files with extensions
/// .jpg, .jpeg or .png in any case (others are ignored). Fields: "image" u8 [H, W, C] (see
/// ImageOptions::normalize) and "label" i64 []. JPEG is decoded by libjpeg-turbo (scaled in the
/// DCT domain when the target is at most half the source), PNG by libspng.
class ImageFolder final : public Dataset {
 public:
  /// Lists the folder (no image is opened yet). \throws DataError when root is missing, not a
  /// folder, or holds no images; ConfigError for bad options.
  static std::shared_ptr<ImageFolder> open(const std::filesystem::path& root,
                                           const ImageOptions& options = {});

  std::size_t size() const override { return files_.size(); }
  std::vector<FieldSpec> fields() const override;
  /// Decodes, resizes and crops one image. \throws DataError naming the file for a corrupt,
  /// truncated, empty or non-image file, or one that vanished after listing.
  void read(std::size_t index, SampleRef out) const override;

  /// Class names, sorted; label i is classes()[i].
  const std::vector<std::string>& classes() const noexcept { return classes_; }
  /// Images per class.
  std::vector<std::size_t> class_counts() const;
  /// Sample i's file and label.
  const std::filesystem::path& path(std::size_t i) const { return files_.at(i); }
  std::int64_t label(std::size_t i) const { return labels_.at(i); }
  const ImageOptions& options() const noexcept { return options_; }

 private:
  ImageFolder() = default;
  ImageOptions options_;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
};

}  // namespace ferry
