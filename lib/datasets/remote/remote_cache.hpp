#pragma once

// Files given as URLs: downloaded into a local cache shared by processes (whole, or in parts
// that several threads fetch at once), then read as local files. Written once here; the datasets
// call fetch_files() at open and keep the CachedFiles for as long as they read them, or read only a
// file's head at open (read_head()) and fetch the file while reading (Prefetcher, through a
// Fetcher).
//
// The cache folder (RemoteOptions::cache_dir, else $FERRY_CACHE_DIR, else ~/.cache/ferry):
// * "<16 hex of the URL's FNV-1a>-<the URL's last segment>": a downloaded file, complete (it
//   was written through AtomicFileWriter and renamed only once its size matched the server's
//   Content-Length, or every part of it came); "<that>.meta" records the URL, the size and the
//   server's ETag;
//   "<that>.idx" is a WebDataset shard's index (fetched from the server or built here);
// * ".<entry>.lock": held (flock LOCK_EX) by whoever downloads the entry; others wait on it,
//   then find the file there. Lock files stay (empty files).
// * ".<entry>.<16 random hex>.tmp": a download under way (AtomicFileWriter).
// The cache's own files (locks, temporaries) start with '.', entries never do: exactly the names
// of the entry form ("<16 hex>-...") count against cache_bytes, whatever the URL's suffix.
// A file being read is held with flock(LOCK_SH) on a descriptor of it (CachedFile). Before a
// download of a known size (making room for it) and after a fetch, the entries whose files pass
// cache_bytes go, least recently used first (each use
// sets the file's access time), an entry only when flock(LOCK_EX | LOCK_NB) on its file
// succeeds: never one that a dataset, in this process or another, has open. A reader that
// finds its file unlinked under it (evicted between its open and its lock) downloads again.
//
// Transfers: libcurl, one easy handle per transfer thread, at most RemoteOptions::connections
// threads per fetch_files() call; file:// URLs are read as local files are (OpenFile: once,
// without blocking, regular files only), not through curl. A transfer that receives nothing for
// RemoteOptions::timeout_seconds stops (inf: never). Timeouts, broken connections, HTTP
// 408/429/500/502/503/504 and short bodies are retried (RemoteOptions::retries times) after an
// exponential backoff with jitter; a transfer broken mid-file resumes with a Range request
// (If-Range: the ETag, so a file changed meanwhile comes whole). Other HTTP errors (403, 404, ...)
// fail at once.
//
// Parts: a Fetcher given a PartBoard fetches a file of a known size over
// RemoteOptions::part_bytes (http, https, s3) in parts, each one ranged GET ("Range:
// bytes=<a>-<b>") written at its offset (pwrite) into the one temporary file, and posts the
// download on the board, where other Fetchers of the board take its parts (help()). Every part's
// response must be a 206 of that range, of the same total, with the ETag of the first response
// (If-Match: it, where it is strong); a part broken mid-body resumes from where it stopped with
// the retries above; the file is renamed into place only once every part is complete. A change
// on the server mid-download (another ETag, 412) starts the download over (at most
// RemoteOptions::retries times); a failure of a part stops the others and is the download's. A
// server that answers a ranged GET with the whole file (200) has it written whole by that
// transfer, and no part is taken after.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "ferry/remote.hpp"

namespace ferry::detail::remote {

/// Whether `name` is a URL that fetch_files() takes: http://, https://, file:// or s3://.
bool is_url(std::string_view name) noexcept;

/// The cache folder the options name (created if missing). \throws DataError when it cannot be.
std::filesystem::path cache_dir(const RemoteOptions& options);

/// `url` with `suffix` at the end of its path, before a query or fragment: "<shard>.idx" of a
/// presigned "https://h/s.tar?X-Amz-Signature=..." is "https://h/s.tar.idx?X-Amz-Signature=...".
std::string url_with_suffix(std::string_view url, std::string_view suffix);

/// Where `url`'s file lives in `dir`.
std::filesystem::path entry_path(const std::filesystem::path& dir, std::string_view url);

/// \throws ConfigError (naming `who` and the option) for connections < 1, retries < 0,
/// timeout_seconds <= 0 or NaN (inf, or anything huge, is taken: no timeout).
void check_options(const RemoteOptions& options, std::string_view who);

/// A complete file of the cache, held for reading: a shared flock on it while this lives, so
/// that no process evicts it.
class CachedFile {
 public:
  CachedFile(std::filesystem::path path, FileDescriptor held) noexcept
      : path_(std::move(path)), held_(std::move(held)) {}
  const std::filesystem::path& path() const noexcept { return path_; }
  /// The descriptor held (open for reading): read the file through it.
  int fd() const noexcept { return held_.get(); }

