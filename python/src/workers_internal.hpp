#pragma once

// What the files of ProcessPool (workers.hpp) share: the layout of a process's memfd and of the
// pool's control region, and the framing of the messages to ferry/_worker.py. The pool's jobs lie
// in one file each: workers_process.cpp (the processes' life: start, retire, loss, stop),
// workers_protocol.cpp (the messages to and from a process), workers_staging.cpp (give-backs of
// staging slots' pages) and workers_read.cpp (the read path).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace ferry::python {

inline constexpr std::size_t kAlign = 64;
inline constexpr std::size_t kMinScratch = 1U << 20U;
// The control region: a state word (TaskState) per give-back of a slot's pages in flight.
inline constexpr std::size_t kControlWords = 64;  // a bit each in ProcessPool::words_used_
inline constexpr std::size_t kControlBytes = 4096;
static_assert(kControlWords == 64 && kControlWords * sizeof(std::uint64_t) <= kControlBytes);

inline std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

inline void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (unsigned i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8U * i)));
}

/// Whole message, or false when the other side is gone.
bool send_all(int fd, const std::byte* data, std::size_t n);

/// A task message's words before its fields' (2 a field): index, seed, map size, state word,
/// group, token, region.
inline constexpr std::size_t kTaskWords = 7;

/// A task message (Connection framing) at the end of `out`: see ferry/_worker.py.
void append_task(std::vector<std::byte>& out, std::size_t index, std::uint64_t seed,
                 std::size_t map_size, std::size_t state_at, std::size_t group, std::uint64_t token,
                 std::uint64_t region, std::span<const std::size_t> nbytes,
                 std::span<const std::size_t> offsets);

}  // namespace ferry::python
