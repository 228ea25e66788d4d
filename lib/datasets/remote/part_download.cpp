#include "datasets/remote/part_download.hpp"

#include <algorithm>

#include "datasets/remote/downloader.hpp"
#include "datasets/remote/s3_request.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

namespace {

std::optional<std::size_t> take(PartDownload& d) {
  const std::lock_guard lock(d.mutex);
  if (d.stop.load() || d.whole.load() || d.next >= d.parts) return std::nullopt;
  ++d.running;
  return d.next++;
}

void settle(PartDownload& d, bool complete) {
  {
    const std::lock_guard lock(d.mutex);
    --d.running;
    if (complete) ++d.done;
  }
  d.settled.notify_all();
}

// The download fails with `e` (the first failure stays): its other parts end.
void fail_download(PartDownload& d, std::exception_ptr e) {
  const std::lock_guard lock(d.mutex);
  if (!d.error) d.error = std::move(e);
  d.stop = true;
}

// The file changed on the server: the download starts over.
void changed(PartDownload& d, const std::string& how) {
  const std::lock_guard lock(d.mutex);
  if (d.change.empty()) d.change = how;
  d.stop = true;
}

// The server's file is not of the size the download was asked for (the size a dataset
// learned at open): not retried.
void other_size(PartDownload& d, std::uint64_t bytes, bool at_least = false) {
  fail_download(
      d, std::make_exception_ptr(DataError(
             d.label.prefix() + "cannot download: the file has " + (at_least ? "more than " : "") +
             std::to_string(bytes) + " bytes on the server, " + std::to_string(d.size) +
             " when the dataset was opened (the file changed on the server: give a "
             "changed file a new name; not retried)")));
}

// Whether a response with `etag` is of the file being downloaded (the first response's ETag).
bool same_file(PartDownload& d, const std::string& etag) {
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

std::size_t on_part_body(char* data, std::size_t size, std::size_t n, void* user) {
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
                  " bytes; asked from " + std::to_string(s.pos) + " of " + std::to_string(d.size) +
                  ")";
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

}  // namespace

// The download in parts of `url`, posted on `board` while its parts are to be had: this thread
// takes them in order, as do the board's others; once none is under way, the file is complete
// (renamed into place), or the first failure is thrown, or, after a change of the file on the
// server, it starts over.
void Downloader::download_parts(const std::string& url, const fs::path& target, std::uint64_t size,
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
                      "during the download (" + d->change + ") (after " + std::to_string(attempts) +
                      (attempts == 1 ? " try)" : " tries)"));
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

// Fetches one part not yet taken of `d`; false when there was none.
bool Downloader::help(PartDownload& d) {
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

// Fetches part `k` of `d` (resuming where a broken transfer stopped, with the retries): true
// once its bytes are written. A failure that the retries do not mend fails `d`; a stop of `d`
// (a failure elsewhere, a change, a cancel, the whole file coming in another transfer) ends it.
bool Downloader::fetch_part(PartDownload& d, std::size_t k) {
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
      fail_download(d, std::make_exception_ptr(
                           DataError(d.label.prefix() + "cannot download: curl_easy_init failed")));
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
      last = failure_text(rc, h.status, errbuf);
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
  fail_download(d, std::make_exception_ptr(DataError(d.label.prefix() + "cannot download: " + last +
                                                     " (after " + std::to_string(attempts) +
                                                     (attempts == 1 ? " try)" : " tries)"))));
  return false;
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

}  // namespace ferry::detail::remote
