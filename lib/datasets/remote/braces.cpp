// expand_braces: webdataset's brace notation, "{0000..0003}" ranges and "{a,b}" lists.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/remote.hpp"

namespace ferry {
namespace {

constexpr std::size_t kMaxNames = 1'000'000;

[[noreturn]] void malformed(std::string_view pattern, const std::string& why) {
  throw ConfigError("expand_braces: \"" + std::string(pattern) + "\": " + why);
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The names one group's text ("a,b" or "0000..0003") stands for.
std::vector<std::string> group_names(std::string_view pattern, std::string_view body) {
  if (body.empty()) malformed(pattern, "an empty group {}");
  std::vector<std::string> names;
  if (body.find(',') != std::string_view::npos) {
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = body.find(',', start);
      const std::string_view item = body.substr(start, comma - start);
      if (item.empty()) malformed(pattern, "an empty item in the list {" + std::string(body) + "}");
      names.emplace_back(item);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    return names;
  }
  const std::size_t dots = body.find("..");
  if (dots == std::string_view::npos) {
    malformed(pattern, "the group {" + std::string(body) +
                           "} is neither a list {a,b} nor a range {first..last}");
  }
  const std::string_view lo = body.substr(0, dots);
  const std::string_view hi = body.substr(dots + 2);
  if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18) {
    malformed(pattern, "the range {" + std::string(body) +
                           "} is not of two decimal numbers of at most 18 digits");
  }
  const std::uint64_t first = std::stoull(std::string(lo));
  const std::uint64_t last = std::stoull(std::string(hi));
  if (last < first) malformed(pattern, "the range {" + std::string(body) + "} is reversed");
  if (last - first >= kMaxNames) {
    malformed(pattern, "the range {" + std::string(body) + "} has more than " +
                           std::to_string(kMaxNames) + " names");
  }
  // A bound written with a leading zero fixes the width (webdataset's rule: the first's).
  const std::size_t width = lo.size() > 1 && lo[0] == '0' ? lo.size() : 0;
  for (std::uint64_t v = first;; ++v) {
    std::string s = std::to_string(v);
    if (s.size() < width) s.insert(0, width - s.size(), '0');
    names.push_back(std::move(s));
    if (v == last) break;
  }
  return names;
}

}  // namespace

std::vector<std::string> expand_braces(std::string_view pattern) {
  std::vector<std::string> out{""};
  std::size_t i = 0;
  while (i < pattern.size()) {
    const std::size_t open = pattern.find_first_of("{}", i);
    const std::string_view literal = pattern.substr(i, open - i);
    for (std::string& s : out) s += literal;
    if (open == std::string_view::npos) break;
    if (pattern[open] == '}') malformed(pattern, "a '}' without its '{'");
    const std::size_t close = pattern.find_first_of("{}", open + 1);
    if (close == std::string_view::npos) malformed(pattern, "a '{' without its '}'");
    if (pattern[close] == '{') malformed(pattern, "nested braces");
    const std::vector<std::string> names =
        group_names(pattern, pattern.substr(open + 1, close - open - 1));
    if (out.size() > kMaxNames / names.size()) {
      malformed(pattern, "more than " + std::to_string(kMaxNames) + " names");
    }
    std::vector<std::string> next;
    next.reserve(out.size() * names.size());
    for (const std::string& prefix : out) {
      for (const std::string& name : names) next.push_back(prefix + name);
    }
    out = std::move(next);
    i = close + 1;
  }
  return out;
}

}  // namespace ferry
