#include "ferry/limits.hpp"

#include <unistd.h>

#include <limits>

#include "core/checked.hpp"

namespace ferry {

std::uint64_t default_decompressed_limit() noexcept {
  constexpr std::uint64_t kFallback = std::uint64_t{4} << 30;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return kFallback;
  const auto bytes = detail::try_mul<std::uint64_t>(pages, page_size);
  return bytes ? *bytes / 2 : std::numeric_limits<std::uint64_t>::max() / 2;
}

}  // namespace ferry
