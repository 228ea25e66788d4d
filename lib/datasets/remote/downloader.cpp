#include "datasets/remote/downloader.hpp"

#include <linux/tcp.h>  // struct tcp_info with tcpi_bytes_received (glibc's lacks it)
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <thread>

#include "datasets/remote/file_url.hpp"
#include "datasets/remote/part_download.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

namespace {

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

// What a head's body callback fills: at most `want` bytes; `cut` once it stopped a whole
// file's transfer after them.
struct HeadBody {
  CURL* curl;
  Transfer* t;
  std::vector<std::byte> bytes;
  std::uint64_t want;
  bool cut;
};

std::size_t on_head_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto& h = *static_cast<HeadBody*>(user);
  if (!h.t->body_started) {
    h.t->body_started = true;
    curl_easy_getinfo(h.curl, CURLINFO_RESPONSE_CODE, &h.t->status);
  }
  if (h.t->status != 200 && h.t->status != 206) {  // an error's
    keep_error_body(*h.t, data, size * n);
    return size * n;
  }
  const std::size_t room = static_cast<std::size_t>(h.want - h.bytes.size());
  const std::size_t take = std::min(room, size * n);
  const auto* p = reinterpret_cast<const std::byte*>(data);
  h.bytes.insert(h.bytes.end(), p, p + take);
  if (h.bytes.size() >= h.want && h.t->status != 206) {
    h.cut = true;  // the rest of a whole file is not wanted
    return 0;
  }
  return size * n;
}

}  // namespace

Downloader::Downloader(const RemoteOptions& options, std::string_view who,
                       const std::atomic<bool>* cancel)
    : options_(options), who_(who), cancel_(cancel), rng_(std::random_device{}()) {
  global_init();
}

// Downloads `url` to `target`: true once the file is there, false for an optional file that
// the server does not have. With a `board`, a file of a known `size` over part_bytes comes in
// parts that the board's other downloaders may take.
bool Downloader::download(const std::string& url, const fs::path& target, bool optional,
                          std::uint64_t size, PartBoard* board) {
  if (board != nullptr && !optional && options_.connections > 1 && options_.part_bytes > 0 &&
      size > options_.part_bytes && !starts_with_ci(url, "file://")) {
    download_parts(url, target, size, board->impl());
    return true;
  }
  if (board != nullptr) board->impl().withdraw(url);  // whole: no parts to wait for
  // What the file may hold: its known size, else the cache's room.
  const std::uint64_t limit = size > 0 ? size : cache_bound(options_);
  if (starts_with_ci(url, "file://")) {
    const bool there = copy_file_url(url, target, optional, limit, size > 0, FileLabel{who_, url});
    if (there) write_meta(url, target, fs::file_size(target), "");
    return there;
  }
  const bool s3 = starts_with_ci(url, "s3://");
  const S3Target s3t = s3 ? s3_target(url) : S3Target{};
  Transfer t;
  t.target = target;
  t.label_name = url;
  t.label = FileLabel{who_, t.label_name};
  t.limit = limit;
  t.limit_is_size = size > 0;
  const int attempts = options_.retries + 1;
  std::string last;  // the last failure, for the message
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) backoff(attempt);
    if (cancelled()) fail(t, "cancelled");
    if (!curl_) curl_.reset(curl_easy_init());
    if (!curl_) throw DataError(t.label.prefix() + "cannot download: curl_easy_init failed");
    CURL* c = curl_.get();
    char errbuf[CURL_ERROR_SIZE] = {};
    StatusHook hook{c, &t};
    Slist headers;
    configure(c, url, s3t, errbuf, headers);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body_hooked);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &hook);
    const auto add_header = [&](const std::string& h) {
      headers.reset(curl_slist_append(headers.release(), h.c_str()));
    };
    const bool resume = t.writer && t.got > 0;
    if (resume) {
      curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, static_cast<curl_off_t>(t.got));
      if (!t.etag.empty()) add_header("If-Range: " + t.etag);
    }
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    t.status = 0;
    t.body_started = false;
    t.error = nullptr;
    t.error_body.clear();
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t.status);
    // The cache cannot be written, or the answer is larger than the file may be.
    if (t.error) std::rethrow_exception(t.error);
    if (cancelled()) fail(t, "cancelled");
    if (rc == CURLE_OK && t.status != 200 && t.status != 206) {
      // An optional file (a shard's index) that the server does not have, or does not let us
      // see (S3 answers 403 for a missing key to a caller that may not list the bucket).
      if (optional && (t.status == 401 || t.status == 403 || t.status == 404 || t.status == 410)) {
        return false;
      }
      last = "HTTP " + std::to_string(t.status) + error_text(t.error_body);
      if (!retryable_status(t.status)) fail(t, last + " (not retried)");
      continue;
    }
    if (rc != CURLE_OK) {
      last = failure_text(rc, t.status, errbuf);
      if (!retryable_curl(rc)) fail(t, last + " (not retried)");
      continue;
    }
    if (!t.writer) t.new_writer();  // an empty file
    if (t.total && t.got != *t.total) {
      last = "HTTP " + std::to_string(t.status) + ", a short body: " + std::to_string(t.got) +
             " of " + std::to_string(*t.total) + " bytes";
      continue;
    }
    t.writer->commit();
    t.writer.reset();
    write_meta(url, target, t.got, t.etag);
    return true;
  }
  fail(t, last + " (after " + std::to_string(attempts) + (attempts == 1 ? " try)" : " tries)"));
}

