#pragma once

// What one libcurl transfer of a file shares with its callbacks: the response's headers as they
// come (status, lengths, range, ETag), the temporary file the body goes to, and what an error
// response says; and which failures are worth another try.

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "datasets/common/atomic_file.hpp"
#include "datasets/common/file_io.hpp"

namespace ferry::detail::remote {

/// Whether `s` starts with `prefix` (lower case), whatever the case of `s`.
bool starts_with_ci(std::string_view s, std::string_view prefix);

/// curl_global_init, once per process.
void global_init();

struct CurlDeleter {
  void operator()(CURL* c) const noexcept { curl_easy_cleanup(c); }
};
using Curl = std::unique_ptr<CURL, CurlDeleter>;
struct SlistDeleter {
  void operator()(curl_slist* s) const noexcept { curl_slist_free_all(s); }
};
using Slist = std::unique_ptr<curl_slist, SlistDeleter>;

/// The state of one file's transfer across its attempts.
struct Transfer {
  std::filesystem::path target;
  std::string label_name;  ///< the URL, for messages
  FileLabel label;
  std::optional<AtomicFileWriter> writer;
  std::uint64_t got = 0;               ///< bytes written to the temporary file
  std::optional<std::uint64_t> total;  ///< the file's size, once a response told it
  std::string etag;                    ///< of the file being written
  /// The most bytes the file may have: its known size, or, where none is known, the cache's
  /// room. An answer larger (its Content-Length or Content-Range, or the bytes that came) is
  /// refused at once, not retried (`error`).
  std::uint64_t limit = ~std::uint64_t{0};
  bool limit_is_size = false;  ///< `limit` is the file's known size (else the cache's room)
  // This response's headers.
  long status = 0;
  long header_status = 0;  ///< the status line's, as the headers come
  std::optional<std::uint64_t> content_length;
  std::optional<std::uint64_t> range_start, range_total;
  std::string response_etag;
  bool body_started = false;
  bool discard = false;    ///< an error response's body
  std::string error_body;  ///< its first bytes (S3 says why in XML)
  std::exception_ptr error;

  void new_writer();
};

/// CURLOPT_HEADERFUNCTION, its data a Transfer: records the headers of each response.
std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user);

/// The DataError of an answer of `bytes` (or, `came`, more than `bytes` came) larger than
/// t.limit, naming the URL and both sizes.
std::exception_ptr over_limit(const Transfer& t, std::uint64_t bytes, bool came);

/// Keeps the first bytes of an error response's body in t.error_body.
void keep_error_body(Transfer& t, const char* data, std::size_t n);

/// What a failed response says: " <Code>: <Message>" of S3's XML error, or nothing.
std::string error_text(const std::string& body);

/// Curl fills in the response code only once headers are done: the body callback asks it.
struct StatusHook {
  CURL* curl;
  Transfer* t;
};
/// CURLOPT_WRITEFUNCTION of a whole file's transfer, its data a StatusHook: writes the body of a
/// 200 (from its start) or of a 206 that continues where the file stands.
std::size_t on_body_hooked(char* data, std::size_t size, std::size_t n, void* user);

/// HTTP 408/429/500/502/503/504.
bool retryable_status(long s);
/// Whether another try may mend a failure of curl.
bool retryable_curl(CURLcode rc);

}  // namespace ferry::detail::remote
