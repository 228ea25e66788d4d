#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/limits.hpp"

namespace ferry {

/// How IdxDataset::open() reads its files.
struct IdxOptions {
  /// The most bytes a gzipped file may decompress to, and the largest one image may be;
  /// 0: default_decompressed_limit() (half the physical memory). A file's header tells its
  /// size, so one beyond the limit is refused before its data is inflated.
  std::uint64_t max_decompressed_bytes = 0;
};

/// MNIST-style IDX files (MNIST, Fashion-MNIST, KMNIST), gzipped or not: an images file of
/// unsigned bytes [N, rows, cols] (magic 0x00000803) and a labels file [N] (magic 0x00000801).
/// Both are read into memory once. Fields: "image" u8 [rows, cols] and "label" i64 [].
class IdxDataset final : public Dataset {
 public:
  /// Reads both headers first, then the data. Any thread may call it.
  /// \throws DataError naming the file and the byte offset for a missing or unreadable file, a
  /// bad magic number, dimensions whose product overflows or that do not match the file's size,
  /// a gzip stream that is corrupt or decompresses to more than the header says, data beyond
  /// IdxOptions::max_decompressed_bytes (naming the limit), or counts that differ between the
  /// two files.
  static std::shared_ptr<IdxDataset> open(const std::filesystem::path& images,
                                          const std::filesystem::path& labels,
                                          const IdxOptions& options = {});

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
