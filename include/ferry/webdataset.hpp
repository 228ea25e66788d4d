#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/audio.hpp"
#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/image.hpp"
#include "ferry/remote.hpp"
#include "ferry/video.hpp"

namespace ferry {

/// How WebDataset::open() reads its shards.
struct WebDatasetOptions {
  /// How "jpg", "jpeg" and "png" members decode: exactly as ImageFolder decodes its files.
  ImageOptions image;
  /// How "mp4", "mkv", "webm" and "avi" members decode: a clip, exactly as VideoFolder decodes
  /// its files (decode_video(), from memory; clips_per_video and index_files do not apply: a
  /// sample is one clip, and a member is indexed each time it is read).
  VideoOptions video;
  /// Keep each shard's index beside it, as "<shard>.idx" (the shard's size and modification
  /// time, its members), and reuse it while the shard is unchanged. A stale or corrupt index is
  /// rebuilt; where the folder cannot be written the index is built in memory only, silently.
  /// false: always build in memory, write nothing.
  bool index_files = true;
  /// How shards given as URLs are fetched and cached (see RemoteOptions).
  RemoteOptions remote;
  /// How "wav", "flac", "ogg", "opus" and "mp3" members decode: exactly as AudioFolder decodes
  /// its files (the same field, clip and seed). sample_rate and channels must be given here (0,
  /// "the first file's", is a ConfigError for shards).
  AudioOptions audio;
};

/// WebDataset shards: plain (uncompressed) tar files, written by any tar tool, read by random
/// access. At open, each shard's tar headers are indexed (ustar, GNU long names, PAX headers;
/// only headers are read); a sample is the members sharing a key, the member's path up to the
/// first dot of its file name ("train/0001.jpg" and "train/0001.cls" make sample
/// "train/0001"), and the part after that dot is the member's extension. Members whose file
/// name has no dot, folders, links and other non-files are ignored. Samples count the shards'
/// samples in the order the shards were given, each shard's in the order of its members.
///
/// One field per extension of the first sample, sorted by name:
/// * "jpg", "jpeg", "png" (any case): u8 [H, W, C], decoded as ImageFolder decodes (same
///   ImageOptions, same geometry and seed, normalize on the loader's device);
/// * "mp4", "mkv", "webm", "avi" (any case): u8 [T, H, W, 3], a clip decoded as VideoFolder
///   decodes (WebDatasetOptions::video, the sample's seed);
/// * "cls": i64 [], the member's text: an optional '-' and decimal digits, written as
///   std::to_string writes them (no '+', no leading zero: "7", "-3"; not "+7", "07", "-0",
///   "7.0"), within i64, with ASCII white space around it allowed ("7\n");
/// * "wav", "flac", "ogg", "opus", "mp3": f32 audio as AudioFolder's (see audio_field(); ragged
///   without a clip, its length from the member's header, read once when first asked);
/// * "npy": a NumPy array (little-endian u1, u2, u4, i4, i8, f2, f4 or f8, C order) of its dtype
///   and shape; the first dimension is `ragged` when it differs between samples (the others
///   must agree);
/// * anything else: ragged u8, the member's bytes.
/// Extensions that only later samples have are ignored.
///
/// Compressed shards (.tar.gz, .tar.bz2, .tar.xz, .tar.zst) are refused with DataError: store
/// them plain, since random access needs the uncompressed tar.
class FERRY_API WebDataset final : public Dataset {
 public:
  /// Indexes the shards. A shard may be a URL (see RemoteOptions): its index "<url>.idx" is
  /// fetched at open (with index_files), and the shard itself while the epochs run
  /// (WebDatasetOptions::remote, at most `connections` at once, in the order will_read() gives;
  /// read() waits for its shard when it is not here yet). A shard whose server has no index,
  /// or that has "npy" members, is fetched at open and indexed here (the index kept beside it in
  /// the cache). Messages name the URL. Any thread may call it.
  /// \throws ConfigError for no shards, bad ImageOptions (see ImageFolder::open) or bad
  /// RemoteOptions; DataError "WebDataset: <url>: cannot download: ..." for a URL that cannot
  /// be fetched;
  /// DataError naming the shard, and the byte where one applies, for a shard that cannot be
  /// opened, is compressed, is not a tar file (a header whose checksum does not match), is cut
  /// short (in a header, in a member's data, or without the end-of-archive blocks), has a member
  /// whose size is malformed or runs past the end of the file, a PAX or GNU long-name record that
  /// is malformed or over 1 MiB, a key whose field appears twice or whose members are not next
  /// to each other (a duplicate key); for shards without any sample; for a "npy" member whose
  /// header is malformed, unsupported, or whose dtype or trailing dimensions differ from the
  /// first sample's (naming shard and key).
  static std::shared_ptr<WebDataset> open(std::vector<std::filesystem::path> shards,
                                          WebDatasetOptions options = {});
  ~WebDataset() override;

  std::size_t size() const override;
  std::vector<FieldSpec> fields() const override;
  /// Reads sample `index`: raw fields are read straight into `out`, images read into this
  /// thread's buffer and decoded. Called from many threads.
  /// \throws DataError naming shard and key for a sample lacking a field, a "cls" that is not a
  /// decimal integer, an image that does not decode, or a shard that shrank or vanished since
  /// open (past 128 shards, where each read opens its shard again: one that is no longer a
  /// regular file, a FIFO say, or whose size or modification time changed); never blocks on a
  /// special file; for a shard fetched while reading that cannot be had, "WebDataset: <url>:
  /// cannot download: ..." (for each of its samples, without another transfer, until the next
  /// will_read()). ConfigError for an index out of range.
  void read(std::size_t index, SampleRef out) const override;
  /// Rows of a ragged field: an "npy" member's first dimension, another member's byte count
  /// (0 for a sample lacking the field, whose read() raises DataError).
  std::int64_t length(std::size_t index, std::size_t field) const override;
  /// The longest sample's rows in a ragged field, from the index read at open (no shard is
  /// read for it). ConfigError for a field that is not ragged.
  std::int64_t max_length(std::size_t field) const override;
  /// Asks the kernel to start reading sample `index`'s members (posix_fadvise WILLNEED).
  void prefetch(std::size_t index) const noexcept override;
  /// Orders the fetching of the shards still to come from the server by the first read of each
  /// among `indices`, and lets each go from its hold (the cache may then evict it) after its
  /// last read there. Nothing for a dataset of local shards.
  void will_read(std::span<const std::size_t> indices) const noexcept override;
  /// True when some shards are fetched while reading.
  bool wants_read_order() const noexcept override;
  /// Seconds read() waited for shards still being fetched.
  double network_wait_seconds() const noexcept override;

  /// Sample i's key, "<path up to the first dot>". \throws ConfigError for i >= size().
  const std::string& key(std::size_t i) const;
  /// The shard (index into shards()) holding sample i. \throws ConfigError for i >= size().
  std::size_t shard_of(std::size_t i) const;
  /// The shards, as given to open().
  const std::vector<std::filesystem::path>& shards() const noexcept;
  /// The first sample of each shard, and size() at the end (shards().size() + 1 entries): what
  /// LoaderOptions::shuffle_window orders an epoch by.
  std::span<const std::size_t> shard_starts() const noexcept override;
  const WebDatasetOptions& options() const noexcept;

  struct FERRY_HIDDEN Impl;  // lib/datasets/webdataset/webdataset_internal.hpp

 private:
  WebDataset() = default;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry
