#pragma once

// A file given as a URL read by ranges into memory, never whole and never through the cache:
// what a reader of a format with an index (a Parquet footer) asks of a large remote file. Its
// size and ETag come with the first answer (tail()); each read() is one ranged GET ("Range:
// bytes=<first>-<last>"), retried as the downloads are, and checked against them: an answer
// larger than asked is refused, a server that ignores Range (HTTP 200, the whole file) is read
// up to the bytes asked and cut there (only those are kept; a whole file sent without a length,
// in chunks, is read to its end for tail(), which learns its size so, up to cache_bytes, past
// which it is a DataError), and a file whose size or ETag changed between two ranges is a
// DataError naming the URL. s3:// requests are signed as the downloads' are; file:// URLs are
// read with pread from a descriptor opened once.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/remote.hpp"

namespace ferry::detail::remote {

class RangeReader {
 public:
  /// `url`: http://, https://, s3:// or file://. Nothing is read yet.
  /// \throws ConfigError for options check_options() refuses.
  RangeReader(std::string url, const RemoteOptions& options, std::string_view who);
  RangeReader(const RangeReader&) = delete;
  RangeReader& operator=(const RangeReader&) = delete;
  ~RangeReader();

  /// The file's last min(bytes, size) bytes, in one request (a suffix range): its size and
  /// ETag are learnt from the answer. Called once, first.
  /// \throws DataError naming the URL: cannot be read (after the retries), not a regular file.
  std::vector<std::byte> tail(std::uint64_t bytes);
  /// The file's size, as tail() learnt it.
  std::uint64_t size() const noexcept;
  /// `length` bytes from `offset`, which lie within size(). Safe from several threads at once
  /// (each takes a connection of its own, kept for the next read).
  /// \throws DataError naming the URL and the bytes: cannot be read (after the retries), the
  /// range lies outside the file, the file changed since tail() (its size or ETag).
  std::vector<std::byte> read(std::uint64_t offset, std::uint64_t length);

  /// Stops the transfers under way and refuses every later one (a DataError, "cancelled"):
  /// for whoever owns a thread that reads, before it joins it.
  void cancel() noexcept;

  const std::string& url() const noexcept;
  /// Bytes of answers' bodies received, and requests answered, since construction (all
  /// threads; file:// reads counted alike).
  std::uint64_t bytes_received() const noexcept;
  std::uint64_t requests() const noexcept;
  /// Seconds spent waiting for the server's answers, summed over the threads (file://: 0).
  double wait_seconds() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::detail::remote
