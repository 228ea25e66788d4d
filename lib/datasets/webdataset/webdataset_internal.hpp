#pragma once

// What the pieces of WebDataset share: webdataset.cpp (open: the index, samples, fields),
// webdataset_npy.cpp (the "npy" members' headers) and webdataset_read.cpp (read, length,
// prefetch). Internal to lib/datasets/webdataset.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "datasets/remote/prefetcher.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "datasets/webdataset/tar_sidecar.hpp"
#include "ferry/webdataset.hpp"

namespace ferry {

inline constexpr const char* kWebDatasetWho = "WebDataset";

namespace detail::wds {

/// How a field's members become its bytes.
enum class Kind { image, video, cls, npy, audio, bytes };

/// Where one field of one sample lies in its shard: the bytes read() writes (for "npy", the
/// array's data after its header), and its rows for a ragged field. offset == kMissing: the
/// sample has no member for the field.
struct Loc {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
  std::int64_t rows = 0;
  std::uint64_t member = 0;  ///< the member's header, for messages and prefetch
};
inline constexpr std::uint64_t kMissing = ~std::uint64_t{0};

/// More shards than this are opened for each read() instead of being kept open.
inline constexpr std::size_t kMaxOpenShards = 128;

/// Shard::fetch of a shard that is not fetched while reading.
inline constexpr std::size_t kNotFetched = ~std::size_t{0};

struct Shard {
  std::string name;  ///< the path as given, for messages
  std::string file;  ///< what is opened: the path, or the cached copy of a URL
  bool remote = false;
  /// A URL whose shard is fetched while reading: its number in WebDataset::Impl::prefetcher
  /// (its index came at open); kNotFetched for a local shard or one fetched at open.
  std::size_t fetch = kNotFetched;
  FileLabel label() const { return {kWebDatasetWho, name}; }
  /// Open while open() indexes the shard; kept open after it only when the shard has samples
  /// and there are at most kMaxOpenShards shards (else each read() opens it with OpenFile).
  FileDescriptor fd;
  ShardStamp stamp;  ///< size and mtime when open() opened it; a reopened shard must match
};

/// Reads exactly out.size() bytes at `offset` of `fd`. \throws DataError naming `label`, the
/// byte and `what` when the file is shorter now (it shrank since open) or the read fails.
void pread_exact(int fd, std::span<std::byte> out, std::uint64_t offset, const FileLabel& label,
                 const std::string& what);

/// A ragged audio member's rows (audio_length() of its header), read from `fd`.
std::int64_t audio_member_rows(int fd, const Loc& loc, const AudioOptions& options,
                               const FileLabel& label, const std::string& what);

/// This thread's buffer for encoded images, in bytes (for tests: one over 16 MiB is released
/// after its image, however its read ends).
std::size_t image_buffer_bytes() noexcept;

/// A "npy" member's array: its dtype, shape, and where its data starts in the shard.
struct NpyArray {
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  std::uint64_t data = 0;
};
/// Reads and checks the header of the .npy member at [offset, offset + size) of `fd`.
/// \throws DataError naming the shard, the byte and `what` (the member) for a malformed,
/// unsupported (big-endian, Fortran order, a dtype ferry lacks) header, or data that is not the
/// size the shape says.
NpyArray read_npy_header(int fd, std::uint64_t offset, std::uint64_t size, const FileLabel& label,
                         const std::string& what);

}  // namespace detail::wds

struct WebDataset::Impl {
  WebDatasetOptions options;
  std::vector<std::filesystem::path> paths;
  std::vector<detail::wds::Shard> shards;
  std::vector<detail::remote::CachedFile> cached;  // held while the dataset lives
  /// Fetches the shards whose `fetch` is set, while reading (none: every shard is local).
  std::unique_ptr<detail::remote::Prefetcher> prefetcher;
  std::vector<std::size_t> shard_starts;  // first sample of each shard, then size()
  std::vector<std::string> keys;
  std::vector<FieldSpec> fields;
  std::vector<detail::wds::Kind> kinds;
  std::vector<detail::wds::Loc> locs;  // sample-major: locs[i * fields.size() + f]
  std::vector<std::int64_t> longest;   // per field: the most rows of a sample (0: not ragged)
  /// Per sample and field (as locs), a ragged audio member's rows once asked (-1: not yet).
  std::unique_ptr<std::atomic<std::int64_t>[]> audio_rows;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() = default;

  std::size_t shard_of(std::size_t index) const;
  const detail::wds::Loc& loc(std::size_t index, std::size_t field) const {
    return locs[index * fields.size() + field];
  }
};

namespace detail::wds {

/// What the first sample's "npy" member of a field said, and whether later ones differ in their
/// first dimension.
struct NpyFirst {
  bool set = false;
  DType dtype = DType::u8;
  std::vector<std::int64_t> shape;
  std::string what;  ///< the member, for messages
  bool varies = false;
};

/// Reads the header of a "npy" member at `loc` (named `what`): moves loc to its
/// data and sets its rows; the first sample's sets `first`, later ones must agree with it but
/// for their first dimension. 	hrows DataError naming shard, byte and member otherwise.
void npy_field(Loc& loc, NpyFirst& first, const Shard& shard, const std::string& what);

/// Sets the "npy" fields' specs from what their members said: the first sample's dtype and
/// shape, the first dimension `ragged` when it varied.
void finish_npy_fields(WebDataset::Impl& impl, const std::vector<NpyFirst>& first);

}  // namespace detail::wds
}  // namespace ferry
