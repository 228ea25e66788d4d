// samples/common/cli.hpp: what the samples' command lines share: a clock, flag values parsed
// strictly, and a progress bar. Copy it along with the sample that uses it.

#pragma once

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace common {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A flag's value as a non-negative integer; "12x" or "-1" are errors, not 12 or a huge number.
inline std::uint64_t parse_number(const std::string& flag, const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) {
    throw std::invalid_argument(flag + " wants a non-negative integer, not '" + text + "'");
  }
  return value;
}

// A flag's value as a real number ("0.001", "1e-3").
inline double parse_real(const std::string& flag, const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) {
    throw std::invalid_argument(flag + " wants a number, not '" + text + "'");
  }
  return value;
}

// "a,b,,c" as {"a", "b", "c"}: a flag's list of names.
inline std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> names;
  while (!text.empty()) {
    const std::size_t comma = std::min(text.find(','), text.size());
    if (comma != 0) names.emplace_back(text.substr(0, comma));
    text.remove_prefix(std::min(comma + 1, text.size()));
  }
  return names;
}

// An updating progress bar on stderr: "\r" returns to the start of the line each time.
inline void show_progress(std::size_t epoch, std::size_t epochs, std::size_t done,
                          std::size_t total, double mean_loss) {
  constexpr std::size_t kWidth = 30;
  const std::size_t filled = total == 0 ? kWidth : done * kWidth / total;
  std::fprintf(stderr, "\repoch %zu/%zu [%s%s] %zu/%zu batches, loss %.4f", epoch, epochs,
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done,
               total, mean_loss);
  std::fflush(stderr);
}

}  // namespace common
