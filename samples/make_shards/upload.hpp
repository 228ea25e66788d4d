// samples/make_shards/upload.hpp: files PUT to S3 (or any S3-compatible server) with libcurl,
// signed with its SigV4 support (CURLOPT_AWS_SIGV4), configured as ferry's reader is: the
// endpoint from $AWS_ENDPOINT_URL (path style: <endpoint>/<bucket>/<key>), else AWS's for
// $AWS_REGION (default us-east-1); credentials from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY
// and $AWS_SESSION_TOKEN. Copy it along with main.cpp (link libcurl 7.75 or later).

#pragma once

#include <curl/curl.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace make_shards {

namespace detail {

inline std::string env_or(const char* name, std::string fallback = {}) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::string(v) : fallback;
}

// The text of an S3 error body's <tag>, or empty.
inline std::string xml_text(const std::string& body, const std::string& tag) {
  const std::size_t start = body.find("<" + tag + ">");
  if (start == std::string::npos) return {};
  const std::size_t from = start + tag.size() + 2;
  const std::size_t end = body.find("</" + tag + ">", from);
  return end == std::string::npos ? std::string() : body.substr(from, end - from);
}

}  // namespace detail

/// Splits "s3://bucket/some/prefix" into the bucket and the key prefix ("some/prefix", no
/// slash at either end). \throws std::invalid_argument for another scheme or no bucket.
inline std::pair<std::string, std::string> split_s3(std::string_view url) {
  if (url.substr(0, 5) != "s3://" || url.size() == 5 || url[5] == '/') {
    throw std::invalid_argument("--upload wants s3://bucket[/prefix], not '" + std::string(url) +
                                "'");
  }
  url.remove_prefix(5);
  const std::size_t slash = url.find('/');
  std::string bucket(url.substr(0, slash));
  std::string prefix(slash == std::string_view::npos ? "" : url.substr(slash + 1));
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {bucket, prefix};
}

/// PUTs `file` as s3://<bucket>/<key>. \throws std::runtime_error naming the URL, the HTTP
/// status and S3's error code and message (a wrong secret: 403 SignatureDoesNotMatch), or
/// curl's text when the server cannot be reached.
inline void upload(const std::filesystem::path& file, const std::string& bucket,
                   const std::string& key) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  const std::string s3_url = "s3://" + bucket + "/" + key;
  if (init != CURLE_OK) throw std::runtime_error(s3_url + ": curl_global_init failed");
  const std::string region =
      detail::env_or("AWS_REGION", detail::env_or("AWS_DEFAULT_REGION", "us-east-1"));
  std::string endpoint = detail::env_or("AWS_ENDPOINT_URL");
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  const std::string url = endpoint.empty()
                              ? "https://" + bucket + ".s3." + region + ".amazonaws.com/" + key
                              : endpoint + "/" + bucket + "/" + key;
  const std::string id = detail::env_or("AWS_ACCESS_KEY_ID");
  if (id.empty()) throw std::runtime_error(s3_url + ": $AWS_ACCESS_KEY_ID is not set");
  const std::string userpwd = id + ":" + detail::env_or("AWS_SECRET_ACCESS_KEY");
  const std::string token = detail::env_or("AWS_SESSION_TOKEN");

  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(file.c_str(), "rb"),
                                                           &std::fclose);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  const auto file_size = static_cast<curl_off_t>(std::filesystem::file_size(file));
  const std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) throw std::runtime_error(s3_url + ": curl_easy_init failed");
  CURL* c = curl.get();
  curl_slist* raw_headers = nullptr;
  // The body is not hashed (S3 takes that when it is said); the headers are signed.
  raw_headers = curl_slist_append(raw_headers, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!token.empty()) {
    raw_headers = curl_slist_append(raw_headers, ("x-amz-security-token: " + token).c_str());
  }
  const std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(raw_headers,
                                                                   &curl_slist_free_all);
  std::string body;  // the response's: S3's error, when there is one
  const auto on_body = +[](char* data, std::size_t size, std::size_t n, void* user) {
    auto& out = *static_cast<std::string*>(user);
    if (out.size() < 65536) out.append(data, size * n);
    return size * n;
  };
  const std::string sigv4 = "aws:amz:" + region + ":s3";
  char errbuf[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);  // PUT
  curl_easy_setopt(c, CURLOPT_READDATA, in.get());
  curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, file_size);
  curl_easy_setopt(c, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  // no progress for 60 s: give up
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
  const CURLcode rc = curl_easy_perform(c);
  if (rc != CURLE_OK) {
    throw std::runtime_error(s3_url + ": cannot upload " + file.string() +
                             ": curl: " + (errbuf[0] != '\0' ? errbuf : curl_easy_strerror(rc)));
  }
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) {
    const std::string code = detail::xml_text(body, "Code");
    const std::string message = detail::xml_text(body, "Message");
    throw std::runtime_error(s3_url + ": cannot upload " + file.string() + ": HTTP " +
                             std::to_string(status) + (code.empty() ? "" : " " + code) +
                             (message.empty() ? "" : ": " + message));
  }
}

}  // namespace make_shards
