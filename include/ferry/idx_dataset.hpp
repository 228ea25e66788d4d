#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "ferry/dataset.hpp"

namespace ferry {

/// MNIST-style IDX files (MNIST, Fashion-MNIST, KMNIST), gzipped or not: an images file of
/// unsigned bytes [N, rows, cols] (magic 0x00000803) and a labels file [N] (magic 0x00000801).
/// Both are read into memory once. Fields: "image" u8 [rows, cols] and "label" i64 [].
class IdxDataset final : public Dataset {
 public:
  /// \throws DataError naming the file and the byte offset for a missing or unreadable file, a
  /// bad magic number, dimensions that do not match the file's size, or counts that differ
  /// between the two files.
  static std::shared_ptr<IdxDataset> open(const std::filesystem::path& images,
                                          const std::filesystem::path& labels);

  std::size_t size() const override { return count_; }
  std::vector<FieldSpec> fields() const override;
  void read(std::size_t index, SampleRef out) const override;
  void prefetch(std::size_t index) const noexcept override;

  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  /// The labels, as read (0..255).
  const std::vector<std::uint8_t>& labels() const noexcept { return labels_; }
  /// All images, [N, rows, cols] row-major.
  const std::vector<std::uint8_t>& pixels() const noexcept { return pixels_; }

 private:
  IdxDataset() = default;
  std::vector<std::uint8_t> pixels_;
  std::vector<std::uint8_t> labels_;
  std::size_t count_ = 0;
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
};

}  // namespace ferry
