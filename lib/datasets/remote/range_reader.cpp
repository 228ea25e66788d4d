#include "datasets/remote/range_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <mutex>

#include "core/read_stop.hpp"
#include "datasets/common/file_io.hpp"
#include "datasets/remote/curl_transfer.hpp"
#include "datasets/remote/downloader.hpp"
#include "datasets/remote/file_url.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {

namespace {

// What a ranged GET's body callback fills: the bytes asked, from where the answer's body starts.
struct RangeBody {
  CURL* curl;
  Transfer* t;
  std::uint64_t first;  // the first byte asked (from_end: set once the size is known)
  std::uint64_t length;
  bool from_end;
  std::uint64_t skip = 0;  // a whole file's (HTTP 200) bytes before the range
  std::uint64_t want = 0;  // bytes to keep
  std::vector<std::byte> bytes;
  bool cut = false;     // stopped once the bytes asked came (the rest of a whole file)
  std::string refused;  // why the answer was refused (not retried); empty: it was not
  // A whole file (HTTP 200) of no Content-Length (chunked): its size is known only at its end.
  // Bytes from an offset are cut as any whole file's; its last bytes are those that came last.
  bool unsized = false;
  std::uint64_t total = 0;  // unsized: the body's bytes so far
  // unsized, from_end: the most bytes read to its end (the cache's room, as a download of
  // unknown size may take), past which the answer is refused
  std::uint64_t most = 0;
};

std::string range_text(std::uint64_t first, std::uint64_t length) {
  return "bytes " + std::to_string(first) + " to " + std::to_string(first + length - 1);
}

// The answer's first bytes: where they lie in the file, and how many are kept; refuses an
// answer that is not what was asked.
void start_body(RangeBody& b) {
  Transfer& t = *b.t;
  if (t.status == 206) {
    if (!t.range_start || !t.range_total) {
      b.refused = "HTTP 206 without a Content-Range";
      return;
    }
    const std::uint64_t total = *t.range_total;
    if (b.from_end) b.first = total > b.length ? total - b.length : 0;
    if (*t.range_start != b.first) {
      b.refused = "HTTP 206 from byte " + std::to_string(*t.range_start) + ", not byte " +
                  std::to_string(b.first) + " as asked";
      return;
    }
    b.want = b.first < total ? std::min(b.length, total - b.first) : 0;
    if (t.content_length && *t.content_length > b.want) {
      b.refused = "an answer of " + std::to_string(*t.content_length) + " bytes, more than the " +
                  std::to_string(b.want) + " asked";
    }
    return;
  }
  // 200: the server ignores Range and sends the whole file; its length tells the size, or, sent
  // without one, its end does.
  if (!t.content_length) {
    b.unsized = true;
    b.skip = b.from_end ? 0 : b.first;
    b.want = b.from_end ? 0 : b.length;
    return;
  }
  const std::uint64_t total = *t.content_length;
  if (b.from_end) b.first = total > b.length ? total - b.length : 0;
  b.skip = b.first;
  b.want = b.first < total ? std::min(b.length, total - b.first) : 0;
}

std::size_t on_range_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto& b = *static_cast<RangeBody*>(user);
  Transfer& t = *b.t;
  if (!t.body_started) {
    t.body_started = true;
    curl_easy_getinfo(b.curl, CURLINFO_RESPONSE_CODE, &t.status);
    if (t.status == 200 || t.status == 206) {
      start_body(b);
      if (!b.refused.empty()) return 0;
      b.bytes.reserve(static_cast<std::size_t>(b.want));
    }
  }
  if (t.status != 200 && t.status != 206) {  // an error's
    keep_error_body(t, data, size * n);
    return size * n;
  }
  std::size_t len = size * n;
  const auto* p = reinterpret_cast<const std::byte*>(data);
  b.total += len;
  if (b.unsized && b.from_end) {  // the last `length` bytes, known once the body ends
    if (b.total > b.most) {
      b.refused = "HTTP 200 sent more than " + std::to_string(b.most) +
                  " bytes without a size (RemoteOptions::cache_bytes)";
      return 0;
    }
    b.bytes.insert(b.bytes.end(), p, p + len);
    if (b.bytes.size() >= 2 * b.length + (std::size_t{1} << 16)) {
      b.bytes.erase(b.bytes.begin(), b.bytes.end() - static_cast<std::ptrdiff_t>(b.length));
    }
    return size * n;
  }
  if (b.skip > 0) {  // a whole file's bytes before the range: not kept
    const auto drop = static_cast<std::size_t>(std::min<std::uint64_t>(b.skip, len));
    b.skip -= drop;
    p += drop;
    len -= drop;
  }
  const std::uint64_t room = b.want - b.bytes.size();
  if (len > room && t.status == 206) {
    b.refused = "more bytes came than the " + std::to_string(b.want) + " asked";
    return 0;
  }
  const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(room, len));
  b.bytes.insert(b.bytes.end(), p, p + take);
  if (t.status == 200 && (b.skip == 0 || b.want == 0) && b.bytes.size() == b.want) {
    b.cut = true;  // the rest of the whole file is not wanted
    return 0;
  }
  return size * n;
}

}  // namespace

