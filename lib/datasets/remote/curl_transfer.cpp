#include "datasets/remote/curl_transfer.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <system_error>

#include "ferry/error.hpp"

namespace ferry::detail::remote {

namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return std::string(s);
}

}  // namespace

bool starts_with_ci(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

void Transfer::new_writer() {
  writer.reset();
  writer.emplace(target, label);
  got = 0;
  etag.clear();
  total.reset();
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  if (starts_with_ci(line, "http/")) {  // a new response (after a redirect too)
    t.content_length.reset();
    t.range_start.reset();
    t.range_total.reset();
    t.response_etag.clear();
    t.body_started = false;
    // "HTTP/1.1 200 OK": the status, for the check at the headers' end.
    const std::size_t sp = line.find(' ');
    t.header_status =
        sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
  } else if (trim(line).empty()) {  // the headers' end: an answer larger than the file may be
    // is refused before its body (which may never come, or come slowly).
    const std::optional<std::uint64_t> announced =
        t.header_status == 200 ? t.content_length
                               : (t.header_status == 206 ? t.range_total : std::nullopt);
    if (announced && *announced > t.limit) {
      t.status = t.header_status;
      t.error = over_limit(t, *announced, false);
      return 0;
    }
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

std::exception_ptr over_limit(const Transfer& t, std::uint64_t bytes, bool came) {
  const std::string size = std::to_string(t.limit) + " bytes";
  const std::string bound = t.limit_is_size
                                ? "the file's known size of " + size
                                : "the cache's room of " + size + " (RemoteOptions::cache_bytes)";
  const std::string answer =
      came ? "more than " + std::to_string(bytes) + " bytes came"
           : (t.status == 206 ? "Content-Range total " : "Content-Length ") + std::to_string(bytes);
  return std::make_exception_ptr(DataError(t.label.prefix() + "cannot download: the answer (" +
                                           answer + ") is larger than " + bound + "; not retried"));
}

void keep_error_body(Transfer& t, const char* data, std::size_t n) {
  constexpr std::size_t kMost = 4096;
  if (t.error_body.size() < kMost)
    t.error_body.append(data, std::min(n, kMost - t.error_body.size()));
}

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

namespace {

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto& t = *static_cast<Transfer*>(user);
  try {
    if (!t.body_started) {
      t.body_started = true;
      t.discard = false;
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
        if (t.range_total && *t.range_total > t.limit) {
          t.error = over_limit(t, *t.range_total, false);
          return 0;
        }
        t.total = t.range_total;
      } else {  // 200: the whole file, from its first byte
        if (t.content_length && *t.content_length > t.limit) {
          t.error = over_limit(t, *t.content_length, false);
          return 0;
        }
        if (t.got > 0 || !t.writer) t.new_writer();
        t.total = t.content_length;
        t.etag = t.response_etag;
      }
    }
    if (t.discard) {
      keep_error_body(t, data, size * n);
      return size * n;
    }
    if (size * n > t.limit - t.got) {  // no Content-Length, or a server that sends more than it
      t.error = over_limit(t, t.limit, true);
      return 0;
    }
    t.writer->write({reinterpret_cast<const std::byte*>(data), size * n});
    t.got += size * n;
    return size * n;
  } catch (...) {
    t.error = std::current_exception();
    return 0;
  }
}

}  // namespace

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
}  // namespace ferry::detail::remote
