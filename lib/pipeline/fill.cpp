#include "pipeline/fill.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/read_stop.hpp"
#include "core/tsan.hpp"
#include "pipeline/fault.hpp"

namespace ferry::detail {

/// A batch's fill, waiting in LoaderImpl::fill_queue until a task of its arena takes it.
struct FillJob {
  RunState* run;
  std::uint32_t slot;
  std::uint64_t number;
  std::shared_ptr<std::atomic<int>> in_flight;
  int workers;             // the concurrency of the arena it runs in
  tbb::task_arena* arena;  // that arena
};

namespace {

/// The address the TBB edges are marked on.
constexpr char tsan_edge = 0;

// oneTBB's pool does not survive fork(): in a child of a process whose pool had started, tasks
// enqueued in an arena wait for workers that do not exist there. A child of such a fork fills
// batches on the planner's thread, one after another, without oneTBB: slower, never stuck.
std::atomic<bool> g_pool_started{false};
std::atomic<bool> g_pool_lost{false};

void after_fork_in_child() noexcept {
  if (g_pool_started.load()) g_pool_lost.store(true);
}

[[maybe_unused]] const int g_fork_handler = pthread_atfork(nullptr, nullptr, after_fork_in_child);

/// The samples [begin, end) of a slot: read each, then run its fields' operations on it when
/// there is no copy stage to run them for the whole batch.
void fill_range(RunState& run, Slot& slot, std::size_t begin, std::size_t end,
                std::atomic<bool>& any_failed) {
  LoaderImpl& impl = *run.impl;
  const auto start = Clock::now();
  const Dataset& dataset = *impl.dataset;
  const BatchLayout& layout = *impl.layout;
  const bool ops_here = !impl.device_path && layout.has_ops();
  HostOps host;
  // A read that waits on something outside it (a stalled server, another thread's fetch) gives
  // up when this run stops.
  const ReadStopScope stop_scope(&run.stopping);
  // The whole share first (Dataset::begin_reads), for a dataset that reads it elsewhere; its
  // end_reads() runs however the loop ends. The places are the ones read() gets below, made once;
  // their vector is the thread's, kept between shares (a nested fill finds it taken and makes
  // its own), so that a share allocates nothing.
  static_assert(std::is_same_v<std::uint64_t, std::size_t>);
  const std::span<const std::size_t> share(slot.indices.data() + begin, end - begin);
  thread_local std::vector<SampleRef> t_places;
  struct Share {
    const Dataset& dataset;
    std::vector<SampleRef> places;
    explicit Share(const Dataset& d) : dataset(d), places(std::move(t_places)) { places.clear(); }
    Share(const Share&) = delete;
    Share& operator=(const Share&) = delete;
    ~Share() {
      dataset.end_reads();
      t_places = std::move(places);
    }
  } held(dataset);
  std::vector<SampleRef>& places = held.places;
  places.reserve(end - begin);
  for (std::size_t i = begin; i != end; ++i) {
    places.push_back(SampleRefs::make(&layout.written, slot.data, i,
                                      sample_seed(impl.options.seed, run.epoch, slot.places[i]),
                                      &slot.rows));
  }
  dataset.begin_reads(share, places);
  // Samples are read in shuffled order: hint a few ahead so their memory loads overlap.
  constexpr std::size_t kAhead = 4;
  for (std::size_t i = begin; i != std::min(end, begin + kAhead); ++i) {
    dataset.prefetch(slot.indices[i]);
  }
  for (std::size_t i = begin; i != end; ++i) {
    if (run.stopping.load(std::memory_order_relaxed)) break;
    if (i + kAhead < end) dataset.prefetch(slot.indices[i + kAhead]);
    const std::uint64_t index = slot.indices[i];
    if (slot.failures[i]) {  // its length() failed when its batch was planned (skip): not read
      any_failed.store(true, std::memory_order_relaxed);
      continue;
    }
    try {
      // The seed follows the sample's epoch position, which is its index but for a dataset
      // that selects its epochs (a Mixture): a sample given twice gets two seeds.
      dataset.read(index, places[i - begin]);
      if (impl.ragged->any) impl.ragged->pad_sample(layout.written, slot.rows, i, slot.data);
      if (ops_here) {
        for (const FieldPlan& plan : layout.plans) plan.run(host, OpSpan{slot.data, nullptr, i, 1});
      }
      slot.failures[i] = nullptr;
    } catch (...) {
      slot.failures[i] = std::current_exception();
      any_failed.store(true, std::memory_order_relaxed);
    }
  }
  impl.read_ns.fetch_add(nanos_since(start));
}

/// The fewest samples of a batch of `count` one share of it (one fill_range) holds: a quarter of a
/// worker's part, so that a worker left without a batch of its own takes over part of another's,
/// or more where the dataset's read_share() asks for more.
std::size_t share_grain(const Dataset& dataset, std::size_t count, int workers) noexcept {
  const std::size_t split =
      std::max<std::size_t>(1, count / (4 * static_cast<std::size_t>(std::max(workers, 1))));
  return std::max(split, std::min(dataset.read_share(), count));
}

/// The body of the parallel_for over one batch's samples.
struct FillRange {
  RunState* run;
  Slot* slot;
  std::atomic<bool>* any_failed;
  FillRange(RunState* r, Slot* s, std::atomic<bool>* failed)
      : run(r), slot(s), any_failed(failed) {}
  // oneTBB copies the body for each piece of the range it hands to another worker, inside
  // libtbb: the copy is marked as released here, so that the worker's acquire in operator() sees
  // its members written (a report of one, seen once in CI, names only "operator()", which no
  // suppression can single out).
  FillRange(const FillRange& other)
      : run((FERRY_TSAN_ACQUIRE(&tsan_edge), other.run)),
        slot(other.slot),
        any_failed(other.any_failed) {
    FERRY_TSAN_RELEASE(&tsan_edge);
  }
  FillRange& operator=(const FillRange&) = delete;
  void operator()(const tbb::blocked_range<std::size_t>& r) const {
    FERRY_TSAN_ACQUIRE(&tsan_edge);
    fill_range(*run, *slot, r.begin(), r.end(), *any_failed);
    FERRY_TSAN_RELEASE(&tsan_edge);
  }
};

/// Under ErrorPolicy::raise the first failing sample fails the batch; under skip the good
/// samples move down over the failed ones, keeping their order, and the failures are counted.
void settle_failures(RunState& run, Slot& slot) {
  LoaderImpl& impl = *run.impl;
  const std::size_t count = slot.indices.size();
  if (impl.options.on_error == ErrorPolicy::raise) {
    for (std::size_t i = 0; i < count; ++i) {
      if (!slot.failures[i]) continue;
      const std::string what = describe(slot.failures[i]);
      slot.error = std::make_exception_ptr(DataError(
          "Loader: sample " + std::to_string(slot.indices[i]) + " (batch " +
          std::to_string(slot.number) + ", epoch " + std::to_string(run.epoch) + "): " + what));
      return;
    }
  }
  // Every region the workers wrote: the fields as read, and (without a copy stage) their
  // operations' results.
  const BatchLayout& layout = *impl.layout;
  const std::size_t regions = impl.device_path ? 1 : std::numeric_limits<std::size_t>::max();
  std::size_t kept = 0;
  std::vector<std::string> reasons;
  std::vector<bool> keep(count, true);
  for (std::size_t i = 0; i < count; ++i) {
    if (slot.failures[i]) {
      keep[i] = false;
      reasons.push_back("sample " + std::to_string(slot.indices[i]) + ": " +
                        describe(slot.failures[i]));
      slot.failures[i] = nullptr;
      continue;
    }
    if (kept != i) {
      for (std::size_t f = 0; f < layout.plans.size(); ++f) {
        if (layout.written.ragged[f] >= 0) continue;  // below
        const FieldPlan& plan = layout.plans[f];
        for (std::size_t r = 0; r < plan.regions.size() && r < regions; ++r) {
          const std::size_t n = plan.region_sample_bytes[r];
          std::byte* field = slot.data + plan.regions[r];
          std::memmove(field + kept * n, field + i * n, n);
        }
      }
      slot.indices[kept] = slot.indices[i];
    }
    ++kept;
  }
  if (impl.ragged->any) impl.ragged->compact(layout.written, slot.rows, keep, count, slot.data);
  slot.indices.resize(kept);
  impl.skipped.fetch_add(reasons.size());
  std::lock_guard lock(impl.reasons_mutex);
  for (auto& r : reasons) {
    if (impl.skip_reasons.size() < 100) impl.skip_reasons.push_back(std::move(r));
  }
}

void fill(RunState& run, std::uint32_t slot_id, std::uint64_t number, int workers) noexcept {
  LoaderImpl& impl = *run.impl;
  Slot& slot = impl.ring->slot(slot_id);
  const std::size_t count = slot.indices.size();
  std::atomic<bool> any_failed{false};
  try {
    if (!slot.error) {
      if (impl.tells_staging) {
        impl.dataset->staging_reused(std::span<std::byte>(slot.data, impl.ring->staging_bytes()));
      }
      fault(FaultPoint::fill, number);
      const std::size_t grain = share_grain(*impl.dataset, count, workers);
      if (g_pool_lost.load()) {
        fill_range(run, slot, 0, count, any_failed);
      } else {
        FERRY_TSAN_RELEASE(&tsan_edge);
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, grain),
                          FillRange{&run, &slot, &any_failed});
        FERRY_TSAN_ACQUIRE(&tsan_edge);
      }
    }
    if (any_failed.load() && !run.stopping.load()) settle_failures(run, slot);
  } catch (...) {
    // Not a sample's failure (those are caught per sample) but the fill's own: the batch fails.
    FERRY_TSAN_ACQUIRE(&tsan_edge);
    if (!slot.error) slot.error = std::current_exception();
  }
  slot.filled.store(number + 1, std::memory_order_release);
  run.filled.notify();
}