// `url`'s size and first `bytes` bytes (read_head()).
Head Downloader::head(const std::string& url, std::uint64_t bytes) {
  if (starts_with_ci(url, "file://")) return file_url_head(url, bytes, FileLabel{who_, url});
  const bool s3 = starts_with_ci(url, "s3://");
  const S3Target s3t = s3 ? s3_target(url) : S3Target{};
  Transfer t;  // its headers only: the body goes to `body`
  t.label_name = url;
  t.label = FileLabel{who_, t.label_name};
  const int attempts = options_.retries + 1;
  std::string last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) backoff(attempt);
    if (cancelled()) fail(t, "cancelled");
    if (!curl_) curl_.reset(curl_easy_init());
    if (!curl_) throw DataError(t.label.prefix() + "cannot download: curl_easy_init failed");
    CURL* c = curl_.get();
    char errbuf[CURL_ERROR_SIZE] = {};
    Slist headers;
    configure(c, url, s3t, errbuf, headers);
    HeadBody body{c, &t, {}, bytes, false};
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_head_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    // The server is asked for the first bytes alone.
    const std::string range = "0-" + std::to_string(bytes > 0 ? bytes - 1 : 0);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    t.status = 0;
    t.body_started = false;
    t.error_body.clear();
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t.status);
    if (cancelled()) fail(t, "cancelled");
    const bool done = rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && body.cut);
    if (!done) {
      last = failure_text(rc, t.status, errbuf);
      if (!retryable_curl(rc)) fail(t, last + " (not retried)");
      continue;
    }
    Head out;
    if (t.status == 416 && t.range_total.value_or(0) == 0) {
      return out;  // an empty file: it has no byte 0
    }
    if (t.status != 200 && t.status != 206) {
      last = "HTTP " + std::to_string(t.status) + error_text(t.error_body);
      if (!retryable_status(t.status)) fail(t, last + " (not retried)");
      continue;
    }
    if (t.status == 206) {
      if (!t.range_start || *t.range_start != 0 || !t.range_total) {
        fail(t, "HTTP 206 without the Content-Range of the bytes asked for (not retried)");
      }
      out.size = *t.range_total;
    } else {  // the whole file was coming (200): its length is the size
      curl_off_t length = -1;
      curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
      if (length < 0) fail(t, "the server tells no size (no Content-Length; not retried)");
      out.size = static_cast<std::uint64_t>(length);
    }
    const std::uint64_t want = std::min(bytes, out.size);
    if (body.bytes.size() < want) {
      last = "HTTP " + std::to_string(t.status) +
             ", a short body: " + std::to_string(body.bytes.size()) + " of " +
             std::to_string(want) + " bytes";
      continue;
    }
    body.bytes.resize(static_cast<std::size_t>(want));
    out.bytes = std::move(body.bytes);
    return out;
  }
  fail(t, last + " (after " + std::to_string(attempts) + (attempts == 1 ? " try)" : " tries)"));
}

