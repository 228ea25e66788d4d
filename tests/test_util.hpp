#pragma once

// Small helpers shared by ferry's CPU tests.

#include <cstddef>
#include <fstream>
#include <string>

namespace ferry::testing {

/// Bytes of this process's memory locked in RAM (VmLck in /proc/self/status), or 0 when the
/// line is absent.
inline std::size_t locked_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmLck:") {
      std::size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    std::getline(status, key);
  }
  return 0;
}

}  // namespace ferry::testing
