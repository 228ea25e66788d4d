#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/dtype.hpp"
#include "ferry/export.hpp"
#include "ferry/remote.hpp"

namespace ferry {

/// How TokenDataset::open() cuts token files into training windows.
struct TokenOptions {
  std::int64_t seq_len = 1024;  ///< T: tokens per window, >= 1
  std::int64_t stride = 0;      ///< tokens between window starts, >= 0; 0: seq_len
  DType dtype = DType::i64;     ///< of "input" and "target": i32 or i64
  /// The token type of files without a header (nanoGPT's .bin): u8, u16, u32, i32 or i64,
  /// little-endian.
  DType raw_dtype = DType::u16;
  /// How files given as URLs are fetched and cached (see RemoteOptions).
  RemoteOptions remote;
};

/// Language-model training windows over files of token ids, memory-mapped: nothing is copied
/// or read through at open, and read() copies one window. Sample i has two fields of
/// TokenOptions::dtype, "input" [T] (tokens s .. s + T - 1 of a file) and "target" [T] (tokens
/// s + 1 .. s + T, the input shifted by one), where T is seq_len and s the window's start.
///
/// Each file is one of (decided by its first bytes, not its name, except that a file named
/// *.npy must be NumPy's):
/// * an llm.c shard: a header of 256 little-endian int32 (magic 20240520 and version 1 for u16
///   tokens, magic 20240801 and version 7 for u32 tokens, as llm.c writes them (version 1 is
///   accepted too); [2] the token count), then exactly that many tokens;
/// * a NumPy .npy file (format 1.0, 2.0 or 3.0) of one dimension, C order, little-endian u8,
///   u16, u32, i32 or i64;
/// * anything else: raw little-endian tokens of TokenOptions::raw_dtype (nanoGPT's train.bin).
///
/// Windows never cross files: a file of n tokens gives (n - T - 1) / stride + 1 windows, none
/// when n < T + 1, whose starts are 0, stride, 2 stride, ... Samples count the files' windows in
/// the order the files were given; shard_starts() gives each file's first window, so that
/// LoaderOptions::shuffle_window reads a few files at a time. The files must not change while
/// the dataset is open.
///
/// A file given as a URL (see RemoteOptions) is not downloaded at open: open() reads its head
/// (the first 4 KiB and the file's size, from one ranged request, or from the cache), and the
/// file itself is fetched into the cache while the epochs run, in the order the loader
/// announces (will_read()), held from its fetch to its last planned read of the epoch (an epoch
/// that reads the files a few at a time, unshuffled or with shuffle_window, keeps the cache
/// within TokenOptions::remote.cache_bytes). Such a file's windows are read with pread from the
/// cached copy, not mapped.
class FERRY_API TokenDataset final : public Dataset {
 public:
  /// Maps the files and reads their headers; of a URL, reads its head only (the file comes
  /// while reading, TokenOptions::remote). Any thread may call it.
  /// \throws DataError "TokenDataset: <url>: cannot download: ..." for a URL whose head cannot be
  /// had (a missing file: its HTTP status); ConfigError for bad RemoteOptions, no files, seq_len <
  /// 1, stride < 0, a dtype other than i32 or i64, a raw_dtype that is no integer type of the list
  /// above, or files none of which is long enough for one window (naming seq_len + 1 and the
  /// longest file's count); DataError naming the file and what is wrong with it: one that cannot be
  /// opened or mapped, an llm.c header cut short or of an unknown version, a negative token count
  /// or one beyond or short of the file's size, a raw file whose size is not a multiple of its
  /// token's, a .npy file whose magic, version, header length or header dict (descr, fortran_order,
  /// shape) is wrong or unsupported (big-endian, not 1-D, not an integer type above), or whose data
  /// is not the size its shape says.
  static std::shared_ptr<TokenDataset> open(std::vector<std::filesystem::path> files,
                                            TokenOptions options = {});
  ~TokenDataset() override;

  std::size_t size() const override { return size_; }
  /// {"input", dtype, {T}}, {"target", dtype, {T}}.
  std::vector<FieldSpec> fields() const override;
  /// Widens window `index`'s T + 1 tokens into "input" and "target". Called from many threads.
  /// \throws DataError naming the file and the token's position when a token does not fit
  /// TokenOptions::dtype (a u32 or i64 token beyond i32, for an i32 output); DataError naming
  /// the URL when its file cannot be fetched (or is not of the size its head said); ConfigError
  /// for an index out of range.
  void read(std::size_t index, SampleRef out) const override;
  /// Of a dataset with URLs: fetches their files ahead in the order of `indices` (see
  /// Dataset::will_read). Does nothing for local files.
  void will_read(std::span<const std::size_t> indices) const noexcept override;
  /// Whether some file is a URL.
  bool wants_read_order() const noexcept override;
  /// Seconds read() waited for files to arrive (see Dataset::network_wait_seconds).
  double network_wait_seconds() const noexcept override;
  /// Each file's first window, then size() (a file without windows shares the next one's).
  std::span<const std::size_t> shard_starts() const noexcept override { return first_window_; }

  /// The options, with stride 0 resolved to seq_len.
  const TokenOptions& options() const noexcept { return options_; }
  /// Tokens in all the files.
  std::uint64_t num_tokens() const noexcept { return num_tokens_; }
  /// Number of files.
  std::size_t num_files() const noexcept;
  /// The files, as given to open().
  const std::vector<std::filesystem::path>& files() const noexcept { return paths_; }
  /// Tokens in file `file`, its token type (u8, u16, u32, i32 or i64) and its windows, in the
  /// order given to open(). \throws ConfigError for a file out of range.
  std::uint64_t file_tokens(std::size_t file) const;
  DType file_dtype(std::size_t file) const;
  std::size_t file_windows(std::size_t file) const;

 private:
  struct File;
  struct Remote;
  TokenDataset() = default;
  const File& file_at(std::size_t file) const;
  // The file holding window `index` (< size_).
  std::size_t file_of(std::size_t index) const noexcept;

  TokenOptions options_;
  std::vector<std::filesystem::path> paths_;
  std::vector<std::unique_ptr<File>> files_;
  std::vector<std::size_t> first_window_;  // per file, and the total at the end
  std::size_t size_ = 0;
  std::uint64_t num_tokens_ = 0;
  std::unique_ptr<Remote> remote_;  // the files given as URLs; null when there are none
};

}  // namespace ferry
