#include "pipeline/memory_limit.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace ferry::detail {

namespace {

namespace fs = std::filesystem;

// v1 writes a value near 2^63 for "no limit"; no machine has a quarter of that.
constexpr std::uint64_t kNoLimit = std::uint64_t{1} << 62;

// Keeps the lower of two limits, 0 being none.
void take_lower(std::uint64_t& lowest, std::uint64_t limit) noexcept {
  if (limit > 0 && (lowest == 0 || limit < lowest)) lowest = limit;
}

// A limit file's value: bytes, or 0 for "max", v1's "none", or anything unreadable.
std::uint64_t read_limit(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!std::getline(in, text)) return 0;
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  if (text.empty() || text.size() > 19) return 0;
  std::uint64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return 0;
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value >= kNoLimit ? 0 : value;
}

// The lowest limit in `file_name` of the cgroup at `path` under `mount` and of those above it.
std::uint64_t lowest_up_the_tree(const fs::path& mount, std::string_view path,
                                 const char* file_name) {
  std::uint64_t lowest = 0;
  fs::path at = fs::path(std::string(path)).relative_path();
  while (true) {
    take_lower(lowest, read_limit(mount / at / file_name));
    if (at.empty()) break;
    at = at.parent_path();
  }
  return lowest;
}

}  // namespace

std::uint64_t cgroup_memory_limit(std::string_view cgroups, const fs::path& root) {
  std::uint64_t lowest = 0;
  // Lines "hierarchy-id:controllers:path"; v2's is "0::path".
  while (!cgroups.empty()) {
    const std::size_t end = cgroups.find('\n');
    const std::string_view line = cgroups.substr(0, end);
    cgroups = end == std::string_view::npos ? std::string_view{} : cgroups.substr(end + 1);
    const std::size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const std::size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) {
      take_lower(lowest, lowest_up_the_tree(root, path, "memory.max"));
      continue;
    }
    // A v1 hierarchy with the memory controller, alone or among others ("cpu,memory").
    std::string_view rest = controllers;
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      if (rest.substr(0, comma) == "memory") {
        take_lower(lowest, lowest_up_the_tree(root / std::string(controllers), path,
                                              "memory.limit_in_bytes"));
        break;
      }
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
  }
  return lowest;
}

std::uint64_t process_memory_limit() noexcept {
  std::uint64_t memory = 0;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    memory = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  }
  try {
    std::ifstream in("/proc/self/cgroup");
    std::string text;
    for (std::string line; std::getline(in, line);) text += line + '\n';
    take_lower(memory, cgroup_memory_limit(text, "/sys/fs/cgroup"));
  } catch (...) {  // NOLINT(bugprone-empty-catch): no cgroup limit known, the physical memory
  }
  return memory;
}

}  // namespace ferry::detail
