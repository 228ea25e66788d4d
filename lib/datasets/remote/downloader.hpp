#pragma once

// One transfer thread's libcurl handle, reused for its files (connections stay open): a whole
// file's download with its retries and resumes (downloader.cpp), a file's head (read_head()),
// and the parts of a download in parts (part_download.cpp).

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/remote/curl_transfer.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "datasets/remote/s3_request.hpp"

namespace ferry::detail::remote {

struct PartDownload;

/// One ranged GET's answer, in memory (Downloader::get_range()).
struct RangeAnswer {
  std::vector<std::byte> bytes;
  std::uint64_t size = 0;  ///< the whole file's, as the answer tells it
  /// False for a whole file sent without its length (chunked) and cut at the bytes asked: its
  /// size is not known then.
  bool size_known = true;
  std::string etag;  ///< the answer's; empty: none
};

/// A RemoteOptions::timeout_seconds of this many or more is no timeout (inf: never).
inline constexpr double kNeverSeconds = 1e9;

class Downloader {
 public:
  Downloader(const RemoteOptions& options, std::string_view who,
             const std::atomic<bool>* cancel = nullptr);
  // Its handle's callbacks point at it: it stays where it was made.
  Downloader(const Downloader&) = delete;
  Downloader& operator=(const Downloader&) = delete;

  /// Downloads `url` to `target`: true once the file is there, false for an optional file that
  /// the server does not have. With a `board`, a file of a known `size` over part_bytes comes in
  /// parts that the board's other downloaders may take.
  bool download(const std::string& url, const std::filesystem::path& target, bool optional,
                std::uint64_t size = 0, PartBoard* board = nullptr);
  /// Fetches one part not yet taken of `d`; false when there was none.
  bool help(PartDownload& d);
  /// `url`'s size and first `bytes` bytes (read_head()).
  Head head(const std::string& url, std::uint64_t bytes);
  /// `length` bytes of `url` (http, https, s3) from byte `first`, or (from_end) its last
  /// `length` bytes, in memory, retried (range_reader.cpp). An answer larger than asked is
  /// refused (not retried); a server's whole file (HTTP 200) is read up to the bytes asked.
  RangeAnswer get_range(const std::string& url, std::uint64_t first, std::uint64_t length,
                        bool from_end);

 private:
  // The options every transfer of `url` takes (the callbacks aside).
  void configure(CURL* c, const std::string& url, const S3Target& s3t, char* errbuf,
                 Slist& headers);
  // The download in parts of `url` (part_download.cpp).
  void download_parts(const std::string& url, const std::filesystem::path& target,
                      std::uint64_t size, PartBoard::Impl& board);
  // Fetches part `k` of `d` (part_download.cpp).
  bool fetch_part(PartDownload& d, std::size_t k);
  [[noreturn]] void fail(const Transfer& t, const std::string& why);
  bool cancelled() const noexcept { return cancel_ != nullptr && cancel_->load(); }
  // Cancelled, or the download in parts whose part this thread fetches stopped.
  bool stopping() const noexcept {
    return cancelled() || (part_stop_ != nullptr && part_stop_->load()) ||
           (loader_stop_ != nullptr && loader_stop_->load());
  }
  // CURLOPT_XFERINFOFUNCTION: stops a transfer that is cancelled, or that received nothing for
  // timeout_seconds.
  static int on_progress(void* user, curl_off_t, curl_off_t received, curl_off_t, curl_off_t);
  // CURLOPT_OPENSOCKETFUNCTION and CLOSESOCKETFUNCTION: the sockets of the handle's connections
  // are kept in sockets_, so that on_progress counts the bytes they received, headers included
  // (curl's own count is the body's alone).
  static curl_socket_t on_open_socket(void* user, curlsocktype purpose, curl_sockaddr* address);
  static int on_close_socket(void* user, curl_socket_t socket);
  // The bytes sockets_ received, as the kernel counts them (TCP_INFO); 0 where it cannot tell.
  std::uint64_t socket_bytes() const noexcept;
  // What a failed curl_easy_perform() says, for a DataError.
  std::string failure_text(CURLcode rc, long status, const char* errbuf) const;
  void backoff(int attempt);
  static void write_meta(const std::string& url, const std::filesystem::path& target,
                         std::uint64_t size, const std::string& etag);

  const RemoteOptions& options_;
  std::string_view who_;
  const std::atomic<bool>* cancel_;
  const std::atomic<bool>* part_stop_ = nullptr;  // the stop of the download whose part is ours
  // get_range()'s: the stop of the loader whose read asked for the range (core/read_stop.hpp).
  const std::atomic<bool>* loader_stop_ = nullptr;
  std::vector<curl_socket_t> sockets_;  // before curl_: its cleanup closes them through this
  Curl curl_;
  std::mt19937_64 rng_;
  // The transfer under way: when it last received a byte, how many it had then (of the body,
  // and on the sockets), and whether on_progress stopped it for no progress.
  std::chrono::steady_clock::time_point last_progress_;
  curl_off_t last_received_ = 0;
  std::uint64_t last_socket_bytes_ = 0;
  bool stalled_ = false;
};

}  // namespace ferry::detail::remote
