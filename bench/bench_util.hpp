// Small measurements the benchmarks share: wall time since a point, and this process's
// resident memory (its peak, and now).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

namespace ferry::bench {

/// Seconds since `t` on the steady clock.
inline double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

/// The process's peak resident memory so far, in MiB (getrusage's ru_maxrss).
inline double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

/// The process's resident memory now, in MiB (/proc/self/statm).
inline double rss_mib() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace ferry::bench
