#include "core/memory_need.hpp"

#include <unistd.h>

#include <limits>

#include "core/checked.hpp"

namespace ferry::detail {

std::uint64_t physical_memory() noexcept {
  static const std::uint64_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::uint64_t>::max();
    return try_mul<std::uint64_t>(pages, page_size)
        .value_or(std::numeric_limits<std::uint64_t>::max());
  }();
  return bytes;
}

void check_need(const std::string& what, std::uint64_t count, std::uint64_t each,
                const std::string& for_what) {
  const auto bytes = try_mul<std::uint64_t>(count, each);
  const std::uint64_t memory = physical_memory();
  if (bytes && *bytes <= memory) return;
  throw ConfigError(
      what + " would need " +
      (bytes ? std::to_string(*bytes) : std::to_string(count) + " x " + std::to_string(each)) +
      " bytes " + for_what + ", more than this machine's memory (" + std::to_string(memory) +
      " bytes)");
}

}  // namespace ferry::detail
