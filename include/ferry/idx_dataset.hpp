#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/limits.hpp"
#include "ferry/remote.hpp"

namespace ferry {

/// How IdxDataset::open() reads its files.
struct IdxOptions {
  /// The most bytes a gzipped file may decompress to, and the largest one image may be;
  /// 0: default_decompressed_limit() (half the physical memory). A file's header tells its
  /// size, so one beyond the limit is refused before its data is inflated.
  std::uint64_t max_decompressed_bytes = 0;
  /// How files given as URLs are fetched: once, at open, into the cache (see RemoteOptions).
  RemoteOptions remote;
};

/// MNIST-style IDX files (MNIST, Fashion-MNIST, KMNIST), gzipped or not: an images file of
/// unsigned bytes [N, rows, cols] (magic 0x00000803) and a labels file [N] (magic 0x00000801).
/// Both are read into memory once, as a TensorDataset of "image" u8 [N, rows, cols] and "label"
/// i64 [N]: fields "image" u8 [rows, cols] and "label" i64 []. to(Device::cuda()) puts them on
/// the GPU, where a loader on that GPU gathers its batches.
class FERRY_API IdxDataset final : public Dataset {
 public:
  /// Reads both headers first, then the data. Any thread may call it. Either file may be a URL
  /// (see RemoteOptions): it is fetched into the cache first (IdxOptions::remote), and messages
  /// name the URL.
  /// \throws DataError naming the file and the byte offset for a missing or unreadable file (or
  /// one that is not a regular file), a bad magic number, dimensions whose product overflows or
  /// that do not match the file's size, a gzip stream that is corrupt or decompresses to more
  /// than the header says, data beyond IdxOptions::max_decompressed_bytes (naming the limit), or
  /// counts that differ between the two files.
  static std::shared_ptr<IdxDataset> open(const std::filesystem::path& images,
                                          const std::filesystem::path& labels,
                                          const IdxOptions& options = {});

  std::size_t size() const override { return table_->size(); }
  std::vector<FieldSpec> fields() const override { return table_->fields(); }
  /// Copies a row. \throws ConfigError when the rows are on a GPU (see TensorDataset::read()).
  void read(std::size_t index, SampleRef out) const override { table_->read(index, out); }
  void prefetch(std::size_t index) const noexcept override { table_->prefetch(index); }
  std::span<const Tensor> rows_in_memory() const noexcept override {
    return table_->rows_in_memory();
  }

  /// The same samples on `device`, with the same rows(), cols() and labels(): the tensors'
  /// storage is shared when they are there already, copied otherwise (this one is unchanged).
  /// Blocking. \throws DeviceError when `device` is not usable.
  std::shared_ptr<IdxDataset> to(Device device) const;
  /// Where the samples live.
  Device device() const noexcept { return table_->device(); }

  std::int64_t rows() const noexcept { return rows_; }
  std::int64_t cols() const noexcept { return cols_; }
  /// The labels, as read (0..255); kept in host memory wherever the samples are.
  const std::vector<std::uint8_t>& labels() const noexcept { return *labels_; }
  /// All images, [N, rows, cols] row-major: the "image" tensor's bytes.
  /// \throws ConfigError when they are not in host memory (device() is a GPU).
  const std::vector<std::uint8_t>& pixels() const;

 private:
  IdxDataset() = default;
  std::shared_ptr<const TensorDataset> table_;
  std::shared_ptr<const std::vector<std::uint8_t>> pixels_;  // what table_ views; null off the CPU
  std::shared_ptr<const std::vector<std::uint8_t>> labels_;
  std::int64_t rows_ = 0;
  std::int64_t cols_ = 0;
};

}  // namespace ferry
