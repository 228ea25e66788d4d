#include "datasets/remote/remote_cache.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <system_error>
#include <thread>

#include "datasets/common/atomic_file.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

// One file's download in parts: what the threads that take its parts share.
struct PartDownload {
  PartDownload(std::string u, const fs::path& target, std::string w, std::uint64_t bytes,
               std::uint64_t part)
      : url(std::move(u)),
        who(std::move(w)),
        label{who, url},
        size(bytes),
        part_bytes(part),
        parts(static_cast<std::size_t>((bytes + part - 1) / part)),
        writer(std::in_place, target, label) {}
  const std::string url;
  const std::string who;
  const FileLabel label;
  const std::uint64_t size;
  const std::uint64_t part_bytes;
  const std::size_t parts;
  // Each part writes its bytes at their offset; the owner removes it (reset) once no part is
  // under way, unless it is complete.
  std::optional<AtomicFileWriter> writer;
  // A failure, a change of the file or a cancel: the parts under way end, no part is taken.
  std::atomic<bool> stop{false};
  // A server that ignores Range is sending the whole file to one transfer: the others end.
  std::atomic<bool> whole{false};

  std::mutex mutex;
  std::condition_variable settled;
  // Under mutex:
  std::size_t next = 0;     // the first part no one took
  std::size_t running = 0;  // parts under way
  std::size_t done = 0;     // parts complete
  bool whole_done = false;  // the whole file came in one transfer
  std::string etag;         // the first response's
  bool etag_known = false;
  std::exception_ptr error;  // the first failure
  std::string change;        // how the file changed on the server mid-download; empty: it did not
};

struct PartBoard::Impl {
  std::function<void()> posted;
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<PartDownload>> downloads;
  std::set<std::string> coming;  // announced, not posted yet

  // `url`'s download will not be posted (now): whoever waits for it looks again.
  void withdraw(const std::string& url) {
    bool was = false;
    {
      const std::lock_guard lock(mutex);
      was = coming.erase(url) > 0;
    }
    if (was && posted) posted();
  }
};

namespace {

constexpr std::uint64_t kDefaultCacheBytes = 50ULL << 30;
constexpr std::int64_t kStaleTemporarySeconds = std::int64_t{24} * 3600;

std::string errno_text(int e) { return std::system_category().message(e); }

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

std::string getenv_or(const char* name, std::string fallback = {}) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  return fallback;
}

// The URL curl asks, and how it signs the request, for an s3:// URL.
struct S3Target {
  std::string url;
  std::string region;
  std::string userpwd;  // "<key id>:<secret>"; empty: anonymous
  std::string token;
};

S3Target s3_target(std::string_view url) {
  const std::string_view rest = url.substr(5);  // after "s3://"
  const std::size_t slash = rest.find('/');
  const std::string bucket(rest.substr(0, slash));
  const std::string key(slash == std::string_view::npos ? "" : rest.substr(slash + 1));
  S3Target t;
  t.region = getenv_or("AWS_REGION", getenv_or("AWS_DEFAULT_REGION", "us-east-1"));
  std::string endpoint = getenv_or("AWS_ENDPOINT_URL");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  t.url = endpoint.empty() ? "https://" + bucket + ".s3." + t.region + ".amazonaws.com/" + key
                           : endpoint + "/" + bucket + "/" + key;  // path style
  const std::string id = getenv_or("AWS_ACCESS_KEY_ID");
  if (!id.empty()) t.userpwd = id + ":" + getenv_or("AWS_SECRET_ACCESS_KEY");
  t.token = getenv_or("AWS_SESSION_TOKEN");
  return t;
}

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};
using Curl = std::unique_ptr<CURL, CurlDeleter>;
struct SlistDeleter {
  void operator()(curl_slist* s) const noexcept { curl_slist_free_all(s); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

// The state of one file's transfer across its attempts.
struct Transfer {
  fs::path target;
  std::string label_name;  // the URL, for messages
  FileLabel label;
  bool http = true;
  std::optional<AtomicFileWriter> writer;
  std::uint64_t got = 0;               // bytes written to the temporary file
  std::optional<std::uint64_t> total;  // the file's size, once a response told it
  std::string etag;                    // of the file being written
  // This response's headers.
  long status = 0;
  std::optional<std::uint64_t> content_length;
  std::optional<std::uint64_t> range_start, range_total;
  std::string response_etag;
  bool body_started = false;
  bool discard = false;    // an error response's body
  std::string error_body;  // its first bytes (S3 says why in XML)
  std::exception_ptr error;

  void new_writer() {
    writer.reset();
    writer.emplace(target, label);
    got = 0;
    etag.clear();
    total.reset();
  }
};

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (starts_with_ci(line, "http/")) {  // a new response (after a redirect too)
    t.content_length.reset();
    t.range_start.reset();
    t.range_total.reset();
    t.response_etag.clear();
    t.body_started = false;
  } else if (starts_with_ci(line, "content-length:")) {
    const std::string v = trim(line.substr(15));
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    if (!v.empty() && end != nullptr && *end == '\0') t.content_length = x;
  } else if (starts_with_ci(line, "content-range:")) {
    // "bytes <first>-<last>/<total>"
    const std::string v = trim(line.substr(14));
    unsigned long long first = 0, last = 0, total = 0;
    if (std::sscanf(v.c_str(), "bytes %llu-%llu/%llu", &first, &last, &total) == 3) {
      t.range_start = first;
      t.range_total = total;
    } else if (std::sscanf(v.c_str(), "bytes */%llu", &total) == 1) {  // a 416's
      t.range_total = total;
    }
  } else if (starts_with_ci(line, "etag:")) {
    t.response_etag = trim(line.substr(5));
  }
  return size * n;
}

void keep_error_body(Transfer& t, const char* data, std::size_t n) {
  constexpr std::size_t kMost = 4096;
  if (t.error_body.size() < kMost)
    t.error_body.append(data, std::min(n, kMost - t.error_body.size()));
}

// What a failed response says: " <Code>: <Message>" of S3's XML error, or nothing.
std::string error_text(const std::string& body) {
  const auto tag = [&](const std::string& name) {
    const std::size_t at = body.find("<" + name + ">");
    if (at == std::string::npos) return std::string();
    const std::size_t from = at + name.size() + 2;
    const std::size_t end = body.find("</" + name + ">", from);
    return end == std::string::npos ? std::string() : body.substr(from, end - from);
  };
  const std::string code = tag("Code"), message = tag("Message");
  if (code.empty()) return {};
  return " " + code + (message.empty() ? "" : ": " + message);
}

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  try {
    if (!t.body_started) {
      t.body_started = true;
      t.discard = false;
      if (t.http) {
        if (t.status != 200 && t.status != 206) {
          t.discard = true;
        } else if (t.status == 206) {
          // A resumed transfer: it must continue where the file stands.
          if (!t.range_start || *t.range_start != t.got ||
              (t.total && t.range_total && *t.range_total != *t.total)) {
            t.writer.reset();  // refused: the next attempt starts over
            t.got = 0;
            return 0;
          }
          t.total = t.range_total;
        } else {  // 200: the whole file, from its first byte
          if (t.got > 0 || !t.writer) t.new_writer();
          t.total = t.content_length;
          t.etag = t.response_etag;
        }
      } else if (t.got > 0 || !t.writer) {
        t.new_writer();
      }
    }
    if (t.discard) {
      keep_error_body(t, data, size * n);
      return size * n;
    }
    t.writer->write({reinterpret_cast<const std::byte*>(data), size * n});
    t.got += size * n;
    return size * n;
  } catch (...) {
    t.error = std::current_exception();
    return 0;
  }
}

