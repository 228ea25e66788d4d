#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/image.hpp"

namespace ferry {

/// Photos in class folders: root/<class>/<file>, classes sorted by name, files with extensions
/// .jpg, .jpeg or .png in any case (others are ignored). Fields: "image" u8 [H, W, C] (see
/// ImageOptions::normalize) and "label" i64 []. Each read() is decode_image_file() of the sample's
/// file with the sample's seed (see image.hpp, for a dataset of one's own that decodes photos).
class FERRY_API ImageFolder final : public Dataset {
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
  std::size_t max_file_bytes_ = 0;  // the largest file read, from options_
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
};

}  // namespace ferry
