#pragma once

// Allocations sized by a user's option (an epoch's list, a batch's staging, a planning window):
// checked against the machine's memory before they are made, so that an option too large for
// the machine is a ConfigError naming the option and what it would need, never std::bad_alloc.

#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "ferry/error.hpp"

namespace ferry::detail {

/// The machine's physical memory in bytes (sysconf), or UINT64_MAX where it cannot be read.
std::uint64_t physical_memory() noexcept;

/// `what` (the option and its value, e.g. "Mixture: epoch_size 1000") would need `count` x
/// `each` bytes `for_what`: ConfigError saying so when that is more than the machine's memory
/// (or does not fit 64 bits).
void check_need(const std::string& what, std::uint64_t count, std::uint64_t each,
                const std::string& for_what);

/// f(), after check_need(); a std::bad_alloc or std::length_error from it becomes the same
/// ConfigError (the memory was there, but not free).
template <class F>
decltype(auto) allocating(const std::string& what, std::uint64_t count, std::uint64_t each,
                          const std::string& for_what, F&& f) {
  check_need(what, count, each, for_what);
  try {
    return std::forward<F>(f)();
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  throw ConfigError(what + " would need " + std::to_string(count) + " x " + std::to_string(each) +
                    " bytes " + for_what + ", which could not be allocated");
}

}  // namespace ferry::detail