// Curl fills in the response code only once headers are done: the body callback asks it.
struct StatusHook {
  CURL* curl;
  Transfer* t;
};
std::size_t on_body_hooked(char* data, std::size_t size, std::size_t n, void* user) {
  auto& h = *static_cast<StatusHook*>(user);
  if (!h.t->body_started) curl_easy_getinfo(h.curl, CURLINFO_RESPONSE_CODE, &h.t->status);
  return on_body(data, size, n, h.t);
}

bool retryable_status(long s) {
  return s == 408 || s == 429 || s == 500 || s == 502 || s == 503 || s == 504;
}

bool retryable_curl(CURLcode rc) {
  switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT:
    case CURLE_FILE_COULDNT_READ_FILE:
    case CURLE_REMOTE_ACCESS_DENIED:
    case CURLE_LOGIN_DENIED:
    case CURLE_TOO_MANY_REDIRECTS:
    case CURLE_NOT_BUILT_IN:
    case CURLE_OUT_OF_MEMORY:
    case CURLE_PEER_FAILED_VERIFICATION:
      return false;
    default:
      return true;
  }
}

// One downloader thread's handle, reused for its files (connections stay open).
class Downloader {
 public:
  Downloader(const RemoteOptions& options, std::string_view who,
             const std::atomic<bool>* cancel = nullptr)
      : options_(options), who_(who), cancel_(cancel), rng_(std::random_device{}()) {
    global_init();
  }

