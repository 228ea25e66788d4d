#pragma once

// The memory a process may use, for the default memory budget (default_memory_budget()): the
// machine's physical memory, or the memory limit of the process's cgroups where that is lower
// (a container's, a systemd slice's, a batch scheduler's job).

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace ferry::detail {

/// The lowest memory limit set on the cgroups named by `cgroups` (the text of
/// /proc/self/cgroup) or on any cgroup above them, read under `root` (where the cgroup file
/// systems are mounted, /sys/fs/cgroup): memory.max of the unified hierarchy (v2, the "0::"
/// line), memory.limit_in_bytes of the memory controller's (v1). 0 when none is set ("max", or
/// v1's value for none) or none can be read.
std::uint64_t cgroup_memory_limit(std::string_view cgroups, const std::filesystem::path& root);

/// The physical memory, or the process's cgroup limit where lower (0 when neither is known).
std::uint64_t process_memory_limit() noexcept;

}  // namespace ferry::detail