RangeAnswer Downloader::get_range(const std::string& url, std::uint64_t first, std::uint64_t length,
                                  bool from_end) {
  const bool s3 = starts_with_ci(url, "s3://");
  const S3Target s3t = s3 ? s3_target(url) : S3Target{};
  Transfer t;  // its headers only: the body goes to `body`
  t.label_name = url;
  t.label = FileLabel{who_, t.label_name};
  const std::string asked =
      from_end ? "its last " + std::to_string(length) + " bytes" : range_text(first, length);
  const int attempts = options_.retries + 1;
  // A loader that stops ends the wait for its range, not the dataset's reads (ReadStopped).
  struct LoaderStop {
    const std::atomic<bool>*& held;
    explicit LoaderStop(const std::atomic<bool>*& h) : held(h) { held = read_stop(); }
    LoaderStop(const LoaderStop&) = delete;
    LoaderStop& operator=(const LoaderStop&) = delete;
    ~LoaderStop() { held = nullptr; }
    void check() const {
      if (held != nullptr && held->load()) throw ReadStopped();
    }
  } const loader_stop(loader_stop_);
  std::string last;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    if (attempt > 0) backoff(attempt);
    loader_stop.check();
    if (cancelled()) fail(t, "cancelled");
    if (!curl_) curl_.reset(curl_easy_init());
    if (!curl_) throw DataError(t.label.prefix() + "cannot read: curl_easy_init failed");
    CURL* c = curl_.get();
    char errbuf[CURL_ERROR_SIZE] = {};
    Slist headers;
    configure(c, url, s3t, errbuf, headers);
    RangeBody body{
        c, &t, first, length, from_end, 0, 0, {}, false, {}, false, 0, cache_bound(options_)};
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_range_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
    std::string range = from_end ? std::string("-") : std::to_string(first) + "-";
    range += std::to_string(from_end ? length : first + length - 1);
    curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    t.status = 0;
    t.body_started = false;
    t.error_body.clear();
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &t.status);
    loader_stop.check();
    if (cancelled()) fail(t, "cancelled");
    if (!body.refused.empty()) {
      fail(t, asked + ": " + body.refused + " (not retried)");
    }
    const bool done = rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && body.cut);
    if (!done) {
      last = failure_text(rc, t.status, errbuf);
      if (!retryable_curl(rc)) fail(t, asked + ": " + last + " (not retried)");
      continue;
    }
    if (t.status == 416 && t.range_total.value_or(0) == 0 && from_end) {
      RangeAnswer empty;  // an empty file: no last bytes to send
      empty.etag = t.response_etag;
      return empty;
    }
    if (t.status != 200 && t.status != 206) {
      last = "HTTP " + std::to_string(t.status) + error_text(t.error_body);
      if (!retryable_status(t.status)) fail(t, asked + ": " + last + " (not retried)");
      continue;
    }
    if (!t.body_started) start_body(body);  // an empty body
    if (!body.refused.empty()) fail(t, asked + ": " + body.refused + " (not retried)");
    if (body.unsized && from_end) {  // the whole file came: its size, and its last bytes kept
      const std::uint64_t keep = std::min(length, body.total);
      body.bytes.erase(body.bytes.begin(), body.bytes.end() - static_cast<std::ptrdiff_t>(keep));
      body.first = body.total - keep;
      body.want = keep;
    }
    if (body.bytes.size() < body.want || (body.skip > 0 && body.want > 0)) {
      last = "HTTP " + std::to_string(t.status) +
             ", a short body: " + std::to_string(body.bytes.size()) + " of " +
             std::to_string(body.want) + " bytes";
      continue;
    }
    RangeAnswer out;
    if (t.status == 206) {
      out.size = *t.range_total;
    } else if (body.unsized) {
      out.size = body.total;  // from_end: the whole file's; else the bytes up to the cut
      out.size_known = from_end;
    } else {
      out.size = *t.content_length;
    }
    out.etag = t.response_etag;
    out.bytes = std::move(body.bytes);
    return out;
  }
  fail(t, asked + ": " + last + " (after " + std::to_string(attempts) +
              (attempts == 1 ? " try)" : " tries)"));
}