void run_fill_job(FillJob* job) {
  FERRY_TSAN_ACQUIRE(job);
  const std::unique_ptr<FillJob> owned(job);
  const auto in_flight = job->in_flight;  // the run may be gone once it drops to 0
  fill(*job->run, job->slot, job->number, job->workers);
  in_flight->fetch_sub(1);
  in_flight->notify_all();
}

/// The task enqueued in an arena for one batch: when it runs, it takes the oldest waiting job
/// of its arena (one is there: each job has its task). Its copies are marked as FillRange's are.
struct FillTask {
  LoaderImpl* impl;
  tbb::task_arena* arena;
  FillTask(LoaderImpl* i, tbb::task_arena* a) : impl(i), arena(a) {}
  FillTask(const FillTask& other)
      : impl((FERRY_TSAN_ACQUIRE(&tsan_edge), other.impl)), arena(other.arena) {
    FERRY_TSAN_RELEASE(&tsan_edge);
  }
  FillTask& operator=(const FillTask&) = delete;
  void operator()() const {
    FERRY_TSAN_ACQUIRE(&tsan_edge);
    FillJob* job = nullptr;
    {
      const std::lock_guard lock(impl->fill_mutex);
      auto& queue = impl->fill_queue;
      const auto at = std::find_if(queue.begin(), queue.end(),
                                   [&](const FillJob* j) { return j->arena == arena; });
      if (at == queue.end()) return;  // never: a job is queued before its task
      job = *at;
      queue.erase(at);
    }
    run_fill_job(job);
  }
};

}  // namespace

void enqueue_fill(RunState& run, std::uint32_t slot, std::uint64_t number) {
  int workers = 1;
  tbb::task_arena& arena = fill_arena(*run.impl, workers);
  LoaderImpl& impl = *run.impl;
  auto job = std::make_unique<FillJob>(FillJob{&run, slot, number, run.in_flight, workers, &arena});
  run.in_flight->fetch_add(1);
  if (g_pool_lost.load()) {
    run_fill_job(job.release());  // a forked child: on this thread, now
    return;
  }
  g_pool_started.store(true);
  FERRY_TSAN_RELEASE(job.get());
  {
    const std::lock_guard lock(impl.fill_mutex);
    impl.fill_queue.push_back(job.get());
  }
  try {
    arena.enqueue(FillTask{&impl, &arena});
  } catch (...) {
    {
      const std::lock_guard lock(impl.fill_mutex);
      auto& queue = impl.fill_queue;
      queue.erase(std::find(queue.begin(), queue.end(), job.get()));
    }
    run.in_flight->fetch_sub(1);
    throw;
  }
  static_cast<void>(job.release());  // run_fill_job owns it now
}

}  // namespace ferry::detail
