#pragma once

// Small helpers shared by ferry's CPU tests.

#include <cstddef>
#include <fstream>
#include <string>

namespace ferry::testing {

/// True in the tsan preset. ThreadSanitizer runs a test 5-15 times slower than release, and
/// what it looks for (races, lock order) shows in the first rounds of a soak or sweep, not the
/// thousandth: the longest of them run fewer rounds there (scaled_for_tsan), every one of them
/// still runs, and release runs them whole.
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif

/// n, or n / divisor (at least 1) where `under` holds.
template <typename T>
constexpr T scaled_if(bool under, T n, T divisor) {
  if (!under) return n;
  return n / divisor > 0 ? n / divisor : T{1};
}

/// n, or n / divisor (at least 1) under TSan.
template <typename T>
constexpr T scaled_for_tsan(T n, T divisor) {
  return scaled_if(kUnderTsan, n, divisor);
}

/// True in the asan preset. ASan's cost is mostly its allocator (fresh pages for every block it
/// holds in quarantine); the allocation-heavy sweeps and soaks run about half their rounds there
/// (scaled_for_asan), which still reach every path many times over.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAsan = true;
#else
inline constexpr bool kUnderAsan = false;
#endif

/// n, or n / divisor (at least 1) under ASan.
template <typename T>
constexpr T scaled_for_asan(T n, T divisor) {
  return scaled_if(kUnderAsan, n, divisor);
}

/// A line of /proc/self/status in bytes ("VmLck:", "VmRSS:", "VmHWM:"), or 0 when it is absent.
inline std::size_t status_bytes(const std::string& line) {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == line) {
      std::size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  return 0;
}

/// Bytes of this process's memory locked in RAM (VmLck), or 0 when the line is absent.
inline std::size_t locked_bytes() { return status_bytes("VmLck:"); }

/// This process's resident set now (VmRSS), or 0 when the line is absent.
inline std::size_t resident_bytes() { return status_bytes("VmRSS:"); }

}  // namespace ferry::testing
