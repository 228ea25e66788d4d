#pragma once

// One epoch in flight: its planner thread, its copy stage, and the consumer's side (next()).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "ferry/loader.hpp"
#include "pipeline/copy_stage.hpp"
#include "pipeline/loader_impl.hpp"

namespace ferry::detail {

class EpochRun {
 public:
  /// Starts the planner and the copy stage. \throws Error when a thread cannot start (whatever
  /// did start is stopped again and the ring is whole).
  EpochRun(std::shared_ptr<LoaderImpl> impl, std::uint64_t epoch, std::size_t start,
           std::uint64_t position = 0);
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;
  ~EpochRun();

  /// The next batch in order, or nullptr after the last (see Epoch::next).
  const Batch* next();
  /// next() waiting for data until `deadline`: false when it passed first (see Epoch::try_next).
  bool next_until(Clock::time_point deadline, const Batch*& batch);
  std::size_t size() const noexcept { return run_.end - run_.start; }
  /// Stops the run from another thread; next() then throws (see Epoch::cancel).
  void cancel() noexcept;

 private:
  void shutdown() noexcept;
  void release_current();
  [[noreturn]] void fail_epoch(std::exception_ptr error);
  void finish_stats() noexcept;

  RunState run_;
  std::unique_ptr<CopyStage> stage_;
  std::size_t next_;  // the batch the consumer receives next
  Batch current_;
  std::vector<std::uint64_t> source_counts_;  // a batch's samples per source, before the atomics
  bool over_ = false;
  bool slice_timed_out_ = false;  // a timed take() of this batch ran out before it came
  bool shut_down_ = false;
  bool first_ = true;
  std::atomic<bool> cancelled_{false};
  Clock::time_point started_;
  std::thread planner_;
};

}  // namespace ferry::detail