struct RangeReader::Impl {
  std::string url;
  RemoteOptions options;
  std::string who;
  FileLabel label;
  bool local = false;
  FileDescriptor fd;  // file://
  std::uint64_t size = 0;
  std::string etag;
  std::mutex mutex;
  std::vector<std::unique_ptr<Downloader>> idle;  // under mutex: connections not in use
  std::atomic<std::uint64_t> received{0};
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> wait_ns{0};
  std::atomic<bool> cancelled{false};

  std::unique_ptr<Downloader> take() {
    {
      const std::lock_guard lock(mutex);
      if (!idle.empty()) {
        auto d = std::move(idle.back());
        idle.pop_back();
        return d;
      }
    }
    return std::make_unique<Downloader>(options, who, &cancelled);
  }
  void give(std::unique_ptr<Downloader> d) {
    const std::lock_guard lock(mutex);
    idle.push_back(std::move(d));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw DataError(label.prefix() + "cannot read: " + why);
  }

  std::vector<std::byte> pread_at(std::uint64_t offset, std::uint64_t length) {
    std::vector<std::byte> out(static_cast<std::size_t>(length));
    std::size_t got = 0;
    while (got < out.size()) {
      const ssize_t n =
          ::pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail(range_text(offset, length) + ": " + errno_text(errno));
      if (n == 0) {
        fail(range_text(offset, length) + ": the file ends at byte " +
             std::to_string(offset + got) + " (it was " + std::to_string(size) +
             " bytes: it changed)");
      }
      got += static_cast<std::size_t>(n);
    }
    received.fetch_add(length, std::memory_order_relaxed);
    requests.fetch_add(1, std::memory_order_relaxed);
    return out;
  }

  RangeAnswer get(std::uint64_t first, std::uint64_t length, bool from_end) {
    const auto start = std::chrono::steady_clock::now();
    std::unique_ptr<Downloader> d = take();
    RangeAnswer a = d->get_range(url, first, length, from_end);
    give(std::move(d));
    wait_ns.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()),
        std::memory_order_relaxed);
    received.fetch_add(a.bytes.size(), std::memory_order_relaxed);
    requests.fetch_add(1, std::memory_order_relaxed);
    return a;
  }
};

RangeReader::RangeReader(std::string url, const RemoteOptions& options, std::string_view who)
    : impl_(std::make_unique<Impl>()) {
  check_options(options, who);
  Impl& m = *impl_;
  m.url = std::move(url);
  m.options = options;
  m.who = std::string(who);
  m.label = FileLabel{m.who, m.url};
  m.local = starts_with_ci(m.url, "file://");
}

RangeReader::~RangeReader() = default;

std::vector<std::byte> RangeReader::tail(std::uint64_t bytes) {
  Impl& m = *impl_;
  if (m.local) {
    OpenFile file(file_url_path(m.url, m.label), m.label);
    m.size = file.size();
    m.fd = file.take();
    const std::uint64_t n = std::min(bytes, m.size);
    return n == 0 ? std::vector<std::byte>{} : m.pread_at(m.size - n, n);
  }
  RangeAnswer a = m.get(0, bytes, true);
  m.size = a.size;
  m.etag = std::move(a.etag);
  return std::move(a.bytes);
}

std::uint64_t RangeReader::size() const noexcept { return impl_->size; }

std::vector<std::byte> RangeReader::read(std::uint64_t offset, std::uint64_t length) {
  Impl& m = *impl_;
  if (offset > m.size || length > m.size - offset) {
    m.fail(range_text(offset, length) + ": beyond the file's " + std::to_string(m.size) + " bytes");
  }
  if (length == 0) return {};
  if (m.local) return m.pread_at(offset, length);
  RangeAnswer a = m.get(offset, length, false);
  if (a.size_known && a.size != m.size) {
    m.fail(range_text(offset, length) + ": the file changed on the server: " +
           std::to_string(a.size) + " bytes, where it was " + std::to_string(m.size));
  }
  if (!m.etag.empty() && !a.etag.empty() && a.etag != m.etag) {
    m.fail(range_text(offset, length) + ": the file changed on the server: ETag " + a.etag +
           ", where it was " + m.etag);
  }
  return std::move(a.bytes);
}

void RangeReader::cancel() noexcept { impl_->cancelled = true; }

const std::string& RangeReader::url() const noexcept { return impl_->url; }

std::uint64_t RangeReader::bytes_received() const noexcept {
  return impl_->received.load(std::memory_order_relaxed);
}

double RangeReader::wait_seconds() const noexcept {
  return static_cast<double>(impl_->wait_ns.load(std::memory_order_relaxed)) * 1e-9;
}

std::uint64_t RangeReader::requests() const noexcept {
  return impl_->requests.load(std::memory_order_relaxed);
}

}  // namespace ferry::detail::remote