  // Downloads `url` to `target`: true once the file is there, false for an optional file that
  // the server does not have. With a `board`, a file of a known `size` over part_bytes comes in
  // parts that the board's other downloaders may take.
  bool download(const std::string& url, const fs::path& target, bool optional,
                std::uint64_t size = 0, PartBoard* board = nullptr) {
    if (board != nullptr && !optional && options_.connections > 1 && options_.part_bytes > 0 &&
        size > options_.part_bytes && !starts_with_ci(url, "file://")) {
      download_parts(url, target, size, board->impl());
      return true;
    }
    if (board != nullptr) board->impl().withdraw(url);  // whole: no parts to wait for
    const bool s3 = starts_with_ci(url, "s3://");
    const S3Target s3t = s3 ? s3_target(url) : S3Target{};
    Transfer t;
    t.target = target;
    t.label_name = url;
    t.label = FileLabel{who_, t.label_name};
    t.http = !starts_with_ci(url, "file://");
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
      const bool resume = t.http && t.writer && t.got > 0;
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
      if (t.error) std::rethrow_exception(t.error);  // the cache cannot be written
      if (cancelled()) fail(t, "cancelled");
      const std::string curl_text = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
      if (rc == CURLE_OK && t.http && t.status != 200 && t.status != 206) {
        if ((t.status == 404 || t.status == 410) && optional) return false;
        last = "HTTP " + std::to_string(t.status) + error_text(t.error_body);
        if (!retryable_status(t.status)) fail(t, last + " (not retried)");
        continue;
      }
      if (rc != CURLE_OK) {
        if (rc == CURLE_FILE_COULDNT_READ_FILE && optional) return false;
        last = (t.status != 0 ? "HTTP " + std::to_string(t.status) + ", " : std::string()) +
               "curl: " + curl_text;
        if (!retryable_curl(rc)) fail(t, last + " (not retried)");
        if (!t.http) t.writer.reset();  // file:// starts over
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

  // Fetches one part not yet taken of `d`; false when there was none.
  bool help(PartDownload& d) {
    const std::optional<std::size_t> k = take(d);
    if (!k) return false;
    bool complete = false;
    try {
      complete = fetch_part(d, *k);
    } catch (...) {
      fail_download(d, std::current_exception());
    }
    settle(d, complete);
    return true;
  }

  // `url`'s size and first `bytes` bytes (read_head()).
  Head head(const std::string& url, std::uint64_t bytes) {
    const bool s3 = starts_with_ci(url, "s3://");
    const S3Target s3t = s3 ? s3_target(url) : S3Target{};
    Transfer t;  // its headers only: the body goes to `body`
    t.label_name = url;
    t.label = FileLabel{who_, t.label_name};
    t.http = !starts_with_ci(url, "file://");
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
      // file:// reads the file's first bytes and stops; a server is asked for them alone.
      const std::string range = "0-" + std::to_string(bytes > 0 ? bytes - 1 : 0);
      if (t.http) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
      if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
      t.status = 0;
      t.body_started = false;
      t.error_body.clear();
      const CURLcode rc = curl_easy_perform(c);
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t.status);
      if (cancelled()) fail(t, "cancelled");
      const std::string curl_text = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
      const bool done = rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && body.cut);
      if (!done) {
        last = (t.status != 0 ? "HTTP " + std::to_string(t.status) + ", " : std::string()) +
               "curl: " + curl_text;
        if (!retryable_curl(rc)) fail(t, last + " (not retried)");
        continue;
      }
      Head out;
      if (t.http && t.status == 416 && t.range_total.value_or(0) == 0) {
        return out;  // an empty file: it has no byte 0
      }
      if (t.http && t.status != 200 && t.status != 206) {
        last = "HTTP " + std::to_string(t.status) + error_text(t.error_body);
        if (!retryable_status(t.status)) fail(t, last + " (not retried)");
        continue;
      }
      if (t.http && t.status == 206) {
        if (!t.range_start || *t.range_start != 0 || !t.range_total) {
          fail(t, "HTTP 206 without the Content-Range of the bytes asked for (not retried)");
        }
        out.size = *t.range_total;
      } else {  // the whole file was coming (200, or file://): its length is the size
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

 private:
  // What a head's body callback fills: at most `want` bytes; `cut` once it stopped a whole
  // file's transfer after them.
  struct HeadBody {
    CURL* curl;
    Transfer* t;
    std::vector<std::byte> bytes;
    std::uint64_t want;
    bool cut;
  };
  static std::size_t on_head_body(char* data, std::size_t size, std::size_t n, void* user) {
    auto& h = *static_cast<HeadBody*>(user);
    if (!h.t->body_started) {
      h.t->body_started = true;
      curl_easy_getinfo(h.curl, CURLINFO_RESPONSE_CODE, &h.t->status);
    }
    if (h.t->http && h.t->status != 200 && h.t->status != 206) {  // an error's
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

  // The options every transfer of `url` takes (the callbacks aside).
  void configure(CURL* c, const std::string& url, const S3Target& s3t, char* errbuf,
                 Slist& headers) {
    const bool s3 = starts_with_ci(url, "s3://");
    curl_easy_reset(c);
    const auto add_header = [&](const std::string& h) {
      headers.reset(curl_slist_append(headers.release(), h.c_str()));
    };
    curl_easy_setopt(c, CURLOPT_URL, s3 ? s3t.url.c_str() : url.c_str());
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https,file");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "ferry");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    const long timeout_ms = std::max(1L, std::lround(options_.timeout_seconds * 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME,
                     std::max(1L, std::lround(std::ceil(options_.timeout_seconds))));
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    if (cancel_ != nullptr || part_stop_ != nullptr) {
      curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(c, CURLOPT_XFERINFODATA, this);
    }
    if (s3 && !s3t.userpwd.empty()) {
      // Curl keeps a copy of each string option.
      const std::string sigv4 = "aws:amz:" + s3t.region + ":s3";
      curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
      curl_easy_setopt(c, CURLOPT_USERPWD, s3t.userpwd.c_str());
      // The payload hash of a GET (no body), which S3 wants signed.
      add_header(
          "x-amz-content-sha256: "
          "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
      if (!s3t.token.empty()) add_header("x-amz-security-token: " + s3t.token);
    }
  }

  // The download in parts of `url`, posted on `board` while its parts are to be had: this thread
  // takes them in order, as do the board's others; once none is under way, the file is complete
  // (renamed into place), or the first failure is thrown, or, after a change of the file on the
  // server, it starts over.
  void download_parts(const std::string& url, const fs::path& target, std::uint64_t size,
                      PartBoard::Impl& board) {
    const int attempts = options_.retries + 1;
    for (int attempt = 0;; ++attempt) {
      if (attempt > 0) backoff(attempt);
      const auto d =
          std::make_shared<PartDownload>(url, target, std::string(who_), size, options_.part_bytes);
      {
        const std::lock_guard lock(board.mutex);
        board.downloads[url] = d;
        board.coming.erase(url);
      }
      struct Unpost {  // off the board however this ends
        PartBoard::Impl& board;
        const std::shared_ptr<PartDownload>& d;
        ~Unpost() {
          d->stop = true;
          const std::lock_guard lock(board.mutex);
          const auto it = board.downloads.find(d->url);
          if (it != board.downloads.end() && it->second == d) board.downloads.erase(it);
        }
      };
      {
        const Unpost unpost{board, d};
        if (board.posted) board.posted();
        while (help(*d)) {
        }
        std::unique_lock lock(d->mutex);
        d->settled.wait(lock, [&] { return d->running == 0; });
      }
      // No part is under way: what they left is read without the lock, and a temporary file
      // that is not complete goes now (not when the last thread that helped lets the download go).
      const bool complete = d->whole_done || d->done == d->parts;
      const bool cancel = cancelled();
      if (cancel || d->error || !d->change.empty() || !complete) d->writer.reset();
      if (cancel) throw DataError(d->label.prefix() + "cannot download: cancelled");
      if (d->error) std::rethrow_exception(d->error);
      if (!d->change.empty()) {
        if (attempt + 1 < attempts) continue;
        throw DataError(d->label.prefix() + "cannot download: the file changed on the server " +
                        "during the download (" + d->change + ") (after " +
                        std::to_string(attempts) + (attempts == 1 ? " try)" : " tries)"));
      }
      if (!complete) {  // every part ended, not every part came
        throw DataError(d->label.prefix() + "cannot download: " + std::to_string(d->done) + " of " +
                        std::to_string(d->parts) + " parts came");
      }
      d->writer->commit();
      write_meta(url, target, size, d->etag);
      return;
    }
  }

  static std::optional<std::size_t> take(PartDownload& d) {
    const std::lock_guard lock(d.mutex);
    if (d.stop.load() || d.whole.load() || d.next >= d.parts) return std::nullopt;
    ++d.running;
    return d.next++;
  }
  static void settle(PartDownload& d, bool complete) {
    {
      const std::lock_guard lock(d.mutex);
      --d.running;
      if (complete) ++d.done;
    }
    d.settled.notify_all();
  }
  // The download fails with `e` (the first failure stays): its other parts end.
  static void fail_download(PartDownload& d, std::exception_ptr e) {
    const std::lock_guard lock(d.mutex);
    if (!d.error) d.error = std::move(e);
    d.stop = true;
  }
  // The file changed on the server: the download starts over.
  static void changed(PartDownload& d, const std::string& how) {
    const std::lock_guard lock(d.mutex);
    if (d.change.empty()) d.change = how;
    d.stop = true;
  }
  // The server's file is not of the size the download was asked for (the size a dataset
  // learned at open): not retried.
  static void other_size(PartDownload& d, std::uint64_t bytes, bool at_least = false) {
    fail_download(d, std::make_exception_ptr(DataError(
                         d.label.prefix() + "cannot download: the file has " +
                         (at_least ? "more than " : "") + std::to_string(bytes) +
                         " bytes on the server, " + std::to_string(d.size) +
                         " when the dataset was opened (the file changed on the server: give a "
                         "changed file a new name; not retried)")));
  }
  // Whether a response with `etag` is of the file being downloaded (the first response's ETag).
  static bool same_file(PartDownload& d, const std::string& etag) {
    {
      const std::lock_guard lock(d.mutex);
      if (!d.etag_known) {
        d.etag = etag;
        d.etag_known = true;
        return true;
      }
      if (etag == d.etag) return true;
    }
    changed(d, "ETag " + (d.etag.empty() ? std::string("none") : d.etag) + ", then " +
                   (etag.empty() ? std::string("none") : etag));
    return false;
  }

  // What one part's transfer writes, across its attempts.
  struct PartSink {
    CURL* curl = nullptr;
    PartDownload* d = nullptr;
    Transfer* headers = nullptr;  // the response's headers
    std::uint64_t pos = 0;        // the next byte to write
    std::uint64_t end = 0;        // the end of the part (of the file, when it comes whole)
    bool whole = false;           // the server sends this transfer the whole file
    bool started = false;         // this response's body began
    bool discard = false;         // an error response's body
    bool refused = false;         // a response that is not of the range asked
    std::string why;              // how it is not
    std::exception_ptr error;     // the cache cannot be written
  };
  static std::size_t on_part_body(char* data, std::size_t size, std::size_t n, void* user) {
    auto& s = *static_cast<PartSink*>(user);
    PartDownload& d = *s.d;
    Transfer& h = *s.headers;
    try {
      if (!s.started) {
        s.started = true;
        curl_easy_getinfo(s.curl, CURLINFO_RESPONSE_CODE, &h.status);
        const long status = h.status;
        if (status == 206) {
          if (!h.range_start || *h.range_start != s.pos || !h.range_total ||
              *h.range_total != d.size) {
            s.refused = true;
            s.why = "HTTP 206 of another range (Content-Range from " +
                    (h.range_start ? std::to_string(*h.range_start) : std::string("?")) + " of " +
                    (h.range_total ? std::to_string(*h.range_total) : std::string("?")) +
                    " bytes; asked from " + std::to_string(s.pos) + " of " +
                    std::to_string(d.size) + ")";
            if (h.range_total && *h.range_total != d.size) other_size(d, *h.range_total);
            return 0;
          }
          if (!same_file(d, h.response_etag)) return 0;
        } else if (status == 200) {
          // The server ignores Range: the whole file comes, and this transfer writes it all.
          if (h.content_length && *h.content_length != d.size) {
            other_size(d, *h.content_length);
            return 0;
          }
          if (!same_file(d, h.response_etag)) return 0;
          if (!s.whole) {
            const std::lock_guard lock(d.mutex);
            if (d.whole.load()) return 0;  // another transfer brings it whole
            d.whole = true;
            s.whole = true;
          }
          s.pos = 0;
          s.end = d.size;
        } else {
          s.discard = true;
        }
      }
      if (s.discard) {
        keep_error_body(*s.headers, data, size * n);
        return size * n;
      }
      if (d.stop.load() || (d.whole.load() && !s.whole)) return 0;
      if (s.whole && size * n > s.end - s.pos) {  // a whole file (no Content-Length) too long
        other_size(d, s.end, true);
        return 0;
      }
      const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(size * n, s.end - s.pos));
      d.writer->write_at(s.pos, {reinterpret_cast<const std::byte*>(data), take});
      s.pos += take;
      return take;  // more than the part asked for: cut
    } catch (...) {
      s.error = std::current_exception();
      return 0;
    }
  }

  // Fetches part `k` of `d` (resuming where a broken transfer stopped, with the retries): true
  // once its bytes are written. A failure that the retries do not mend fails `d`; a stop of `d`
  // (a failure elsewhere, a change, a cancel, the whole file coming in another transfer) ends it.
  bool fetch_part(PartDownload& d, std::size_t k) {
    struct StopOf {  // this thread's transfers also watch the download's stop meanwhile
      Downloader& self;
      ~StopOf() { self.part_stop_ = nullptr; }
    } const stop_of{*this};
    part_stop_ = &d.stop;
    const bool s3 = starts_with_ci(d.url, "s3://");
    const S3Target s3t = s3 ? s3_target(d.url) : S3Target{};
    const std::uint64_t first = static_cast<std::uint64_t>(k) * d.part_bytes;
    Transfer h;  // the headers of each response
    h.label_name = d.url;
    h.label = d.label;
    PartSink sink;
    sink.d = &d;
    sink.headers = &h;
    sink.pos = first;
    sink.end = std::min(d.size, first + d.part_bytes);
    const int attempts = options_.retries + 1;
    std::string last;
    for (int attempt = 0; attempt < attempts; ++attempt) {
      if (attempt > 0) backoff(attempt);
      if (stopping() || (d.whole.load() && !sink.whole)) return false;
      if (!curl_) curl_.reset(curl_easy_init());
      if (!curl_) {
        fail_download(d, std::make_exception_ptr(DataError(
                             d.label.prefix() + "cannot download: curl_easy_init failed")));
        return false;
      }
      CURL* c = curl_.get();
      char errbuf[CURL_ERROR_SIZE] = {};
      Slist headers;
      configure(c, d.url, s3t, errbuf, headers);
      sink.curl = c;
      sink.started = false;
      sink.discard = false;
      sink.refused = false;
      h.status = 0;
      h.error_body.clear();
      curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
      curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_part_body);
      curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
      const std::string range = std::to_string(sink.pos) + "-" + std::to_string(sink.end - 1);
      curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
      std::string etag;
      {
        const std::lock_guard lock(d.mutex);
        etag = d.etag;
      }
      // A strong ETag (a weak one never matches If-Match): a changed file answers 412.
      if (!etag.empty() && !etag.starts_with("W/")) {
        headers.reset(curl_slist_append(headers.release(), ("If-Match: " + etag).c_str()));
      }
      if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
      const CURLcode rc = curl_easy_perform(c);
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &h.status);
      if (sink.error) {  // the cache cannot be written
        fail_download(d, sink.error);
        return false;
      }
      if (stopping() || (d.whole.load() && !sink.whole)) return false;
      const std::string curl_text = errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc);
      if (sink.refused) {
        last = sink.why;
        continue;
      }
      if (rc == CURLE_OK && h.status != 200 && h.status != 206) {
        if (h.status == 412) {
          changed(d, "HTTP 412 to If-Match: " + etag);
          return false;
        }
        last = "HTTP " + std::to_string(h.status) + error_text(h.error_body);
        if (!retryable_status(h.status)) {
          fail_download(d, std::make_exception_ptr(DataError(
                               d.label.prefix() + "cannot download: " + last + " (not retried)")));
          return false;
        }
        continue;
      }
      if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && sink.pos == sink.end)) {
        last = (h.status != 0 ? "HTTP " + std::to_string(h.status) + ", " : std::string()) +
               "curl: " + curl_text;
        if (!retryable_curl(rc)) {
          fail_download(d, std::make_exception_ptr(DataError(
                               d.label.prefix() + "cannot download: " + last + " (not retried)")));
          return false;
        }
        continue;  // resumed from sink.pos
      }
      if (sink.pos != sink.end) {
        last = "HTTP " + std::to_string(h.status) + ", a short body: part " + std::to_string(k) +
               " stopped at byte " + std::to_string(sink.pos) + " of " + std::to_string(sink.end);
        continue;
      }
      if (sink.whole) {
        const std::lock_guard lock(d.mutex);
        d.whole_done = true;
      }
      return true;
    }
    fail_download(d, std::make_exception_ptr(DataError(
                         d.label.prefix() + "cannot download: " + last + " (after " +
                         std::to_string(attempts) + (attempts == 1 ? " try)" : " tries)"))));
    return false;
  }

  [[noreturn]] void fail(const Transfer& t, const std::string& why) {
    throw DataError(t.label.prefix() + "cannot download: " + why);
  }

  bool cancelled() const noexcept { return cancel_ != nullptr && cancel_->load(); }
  // Cancelled, or the download in parts whose part this thread fetches stopped.
  bool stopping() const noexcept {
    return cancelled() || (part_stop_ != nullptr && part_stop_->load());
  }

  static int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const Downloader*>(user)->stopping() ? 1 : 0;
  }

  void backoff(int attempt) {
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
  static void write_meta(const std::string& url, const fs::path& target, std::uint64_t size,
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

  const RemoteOptions& options_;
  std::string_view who_;
  const std::atomic<bool>* cancel_;
  const std::atomic<bool>* part_stop_ = nullptr;  // the stop of the download whose part is ours
  Curl curl_;
  std::mt19937_64 rng_;
};

// Opens `path` and takes a shared lock on it: the file, when it is there, complete and still
// linked; nothing when it is not there (or was evicted under us).
std::optional<FileDescriptor> open_held(const fs::path& path, const FileLabel& label) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw DataError(label.prefix() + "cannot open the cached file " + path.string() + ": " +
                    errno_text(errno));
  }
  while (::flock(fd.get(), LOCK_SH) != 0) {
    if (errno != EINTR) {
      throw DataError(label.prefix() + "cannot lock the cached file " + path.string() + ": " +
                      errno_text(errno));
    }
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw DataError(label.prefix() + "the cached file " + path.string() + " is not a regular file");
  }
  if (st.st_nlink == 0) return std::nullopt;  // evicted between our open and our lock
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};  // used now: atime
  static_cast<void>(::futimens(fd.get(), times));
  return fd;
}

