#pragma once

// What a loader owns across epochs (LoaderImpl) and what the stages of one running epoch share
// (RunState). The stages are each in their own file:
//   planner.cpp     the planner thread: takes a free slot, plans batch k, hands it to the fill
//   fill.cpp        oneTBB workers: read a batch's samples into its slot
//   copy_stage.cpp  filled slots to ready batches: identity on the CPU, a copy thread otherwise
//   epoch_run.cpp   the consumer: next(), and the end of an epoch
//   loader.cpp      the public façade: options checked, LoaderImpl built, Loader/Epoch/Batch

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>

#include <atomic>
#include <boost/lockfree/spsc_queue.hpp>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "copy/copy_engine.hpp"
#include "ferry/loader.hpp"
#include "pipeline/autotune.hpp"
#include "pipeline/batch_layout.hpp"
#include "pipeline/epoch_plan.hpp"
#include "pipeline/parallelism.hpp"
#include "pipeline/ragged.hpp"
#include "pipeline/ring.hpp"
#include "pipeline/sampler.hpp"
#include "pipeline/testing.hpp"

namespace ferry::detail {

struct FillJob;

class EpochRun;

struct LoaderImpl {
  LoaderImpl(std::shared_ptr<const Dataset> d, const LoaderOptions& o, const SimulatedCopy& sim);
  LoaderImpl(const LoaderImpl&) = delete;
  LoaderImpl& operator=(const LoaderImpl&) = delete;
  /// Orders the device buffers' release after the consumer's last work on them (on the copy
  /// stream, the host does not wait), then frees everything.
  ~LoaderImpl();

  std::shared_ptr<const Dataset> dataset;
  LoaderOptions options;
  SimulatedCopy simulated;
  std::vector<FieldSpec> fields;
  std::shared_ptr<const std::vector<std::string>> names;
  std::size_t epoch_samples;  // the positions of an epoch (Dataset::epoch_size when it selects)
  // Samples a slot holds: batch_size, but never more than this rank's epoch has, so a batch
  // size beyond the data (full-batch training) costs only what the data needs.
  std::size_t capacity;
  Sampler sampler;
  int workers;
  bool device_path;                      // a copy stage exists (a GPU, or the simulated copy)
  std::unique_ptr<CopyEngine> engine;    // with a copy stage
  bool host_engine = false;              // the engine is the simulated one
  std::unique_ptr<RaggedFields> ragged;  // the ragged fields' bounds and padding
  // max_tokens or bucket_window: each epoch's batches are planned (EpochPlan), counting
  // the tokens of this field (the first ragged one).
  bool planned = false;
  std::size_t budget_field = 0;
  // Of the epoch last started; kUnplanned until one starts or batches_per_epoch() plans epoch 0.
  static constexpr std::size_t kUnplanned = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> planned_batches{kUnplanned};
  std::unique_ptr<BatchLayout> layout;
  std::unique_ptr<BufferRing> ring;
  // Dataset::staging_released() when the consumer lets a batch go, and staging_reused() before
  // the batch after it is read into its slot: a dataset that shares_staging(), on the CPU path,
  // with nothing written into a slot before its reads (no ragged field, no gathered rows).
  bool tells_staging = false;
  // Whether the slot of the batch the consumer took last is given back when the batch is let go
  // (set by EpochRun::next_until): where it is one of its epoch's last limit() batches, whose
  // slot is not written again in the epoch and waits idle (for the next epoch, or whatever the
  // loop does between epochs), or a timed take of it ran out (the loop does other work while
  // the reads go on). Without the first, every slot kept its bytes across the epoch's end, and
  // the next epoch's first batches found all of them resident (the JPEG bench's tree held its
  // peak there). A slot let go within the epoch keeps its pages: it is written again as soon as
  // the reads reach it, and giving its pages back cost the processes that write it a page fault
  // a page (a fresh shared page, zeroed, charged, mapped), with the TLB shootdown of the
  // give-back, on the path that bounds a read-bound loader: numpy rows in 2 worker processes
  // took 10-15% more CPU a sample (BENCHMARKS.md, "Where a Python dataset's time goes").
  std::atomic<bool> give_back_slot{true};
  int start_slots = 1;  // slots in use at the start (prefetch, or autotune's first choice)
  /// The budget's accounting (tuning's sizes), its checks, and autotune's starting point.
  /// \throws ConfigError when memory_budget cannot hold the smallest pipeline, or (without
  /// autotune) what the options ask for.
  void plan_memory(BufferRing::Sizes& sizes);

