#pragma once

// Host synchronizations, counted: every place where ferry blocks a host thread until device
// work finishes (a CUDA event or stream, a synchronous copy, cudaFree, or an event of the host
// copy engine) calls note_host_sync() first, and only when the work was not done already; an
// asynchronous copy to or from pageable memory (which CUDA stages before it returns) always. The
// count is process-wide (ferry::host_sync_count()) and, while a SyncScope is open on the thread,
// booked to that scope's counter too: a loader books its consumer's and its threads' waits.

#include <atomic>
#include <cstdint>

namespace ferry::detail {

/// Books one host synchronization made by the calling thread.
void note_host_sync() noexcept;

/// While alive, the calling thread's host synchronizations are also booked to `counter`
/// (nullptr: to none). Scopes nest; the innermost one counts.
class SyncScope {
 public:
  explicit SyncScope(std::atomic<std::uint64_t>* counter) noexcept;
  SyncScope(const SyncScope&) = delete;
  SyncScope& operator=(const SyncScope&) = delete;
  ~SyncScope();

 private:
  std::atomic<std::uint64_t>* previous_;
  bool previous_counts_;
};

/// While alive, waits on the calling thread are not host synchronizations: the host copy
/// engine's thread and its consumer's stream waits stand in for waits a GPU does on a stream.
class StreamSideWait {
 public:
  StreamSideWait() noexcept;
  StreamSideWait(const StreamSideWait&) = delete;
  StreamSideWait& operator=(const StreamSideWait&) = delete;
  ~StreamSideWait();

 private:
  bool previous_;
};

}  // namespace ferry::detail