// Takes the per-file download lock, "<target>.lock" (released when the descriptor goes);
// `before_wait` is called when another holds it.
template <class BeforeWait>
FileDescriptor lock_download(const fs::path& target, const FileLabel& label,
                             BeforeWait&& before_wait) {
  const fs::path lock = target.string() + ".lock";
  FileDescriptor fd(
      ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
  if (!fd) {
    throw DataError(label.prefix() + "cannot open the lock file " + lock.string() + ": " +
                    errno_text(errno));
  }
  int flags = LOCK_EX | LOCK_NB;
  while (::flock(fd.get(), flags) != 0) {
    if (errno == EWOULDBLOCK && flags != LOCK_EX) {
      before_wait();
      flags = LOCK_EX;
    } else if (errno != EINTR) {
      throw DataError(label.prefix() + "cannot lock " + lock.string() + ": " + errno_text(errno));
    }
  }
  return fd;
}

std::optional<CachedFile> fetch_one(Downloader& d, const Request& r, const fs::path& dir,
                                    std::uint64_t bound, std::string_view who,
                                    PartBoard* board = nullptr) {
  const fs::path target = r.target.empty() ? entry_path(dir, r.url) : r.target;
  const FileLabel label{who, r.url};
  // An announced download in parts that is not posted after all (found here, failed, waiting
  // for another process) lets those waiting for its parts go.
  const auto withdraw = [&] {
    if (board != nullptr) board->impl().withdraw(r.url);
  };
  struct Withdraw {
    const decltype(withdraw)& f;
    ~Withdraw() { f(); }
  } const withdraw_at_end{withdraw};
  for (int round = 0; round < 4; ++round) {
    if (auto fd = open_held(target, label)) return CachedFile(target, std::move(*fd));
    const FileDescriptor lock = lock_download(target, label, withdraw);
    if (auto fd = open_held(target, label)) return CachedFile(target, std::move(*fd));
    // Room first: what no one holds any more goes now, not after this download.
    if (r.expected_bytes > 0) evict(dir, bound > r.expected_bytes ? bound - r.expected_bytes : 0);
    if (!d.download(r.url, target, r.optional, r.expected_bytes, board)) return std::nullopt;
    auto fd = open_held(target, label);
    if (!fd) continue;  // evicted already by another process: again
    return CachedFile(target, std::move(*fd));
  }
  throw DataError(label.prefix() +
                  "cannot keep the file in the cache: it was evicted after each download "
                  "(RemoteOptions::cache_bytes too small for the files in use?)");
}

bool is_lock_or_temporary(const std::string& name) {
  return name.empty() || name[0] == '.' ||
         (name.size() > 5 && name.compare(name.size() - 5, 5, ".lock") == 0);
}

// Runs job(downloader, i) for each i in [0, count) on at most options.connections threads, each
// with a Downloader of its own. After a failure no job starts; once every thread has ended, the
// failure of the lowest i is thrown.
template <class Job>
void run_transfers(std::size_t count, const RemoteOptions& options, std::string_view who, Job job) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    Downloader d(options, who);
    for (std::size_t i; (i = next.fetch_add(1)) < count;) {
      if (failed.load()) return;  // the first failure is thrown: start nothing more
      try {
        job(d, i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  const std::size_t threads =
      std::min<std::size_t>(count, static_cast<std::size_t>(options.connections));
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    try {
      for (std::size_t i = 0; i < threads; ++i) pool.emplace_back(work);
    } catch (...) {
      failed = true;
      for (std::thread& th : pool) th.join();
      throw;
    }
    for (std::thread& th : pool) th.join();
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

bool is_url(std::string_view name) noexcept {
  return starts_with_ci(name, "http://") || starts_with_ci(name, "https://") ||
         starts_with_ci(name, "file://") || starts_with_ci(name, "s3://");
}

fs::path cache_dir(const RemoteOptions& options) {
  fs::path dir = options.cache_dir;
  if (dir.empty()) dir = getenv_or("FERRY_CACHE_DIR");
  if (dir.empty()) {
    const std::string home = getenv_or("HOME");
    if (home.empty()) {
      throw ConfigError(
          "RemoteOptions::cache_dir is empty, and neither $FERRY_CACHE_DIR nor $HOME is set");
    }
    dir = fs::path(home) / ".cache" / "ferry";
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw DataError("cannot make the cache folder " + dir.string() + ": " +
                    (ec ? ec.message() : "not a folder"));
  }
  return dir;
}

fs::path entry_path(const fs::path& dir, std::string_view url) {
  std::string_view tail = url.substr(0, url.find_first_of("?#"));
  while (!tail.empty() && tail.back() == '/') tail.remove_suffix(1);
  tail = tail.substr(tail.rfind('/') + 1);
  std::string base;
  for (const char c : tail.substr(0, 80)) {
    base +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  }
  if (base.empty() || base[0] == '.') base = "f" + base;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hash(16, '0');
  std::uint64_t h = fnv1a(url);
  for (int i = 15; i >= 0; --i, h >>= 4) hash[static_cast<std::size_t>(i)] = kHex[h & 15];
  return dir / (hash + "-" + base);
}

void check_options(const RemoteOptions& o, std::string_view who) {
  const std::string w(who);
  if (o.connections < 1) {
    throw ConfigError(w + ": RemoteOptions::connections is " + std::to_string(o.connections) +
                      "; it must be at least 1");
  }
  if (o.retries < 0) {
    throw ConfigError(w + ": RemoteOptions::retries is " + std::to_string(o.retries) +
                      "; it must be >= 0");
  }
  if (!(o.timeout_seconds > 0)) {
    throw ConfigError(w + ": RemoteOptions::timeout_seconds is " +
                      std::to_string(o.timeout_seconds) + "; it must be > 0");
  }
}

std::vector<std::optional<CachedFile>> fetch_files(const std::vector<Request>& requests,
                                                   const RemoteOptions& options,
                                                   std::string_view who) {
  check_options(options, who);
  const fs::path dir = cache_dir(options);
  std::vector<std::optional<CachedFile>> out(requests.size());
  run_transfers(requests.size(), options, who, [&](Downloader& d, std::size_t i) {
    out[i] = fetch_one(d, requests[i], dir, cache_bound(options), who);
  });
  // Every file asked for is held now (none of them can go): the others make room.
  evict(dir, cache_bound(options));
  return out;
}

PartBoard::PartBoard(std::function<void()> posted) : impl_(std::make_unique<Impl>()) {
  impl_->posted = std::move(posted);
}
PartBoard::~PartBoard() = default;

PartBoard::Offer PartBoard::offer(const std::string& url) const {
  std::shared_ptr<PartDownload> d;
  {
    const std::lock_guard lock(impl_->mutex);
    const auto it = impl_->downloads.find(url);
    if (it == impl_->downloads.end()) {
      return impl_->coming.contains(url) ? Offer::soon : Offer::none;
    }
    d = it->second;
  }
  const std::lock_guard lock(d->mutex);
  return !d->stop.load() && !d->whole.load() && d->next < d->parts ? Offer::part : Offer::none;
}

void PartBoard::announce(const std::string& url) {
  const std::lock_guard lock(impl_->mutex);
  impl_->coming.insert(url);
}

struct Fetcher::State {
  RemoteOptions options;
  std::string who;
  fs::path dir;
  Downloader downloader;
  PartBoard* board;
  State(const RemoteOptions& o, std::string w, const std::atomic<bool>* cancel, PartBoard* b)
      : options(o),
        who(std::move(w)),
        dir(cache_dir(options)),
        downloader(options, who, cancel),
        board(b) {}
};

Fetcher::Fetcher(const RemoteOptions& options, std::string who, const std::atomic<bool>* cancel,
                 PartBoard* board) {
  check_options(options, who);
  state_ = std::make_unique<State>(options, std::move(who), cancel, board);
}
Fetcher::~Fetcher() = default;

std::optional<CachedFile> Fetcher::fetch(const Request& request) {
  auto file = fetch_one(state_->downloader, request, state_->dir, cache_bound(state_->options),
                        state_->who, state_->board);
  evict(state_->dir, cache_bound(state_->options));
  return file;
}

bool Fetcher::help(const std::string& url) {
  if (state_->board == nullptr) return false;
  PartBoard::Impl& board = state_->board->impl();
  std::shared_ptr<PartDownload> d;
  {
    const std::lock_guard lock(board.mutex);
    const auto it = board.downloads.find(url);
    if (it == board.downloads.end()) return false;
    d = it->second;
  }
  return state_->downloader.help(*d);
}

namespace {

Head head_of(Downloader& d, const std::string& url, std::uint64_t bytes, const fs::path& dir,
             std::string_view who) {
  const FileLabel label{who, url};
  // A file in the cache answers for the server.
  if (auto fd = open_held(entry_path(dir, url), label)) {
    struct stat st {};
    if (::fstat(fd->get(), &st) == 0) {
      Head out;
      out.size = static_cast<std::uint64_t>(st.st_size);
      out.bytes.resize(static_cast<std::size_t>(std::min(bytes, out.size)));
      std::size_t got = 0;
      while (got < out.bytes.size()) {
        const ssize_t n = ::pread(fd->get(), out.bytes.data() + got, out.bytes.size() - got,
                                  static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got == out.bytes.size()) return out;
    }
  }
  return d.head(url, bytes);
}

}  // namespace

Head read_head(const std::string& url, std::uint64_t bytes, const RemoteOptions& options,
               std::string_view who) {
  check_options(options, who);
  Downloader d(options, who);
  return head_of(d, url, bytes, cache_dir(options), who);
}

std::vector<Head> read_heads(const std::vector<std::string>& urls, std::uint64_t bytes,
                             const RemoteOptions& options, std::string_view who) {
  check_options(options, who);
  const fs::path dir = cache_dir(options);
  std::vector<Head> out(urls.size());
  run_transfers(urls.size(), options, who, [&](Downloader& d, std::size_t i) {
    out[i] = head_of(d, urls[i], bytes, dir, who);
  });
  return out;
}

LocalFile local_file(const fs::path& name, const RemoteOptions& options, std::string_view who) {
  if (!is_url(name.native())) return {name, std::nullopt};
  auto fetched = fetch_files({Request{name.string(), {}, false}}, options, who);
  LocalFile out{fetched.front()->path(), std::move(fetched.front())};
  return out;
}

std::uint64_t cache_bound(const RemoteOptions& options) noexcept {
  return options.cache_bytes == 0 ? kDefaultCacheBytes : options.cache_bytes;
}

std::uint64_t cache_size(const fs::path& dir) noexcept {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2) || is_lock_or_temporary(it->path().filename().string())) {
      continue;
    }
    const auto size = it->file_size(e2);
    if (!e2) total += size;
  }
  return total;
}

std::uint64_t evict(const fs::path& dir, std::uint64_t bound) noexcept {
  try {
    // Entries by their 16-hex prefix: the file itself (the shortest name) and its companions.
    struct Entry {
      std::string main;
      std::vector<std::pair<fs::path, std::uint64_t>> files;
      std::uint64_t bytes = 0;
      std::int64_t used_ns = 0;
    };
    std::map<std::string, Entry> entries;
    std::uint64_t total = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.starts_with('.') && name.ends_with(".tmp")) {
        // A download's temporary file, left by a process that died: none lives this long
        // without writing (a transfer without progress stops after timeout_seconds).
        if (::time(nullptr) - st.st_mtim.tv_sec > kStaleTemporarySeconds) {
          static_cast<void>(::unlink(it->path().c_str()));
        }
        continue;
      }
      if (is_lock_or_temporary(name) || name.size() < 17 || name[16] != '-') continue;
      Entry& e = entries[name.substr(0, 16)];
      const auto bytes = static_cast<std::uint64_t>(st.st_size);
      e.files.emplace_back(it->path(), bytes);
      e.bytes += bytes;
      total += bytes;
      if (e.main.empty() || name.size() < e.main.size()) {
        e.main = name;
        e.used_ns =
            static_cast<std::int64_t>(st.st_atim.tv_sec) * 1'000'000'000 + st.st_atim.tv_nsec;
      }
    }
    if (total <= bound) return total;
    std::vector<Entry*> order;
    order.reserve(entries.size());
    for (auto& [key, e] : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Entry* a, const Entry* b) { return a->used_ns < b->used_ns; });
    for (Entry* e : order) {
      if (total <= bound) break;
      const FileDescriptor fd(
          ::open((dir / e->main).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
      for (const auto& [path, bytes] : e->files) {
        if (::unlink(path.c_str()) == 0) total -= bytes;
      }
    }
    return total;
  } catch (...) {
    return 0;
  }
}

}  // namespace ferry::detail::remote