  std::optional<ParallelismLease> parallelism;  // before the arenas: they go first
  tbb::task_arena arena;                        // without autotune; with it, tuning.arenas
  Tuning tuning;  // workers and slots in use, and the memory they hold
  // Fills waiting for a worker, oldest first (fill.cpp): each task enqueued in an arena takes
  // the oldest job of its arena when it runs, so batches start filling in their order whatever
  // order oneTBB runs its enqueued tasks in.
  std::mutex fill_mutex;
  std::deque<FillJob*> fill_queue;

  std::mutex run_mutex;                    // epoch() one at a time
  std::atomic<EpochRun*> active{nullptr};  // the epoch being iterated, until it ends

  // Stats, in nanoseconds where timed.
  std::atomic<std::uint64_t> batches{0}, samples{0}, bytes{0}, skipped{0};
  std::atomic<std::uint64_t> read_ns{0}, slot_wait_ns{0};
  std::atomic<std::uint64_t> consumer_wait_ns{0}, wall_ns{0}, first_batch_ns{0};
  // The consumer's time inside next(), its wait included: on a machine whose cores the workers
  // fill, a consumer that does nothing else may wait little yet spend its time in the loader
  // (descheduled in it, or handing slots back), which is the loader setting the pace too.
  std::atomic<std::uint64_t> consumer_inside_ns{0};
  std::atomic<std::uint64_t> host_syncs{0}, background_syncs{0};
  std::uint64_t staging_allocations = 0, device_allocations = 0;
  double network_wait_base = 0;  // dataset->network_wait_seconds() when the loader was made
  std::mutex reasons_mutex;
  std::vector<std::string> skip_reasons;  // guarded by reasons_mutex
  // Samples delivered from each of the dataset's sources (Dataset::num_sources).
  std::size_t sources = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> source_samples;

  std::atomic<std::uint64_t> state_epoch{0};
  std::atomic<std::uint64_t> state_next{0};
  std::atomic<std::uint64_t> state_position{0};  // the epoch's global position (LoaderState)
};

/// A planned batch on its way: its slot and its number in the epoch.
struct Planned {
  std::uint32_t slot = 0;
  std::uint64_t number = 0;
};

/// What the stages of one epoch share. Only slot indices travel between them, through
/// single-producer single-consumer queues, in batch order.
struct RunState {
  /// Batches [first, end) of a run that starts at the epoch's global position `position`
  /// (LoaderState::position; 0: the epoch's start). \throws ConfigError as EpochPlan.
  RunState(std::shared_ptr<LoaderImpl> i, std::uint64_t e, std::size_t first,
           std::uint64_t position);

  std::shared_ptr<LoaderImpl> impl;
  std::uint64_t epoch;
  Sampler sampler;                  // the run's, from its position
  Sampler::Order order;             // the epoch's order, built once for the run
  std::unique_ptr<EpochPlan> plan;  // when the loader plans epochs whole; else the sampler's
  std::size_t start, end;           // batches [start, end)
  // Batch k is numbered number_offset + k: a run from a position this loader's batches reach
  // (k' batches from the epoch's start) continues their numbers; any other starts at 0.
  std::size_t number_offset = 0;

  /// The epoch's global position once every rank has received the run's first k batches.
  std::uint64_t position_after(std::size_t k) const noexcept {
    return plan ? plan->position_after(k) : sampler.position_after(k);
  }

  std::atomic<bool> stopping{false};
  // A stage failed outside any one batch (the copy thread's own failure): the consumer gets
  // what was ready before it, then this error.
  std::atomic<bool> failed{false};
  std::exception_ptr background_error;  // written once, before failed is set

  // Fill tasks queued or running. Shared with the tasks, which notify after they decrement:
  // by then the run may be gone.
  std::shared_ptr<std::atomic<int>> in_flight = std::make_shared<std::atomic<int>>(0);
  Signal filled;                                 // a fill task finished
  Signal planned_signal;                         // planned got an entry
  Signal ready_signal;                           // the copy stage has a batch ready
  boost::lockfree::spsc_queue<Planned> planned;  // planner -> copy stage

  bool stop_requested() const noexcept { return stopping.load(); }
  /// Asks every stage to stop and wakes every waiter.
  void stop() noexcept;
  /// Records a stage's failure (the first one) and wakes the consumer.
  void fail(std::exception_ptr error) noexcept;
  /// Waits until `slot` holds batch `number` filled, or the run stops; false when `deadline`
  /// passed first.
  bool wait_filled(const Slot& slot, std::uint64_t number,
                   Clock::time_point deadline = Clock::time_point::max());
};

/// The message of an exception.
std::string describe(const std::exception_ptr& e);

}  // namespace ferry::detail