 private:
  std::filesystem::path path_;
  FileDescriptor held_;
};

/// One file to fetch.
struct Request {
  std::string url;
  /// Where it goes; empty: entry_path(cache, url).
  std::filesystem::path target;
  /// A 404 or 410, or a 401 or 403 (S3 forbids a missing key to a caller that may not list the
  /// bucket), or for file:// a missing file, gives no file instead of an error.
  bool optional = false;
  /// The file's size when known beforehand (0: not known): the cache makes room for it before
  /// the download starts, so that files no longer held leave at once, not one download later;
  /// and an answer larger than it (its Content-Length, or the bytes that come) stops the
  /// download at once (a DataError naming the URL and both sizes). A download of unknown size is
  /// bounded by the cache's room (cache_bound()) alike.
  std::uint64_t expected_bytes = 0;
};

/// Fetches each request's file into the cache, or finds it there, at most
/// options.connections at once; the results in the requests' order (nothing for an optional
/// file that the server does not have).
/// \throws DataError "<who>: <url>: cannot download: ..." naming the HTTP status and curl's
/// text, after the retries where the failure is worth retrying (the first failure is thrown
/// once every transfer has ended); DataError when the cache cannot be written.
std::vector<std::optional<CachedFile>> fetch_files(const std::vector<Request>& requests,
                                                   const RemoteOptions& options,
                                                   std::string_view who);

/// A file a dataset reads whole at open: a URL's copy in the cache (held while this lives), or
/// the path itself when `name` is not a URL.
struct LocalFile {
  std::filesystem::path path;
  std::optional<CachedFile> held;
};
/// \throws DataError as fetch_files() for a URL that cannot be fetched.
LocalFile local_file(const std::filesystem::path& name, const RemoteOptions& options,
                     std::string_view who);

/// What a dataset that fetches a file only when it reads it needs at open: the file's size
/// and its first bytes (a header).
struct Head {
  std::uint64_t size = 0;        ///< the whole file's
  std::vector<std::byte> bytes;  ///< its first min(size, asked) bytes
};

/// `url`'s size and first `bytes` bytes, without downloading the file: from the cache when the
/// file is there (used as it is, and counted as a use), else one ranged GET ("Range:
/// bytes=0-<bytes - 1>"; the size from its Content-Range, or from the Content-Length of a
/// server that answers with the whole file, of which only `bytes` are read). Retried as
/// downloads are. Nothing is written to the cache.
/// 	hrows DataError "<who>: <url>: cannot download: ..." as fetch_files(), or when the server
/// tells no size.
Head read_head(const std::string& url, std::uint64_t bytes, const RemoteOptions& options,
               std::string_view who);

/// read_head() of each URL, at most options.connections at once; the results in the URLs'
/// order. 	hrows the first failure once every request has ended; ConfigError for bad options.
std::vector<Head> read_heads(const std::vector<std::string>& urls, std::uint64_t bytes,
                             const RemoteOptions& options, std::string_view who);

/// The downloads in parts under way of a set of Fetchers (one Prefetcher's), keyed by URL, whose
/// parts not yet taken any of them may take. Thread-safe.
class PartBoard {
 public:
  /// `posted` is called when a download in parts starts (on its thread, no lock of the board
  /// held): a thread waiting for work may take its parts.
  explicit PartBoard(std::function<void()> posted);
  ~PartBoard();
  PartBoard(const PartBoard&) = delete;
  PartBoard& operator=(const PartBoard&) = delete;
  /// What `url`'s download offers: `part`, a part that no one has taken yet; `soon`, nothing
  /// yet, but a Fetcher is about to post its download in parts (announce()); `none`.
  enum class Offer { none, soon, part };
  Offer offer(const std::string& url) const;
  /// `url` is about to be fetched in parts: offer() says `soon` until its download is posted, or
  /// its Fetcher finds it in the cache, waits for another process that downloads it, or ends.
  void announce(const std::string& url);

  struct Impl;
  Impl& impl() const noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// One transfer thread's fetcher: fetches one request at a time as fetch_files() does, keeping
/// its curl handle (and so its connections) between files. `cancel`, when set, makes a transfer
/// under way stop (a DataError "cancelled"). With a `board` (that outlives it), a file of a known
/// size over RemoteOptions::part_bytes comes in parts that the board's other Fetchers may take.
/// Not for several threads at once.
class Fetcher {
 public:
  Fetcher(const RemoteOptions& options, std::string who, const std::atomic<bool>* cancel,
          PartBoard* board = nullptr);
  ~Fetcher();
  Fetcher(const Fetcher&) = delete;
  Fetcher& operator=(const Fetcher&) = delete;
  /// The file in the cache, held; nothing for an optional one that the server does not have.
  /// Evicts after a download. \throws DataError as fetch_files(); a download in parts throws
  /// the first failure of any of its parts, once none is under way.
  std::optional<CachedFile> fetch(const Request& request);
  /// Takes one part not yet taken of `url`'s download in parts on the board, and fetches it
  /// (its failure is the download's: nothing is thrown here). False when there was none.
  bool help(const std::string& url);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The cache's bound in bytes (RemoteOptions::cache_bytes, 0: 50 GiB).
std::uint64_t cache_bound(const RemoteOptions& options) noexcept;

/// Removes least recently used entries of `dir` until its files hold at most `bound` bytes,
/// skipping those in use, and temporary files of downloads unchanged for a day (left by a
/// process that died). Returns the bytes the folder's files then hold.
std::uint64_t evict(const std::filesystem::path& dir, std::uint64_t bound) noexcept;

/// Bytes held by the entries of `dir` (the names of the entry form: locks and temporaries aside).
std::uint64_t cache_size(const std::filesystem::path& dir) noexcept;

}  // namespace ferry::detail::remote
