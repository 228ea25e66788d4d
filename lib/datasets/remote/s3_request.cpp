#include "datasets/remote/s3_request.hpp"

#include <cstdlib>

namespace ferry::detail::remote {

std::string getenv_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  if (v != nullptr && *v != '\0') return v;
  return fallback;
}

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

void sign_s3(CURL* c, const S3Target& s3t, Slist& headers) {
  if (s3t.userpwd.empty()) return;
  const auto add_header = [&](const std::string& h) {
    headers.reset(curl_slist_append(headers.release(), h.c_str()));
  };
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

}  // namespace ferry::detail::remote
