#pragma once

// Autotune (LoaderOptions::autotune): workers and staging slots in use, chosen while the loader
// runs, within LoaderOptions::memory_budget.
//
// Who tunes: the planner thread, once per window of delivered batches, before it takes its next
// slot. It is the only thread that makes slots or changes the worker count, so each check of the
// budget and the allocation it allows happen on one thread, in that order: the loader's memory
// never exceeds the budget, not even between the two. The consumer's side only adds to the
// counters it reads (consumer wait, batches delivered); the workers add their read time.
//
// Workers: a oneTBB arena's concurrency cannot change while it holds work, and a TBB worker must
// never block on a semaphore, so each worker count n has its own arena of concurrency n (made
// when first chosen; an arena owns no threads, it only bounds how many of oneTBB's pool join
// it). Each batch's fill goes to the arena of the count chosen when it was planned: a change
// applies from the next batch, while batches already in flight finish in theirs.
// Slots: BufferRing::set_limit; slots are made lazily, on the planner, after a budget check.

#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ferry/loader.hpp"
#include "pipeline/ring.hpp"

namespace ferry::detail {

struct LoaderImpl;

/// A raise being tried (see tuning_step): kept when the rate after beats the rate before.
struct Trial {
  bool active = false;
  bool worker = false;         // a worker more; else more slots
  int workers = 0, slots = 0;  // the setting before, restored when undone
  double base_rate = 0;        // batches/s before
  int windows = 0;             // windows measured since
  double batches = 0, seconds = 0;
  /// Per kind of raise: from which window it may be tried again, and the wait after a failure.
  struct Kind {
    std::uint64_t blocked_until = 0;
    std::uint64_t backoff = 8;
  };
};

/// The counters a window is measured by, as read at one moment (the others only add to them).
struct TuningCounters {
  std::uint64_t batches = 0, wait_ns = 0, read_ns = 0, inside_ns = 0;
  /// What has been added since `earlier`.
  TuningCounters operator-(const TuningCounters& earlier) const noexcept {
    return {batches - earlier.batches, wait_ns - earlier.wait_ns, read_ns - earlier.read_ns,
            inside_ns - earlier.inside_ns};
  }
  TuningCounters& operator+=(const TuningCounters& more) noexcept {
    batches += more.batches;
    wait_ns += more.wait_ns;
    read_ns += more.read_ns;
    inside_ns += more.inside_ns;
    return *this;
  }
};

struct Tuning {
  bool enabled = false;
  std::uint64_t budget = 0;              // 0: none
  std::uint64_t slot_bytes = 0;          // each staging slot
  std::uint64_t device_bytes = 0;        // every device buffer together
  std::uint64_t scratch_per_worker = 0;  // the estimate: one sample's bytes
  std::uint64_t reader_bytes = 0;        // Dataset::reader_memory (worker processes' windows)
  int max_workers = 1;

  std::atomic<int> workers{1};       // in use now
  std::atomic<int> workers_high{1};  // the most ever in use (their threads keep scratch)
  // Slots in use are not lowered below a depth the consumer was seen waiting at (planner only):
  // giving back a slot that was needed would only make it wait again.
  int slots_floor = 2;
  // The same for workers: not lowered below a count the consumer was seen waiting with.
  int workers_floor = 1;
  // Windows in a row in which the consumer waited: slots are added only from the second, so
  // that one stall of the machine does not leave a deeper floor behind (planner only).
  int waiting_windows = 0;
  // Raises on trial and the rate of the setting in use (planner only).
  Trial trial;
  Trial::Kind worker_kind, slot_kind;
  std::uint64_t window_count = 0;
  double settled_batches = 0, settled_seconds = 0;  // since the setting last changed
  // Windows in a row in which the consumer never waited: each kFloorWindows of them lower the
  // floors by one, so that a consumer that became the bottleneck gets memory back.
  int idle_windows = 0;

  /// The loader's memory with `slots` slots made and `workers` workers' scratch.
  std::uint64_t bytes(std::uint64_t slots_made, std::uint64_t worker_count) const noexcept {
    return slots_made * slot_bytes + device_bytes + worker_count * scratch_per_worker +
           reader_bytes;
  }
  bool fits(std::uint64_t slots_made, std::uint64_t worker_count) const noexcept {
    return budget == 0 || bytes(slots_made, worker_count) <= budget;
  }

  // The planner's window (planner thread only, and the epoch's end after it is joined). A
  // window spans runs: the end of a run pauses it and the next run's first batch resumes it, its
  // start shifted by what passed in between (time, batches, waits, reads), so that epochs shorter
  // than a window are measured too, without the gap between runs or a run's start-up.
  bool run_open = false;       // between tuning_begin and tuning_end
  bool window_open = false;    // a window is being measured
  bool window_paused = false;  // a window was open when the last run ended
  Clock::time_point window_start;
  TuningCounters window;  // the counters at the window's start
  Clock::time_point paused_at;
  TuningCounters paused;                // the counters when the window was paused
  std::uint64_t run_start_batches = 0;  // batches delivered when the run began
  // Worker capacity (stats' worker_capacity_seconds): worker-nanoseconds of the runs so far,
  // counted from capacity_start, on a clock of its own (the window's start moves).
  Clock::time_point capacity_start;
  std::atomic<std::uint64_t> capacity_ns{0};

  std::vector<std::unique_ptr<tbb::task_arena>> arenas;  // [n]: concurrency n (planner only)

  mutable std::mutex decisions_mutex;
  std::deque<AutotuneDecision> decisions;  // the last kKeptDecisions
  static constexpr std::size_t kKeptDecisions = 64;
};

/// Opens the tuning window of a run's planner (its start).
void tuning_begin(LoaderImpl& impl) noexcept;
/// Once a window of batches has been delivered: measures it and changes workers or slots in
/// use. Planner thread only.
void tuning_step(LoaderImpl& impl);
/// The epoch's end (its planner joined): the open window's worker time joins the stats.
void tuning_end(LoaderImpl& impl) noexcept;
/// Whether the budget allows one more slot now (planner thread only).
bool tuning_may_make_slot(const LoaderImpl& impl) noexcept;
/// The arena the planner's next fill goes to, and the worker count it runs with.
tbb::task_arena& fill_arena(LoaderImpl& impl, int& workers);
/// The loader's memory now.
std::uint64_t memory_now(const LoaderImpl& impl) noexcept;

}  // namespace ferry::detail
