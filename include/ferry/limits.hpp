#pragma once

/// \file Ceilings on what a hostile input may cost.

#include <cstdint>

#include "ferry/export.hpp"

namespace ferry {

/// The most bytes one compressed input file may decompress to when its dataset's option
/// (CsvOptions::max_decompressed_bytes, IdxOptions::max_decompressed_bytes) is 0: half the
/// machine's physical memory (sysconf's _SC_PHYS_PAGES x _SC_PAGESIZE / 2), or 4 GiB where
/// that cannot be read. A file that would decompress to more raises DataError naming the file
/// and the limit, before it takes more memory than that. Any thread may call it.
FERRY_API std::uint64_t default_decompressed_limit() noexcept;

namespace detail {

/// `option`, or default_decompressed_limit() when it is 0.
inline std::uint64_t decompressed_limit(std::uint64_t option) noexcept {
  return option != 0 ? option : default_decompressed_limit();
}

}  // namespace detail
}  // namespace ferry