// The options every transfer of `url` takes (the callbacks aside).
void Downloader::configure(CURL* c, const std::string& url, const S3Target& s3t, char* errbuf,
                           Slist& headers) {
  const bool s3 = starts_with_ci(url, "s3://");
  curl_easy_reset(c);
  curl_easy_setopt(c, CURLOPT_URL, s3 ? s3t.url.c_str() : url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "ferry");
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  // timeout_seconds is a time without progress (no byte received, of the headers or the body),
  // measured by on_progress from the last byte; curl's own low-speed limit would average over a
  // window of seconds, and count the body's bytes alone.
  // The connection's setup is bounded alike; a timeout past kNeverSeconds (inf) is none.
  if (options_.timeout_seconds < kNeverSeconds) {
    const auto connect_ms = static_cast<long>(std::ceil(options_.timeout_seconds * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, std::max(1L, connect_ms));
  } else {
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(kNeverSeconds * 1000));
  }
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, this);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
  curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, this);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
  curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, this);
  last_progress_ = std::chrono::steady_clock::now();
  last_received_ = 0;
  last_socket_bytes_ = socket_bytes();
  stalled_ = false;
  if (s3) sign_s3(c, s3t, headers);
}

[[noreturn]] void Downloader::fail(const Transfer& t, const std::string& why) {
  throw DataError(t.label.prefix() + "cannot download: " + why);
}

int Downloader::on_progress(void* user, curl_off_t, curl_off_t received, curl_off_t, curl_off_t) {
  auto& self = *static_cast<Downloader*>(user);
  if (self.stopping()) return 1;
  const auto now = std::chrono::steady_clock::now();
  if (received != self.last_received_) {
    self.last_received_ = received;
    self.last_progress_ = now;
    return 0;
  }
  // No byte of the body: bytes of the headers (or of TLS records) are progress too.
  const std::uint64_t on_sockets = self.socket_bytes();
  if (on_sockets != self.last_socket_bytes_) {
    self.last_socket_bytes_ = on_sockets;
    self.last_progress_ = now;
    return 0;
  }
  if (std::chrono::duration<double>(now - self.last_progress_).count() >
      self.options_.timeout_seconds) {
    self.stalled_ = true;
    return 1;
  }
  return 0;
}

curl_socket_t Downloader::on_open_socket(void* user, curlsocktype purpose, curl_sockaddr* address) {
  static_cast<void>(purpose);
  auto& self = *static_cast<Downloader*>(user);
  const curl_socket_t s =
      ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  if (s == CURL_SOCKET_BAD) return s;
  try {
    self.sockets_.push_back(s);
  } catch (...) {  // out of memory: no connection
    ::close(s);
    return CURL_SOCKET_BAD;
  }
  return s;
}

int Downloader::on_close_socket(void* user, curl_socket_t socket) {
  auto& self = *static_cast<Downloader*>(user);
  std::erase(self.sockets_, socket);
  return ::close(socket);
}

std::uint64_t Downloader::socket_bytes() const noexcept {
  std::uint64_t total = 0;
  for (const curl_socket_t s : sockets_) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (::getsockopt(s, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) {
      continue;  // not TCP, or a kernel before 4.1
    }
    total += info.tcpi_bytes_received;
  }
  return total;
}

std::string Downloader::failure_text(CURLcode rc, long status, const char* errbuf) const {
  const std::string http = status != 0 ? "HTTP " + std::to_string(status) + ", " : std::string();
  if (rc == CURLE_ABORTED_BY_CALLBACK && stalled_) {
    return http + "no progress for " + seconds_text(options_.timeout_seconds) +
           " s (RemoteOptions::timeout_seconds)";
  }
  return http + "curl: " + (errbuf[0] != '\0' ? std::string(errbuf) : curl_easy_strerror(rc));
}

void Downloader::backoff(int attempt) {
  const double base = 0.2 * std::pow(2.0, std::min(attempt - 1, 6));
  const double cap = std::min(base, 10.0);
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  // In steps, so that a cancel does not wait for the whole pause.
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(cap * jitter(rng_)));
  while (!stopping() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// "<target>.meta": what the file is, for whoever looks (never read back by ferry).
void Downloader::write_meta(const std::string& url, const fs::path& target, std::uint64_t size,
                            const std::string& etag) {
  const std::string text =
      "url " + url + "\nsize " + std::to_string(size) + "\netag " + etag + "\n";
  try {
    const fs::path meta = fs::path(target.string() + ".meta");
    write_file_atomically(meta, {reinterpret_cast<const std::byte*>(text.data()), text.size()},
                          FileLabel{"", url});
  } catch (const Error&) {
    // The file itself is in place; its note is not needed.
  }
}

}  // namespace ferry::detail::remote
