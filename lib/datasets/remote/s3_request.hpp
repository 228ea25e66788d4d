#pragma once

// s3:// URLs: where a request for one goes (path style at $AWS_ENDPOINT_URL, else AWS's
// endpoint for $AWS_REGION) and how curl signs it (SigV4 from $AWS_ACCESS_KEY_ID,
// $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN; anonymous without a key).

#include <curl/curl.h>

#include <string>
#include <string_view>

#include "datasets/remote/curl_transfer.hpp"

namespace ferry::detail::remote {

/// The environment variable `name`, or `fallback` when it is unset or empty.
std::string getenv_or(const char* name, std::string fallback = {});

/// The URL curl asks, and how it signs the request, for an s3:// URL.
struct S3Target {
  std::string url;
  std::string region;
  std::string userpwd;  ///< "<key id>:<secret>"; empty: anonymous
  std::string token;
};

/// Where `url` (an s3:// URL) goes, from the environment.
S3Target s3_target(std::string_view url);

/// Has `c` sign its request for `s3t` (nothing for an anonymous one); the headers it needs are
/// appended to `headers`.
void sign_s3(CURL* c, const S3Target& s3t, Slist& headers);

}  // namespace ferry::detail::remote
