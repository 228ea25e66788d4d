// The pipeline: planner thread → oneTBB workers fill staging slots → copy thread (device
// path) → the consumer's next(). See docs/ARCHITECTURE.md for who runs what.

#include "ferry/loader.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <boost/lockfree/spsc_queue.hpp>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <variant>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#include "copy/copy_engine.hpp"
#include "copy/cuda/cuda_api.hpp"
#include "copy/host/host_copy_engine.hpp"
#include "core/checked.hpp"
#include "core/image_ops.hpp"
#include "core/storage.hpp"
#include "pipeline/fault.hpp"
#include "pipeline/sampler.hpp"
#include "pipeline/staging.hpp"

namespace ferry {

namespace detail {

using Clock = std::chrono::steady_clock;

namespace {
std::atomic<FaultHook> fault_hook{nullptr};
}  // namespace

FaultHook set_fault_hook(FaultHook hook) noexcept { return fault_hook.exchange(hook); }

void fault(FaultPoint point, std::uint64_t batch) {
  if (const FaultHook hook = fault_hook.load(std::memory_order_relaxed)) hook(point, batch);
}

inline std::uint64_t nanos_since(Clock::time_point start) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

/// Slot and buffer indices travel through lock-free queues; free lists take returns from any
/// thread (a kept batch may be released anywhere), the in-order hand-offs are single-producer
/// single-consumer.
using FreeList = boost::lockfree::queue<std::uint32_t>;
struct Planned {
  std::uint32_t slot = 0;
  std::uint64_t number = 0;
};
using PlannedQueue = boost::lockfree::spsc_queue<Planned>;
using ReadyQueue = boost::lockfree::spsc_queue<std::uint32_t>;

}  // namespace detail

/// Everything a loader owns across epochs: the dataset, the staging ring, device buffers, the
/// copy engine and the worker arena. Shared by the loader, its running epoch and every lease,
/// so a batch kept past its loader stays valid.
namespace detail {
struct LoaderImpl {
  LoaderImpl(std::shared_ptr<const Dataset> d, LoaderOptions o);

  std::shared_ptr<const Dataset> dataset;
  LoaderOptions options;
  std::vector<FieldSpec> fields;
  std::shared_ptr<const std::vector<std::string>> names;
  // Samples a slot holds: batch_size, but never more than this rank's epoch has, so a batch
  // size beyond the data (full-batch training) costs only what the data needs.
  std::size_t capacity;
  detail::SlotLayout layout;
  // Image fields normalized on the loader's device (FieldSpec::normalize): the dataset writes
  // u8 [H, W, C]; the conversion writes norm.dtype [C, H, W] into a second region of the same
  // buffer, at out_offset, laid out by out_layout, and the batch's tensor is made from there.
  // On the device path the copy stream converts the whole batch after its copy; on the CPU path
  // each worker converts its sample right after read().
  struct Conversion {
    std::size_t field = 0;
    detail::ImageConvert args;  // n = 1; src and dst set per use
    FieldSpec out;              // [C, H, W] of the normalized dtype
  };
  std::vector<Conversion> conversions;
  std::vector<int> conversion_of;  // per field: its index in conversions, or -1
  detail::SlotLayout out_layout;
  std::size_t out_offset = 0;
  detail::Sampler sampler;
  int workers;
  bool device_path;  // a copy stage exists (a GPU, or the simulated copy)
  // A TensorDataset already on the device: slots carry only indices, and the copy stage
  // gathers rows from these device pointers (one per field) into the device buffer.
  bool gather = false;
  std::vector<const std::byte*> gather_sources;
  std::size_t index_offset = 0;  // of the batch's indices in a device buffer (gather)

  std::vector<std::variant<HostBuffer, PinnedBuffer>> staging;
  std::vector<std::unique_ptr<detail::Slot>> slots;
  std::vector<std::unique_ptr<detail::DeviceSlot>> device_slots;
  std::unique_ptr<detail::CopyEngine> engine;
  detail::HostCopyEngine* host_engine = nullptr;  // engine, when it is the simulated one

  detail::FreeList free_slots;
  detail::FreeList free_device;
  detail::Signal slot_returned;    // a slot went back to free_slots
  detail::Signal device_returned;  // a device buffer went back to free_device
  std::atomic<int> kept{0};        // leases alive besides the epoch's current batch

  std::optional<tbb::global_control> parallelism;
  tbb::task_arena arena;

  std::mutex run_mutex;                            // epoch() one at a time
  std::atomic<detail::EpochRun*> active{nullptr};  // the epoch being iterated, until it ends

  // Stats, in nanoseconds where timed.
  std::atomic<std::uint64_t> batches{0}, samples{0}, bytes{0}, skipped{0};
  std::atomic<std::uint64_t> read_ns{0}, slot_wait_ns{0};
  std::atomic<std::uint64_t> consumer_wait_ns{0}, wall_ns{0}, first_batch_ns{0};
  std::atomic<std::uint64_t> staging_allocations{0}, device_allocations{0};
  std::mutex reasons_mutex;
  std::vector<std::string> skip_reasons;  // guarded by reasons_mutex

  std::atomic<std::uint64_t> state_epoch{0};
  std::atomic<std::uint64_t> state_next{0};

  void return_slot(std::uint32_t slot) {
    while (!free_slots.push(slot)) {
    }  // never full: it holds at most every slot
    slot_returned.notify();
  }
  void return_device(std::uint32_t d) {
    while (!free_device.push(d)) {
    }
    device_returned.notify();
  }
};

/// The hold a batch has on its buffer: a staging slot (CPU path) or a device buffer. The
/// buffer goes back to the ring when the last copy of the batch, or of one of its tensors, goes.
struct Lease {
  Lease(std::shared_ptr<LoaderImpl> impl, std::uint32_t id, bool device)
      : impl_(std::move(impl)), id_(id), device_(device) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() {
    if (counted_) impl_->kept.fetch_sub(1);
    if (!device_) {
      impl_->return_slot(id_);
      return;
    }
    DeviceSlot& d = *impl_->device_slots[id_];
    try {
      // The copy stream waits for this before it overwrites the buffer: work the consumer
      // queued on its stream may still read it.
      d.released = impl_->engine->record_on(impl_->options.stream);
    } catch (...) {
      // No event: then nothing may be queued on the consumer's stream any more, or the
      // buffer could be overwritten under it. Wait for the device instead.
      try {
        impl_->engine->synchronize();
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor has no one to tell
      }
      d.released = Event();
    }
    impl_->return_device(id_);
  }
  /// Called when the epoch lets go of the batch: from then on the lease is a kept one.
  void mark_kept() {
    counted_ = true;
    impl_->kept.fetch_add(1);
  }

 private:
  std::shared_ptr<LoaderImpl> impl_;
  std::uint32_t id_;
  bool device_;
  bool counted_ = false;
};

#if defined(__SANITIZE_THREAD__)
// oneTBB as packaged is not instrumented, so ThreadSanitizer cannot see how it hands a task to
// a worker or joins a parallel_for. These mark exactly those edges for it (and
// tests/tsan.supp silences reports whose top frame is inside oneTBB's headers, or the two
// functors below reading their own members, which oneTBB wrote).
#define FERRY_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const void*>(p)))
#define FERRY_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const void*>(p)))
#else
#define FERRY_TSAN_RELEASE(p) static_cast<void>(p)
#define FERRY_TSAN_ACQUIRE(p) static_cast<void>(p)
#endif

/// The address the TBB edges are marked on.
inline constexpr char tsan_edge = 0;

class EpochRun;

/// The message of an exception.
std::string describe(const std::exception_ptr& e);

/// What a fill task needs, handed to it by pointer: the task object that oneTBB copies holds
/// nothing else.
struct FillJob {
  EpochRun* run;
  std::uint32_t slot;
  std::uint64_t number;
  std::shared_ptr<std::atomic<int>> in_flight;
};
void run_fill_job(FillJob* job);

/// The task enqueued in the arena for one batch.
struct FillTask {
  FillJob* job;
  void operator()() const;
};

/// The body of the parallel_for over one batch's samples.
struct FillRange {
  EpochRun* run;
  Slot* slot;
  std::atomic<bool>* any_failed;
  void operator()(const tbb::blocked_range<std::size_t>& r) const;
};

/// One epoch in flight: the planner thread, the fill tasks it gives the arena, the copy thread
/// (device path), and the consumer's side.
class EpochRun {
 public:
  EpochRun(std::shared_ptr<LoaderImpl> impl, std::uint64_t epoch, std::size_t start);
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;
  ~EpochRun();

  const Batch* next();
  std::size_t size() const noexcept { return end_ - start_; }

 private:
  void plan();
  friend void run_fill_job(FillJob* job);
  friend struct FillRange;
  void fill(std::uint32_t slot_id, std::uint64_t number) noexcept;
  void fill_range(Slot& slot, std::size_t begin, std::size_t end, std::atomic<bool>& any_failed);
  void copy();
  bool copy_one(const Planned& p);
  void settle_failures(Slot& slot);
  void fail(std::exception_ptr error) noexcept;
  void stop() noexcept;
  void shutdown() noexcept;
  void release_current();
  [[noreturn]] void fail_epoch(std::exception_ptr error);
  void finish_stats() noexcept;
  template <class Ready>
  void wait_for(Signal& signal, Ready ready, std::atomic<std::uint64_t>* waited_ns);

  std::shared_ptr<LoaderImpl> impl_;
  std::uint64_t epoch_;
  std::size_t start_, end_;
  std::size_t next_;  // the batch the consumer receives next

  std::atomic<bool> stopping_{false};
  // A background thread failed outside any one batch (the copy thread's own failure): next()
  // delivers what was ready before it, then rethrows it.
  std::atomic<bool> failed_{false};
  std::exception_ptr background_error_;  // written once, before failed_ is set
  bool shut_down_ = false;               // the consumer's thread only
  // Fill tasks queued or running. Shared with the tasks, which notify after they decrement:
  // by then this run may be gone.
  std::shared_ptr<std::atomic<int>> in_flight_ = std::make_shared<std::atomic<int>>(0);
  Signal filled_;          // a fill task finished
  Signal planned_signal_;  // planned_ got an entry
  Signal ready_signal_;    // ready_ got an entry
  PlannedQueue planned_;
  ReadyQueue ready_;

  Batch current_;
  bool over_ = false;
  Clock::time_point started_;
  bool first_ = true;

  std::thread planner_;
  std::thread copier_;
};

EpochRun::EpochRun(std::shared_ptr<LoaderImpl> impl, std::uint64_t epoch, std::size_t start)
    : impl_(std::move(impl)),
      epoch_(epoch),
      start_(std::min(start, impl_->sampler.batches())),
      end_(impl_->sampler.batches()),
      next_(start_),
      planned_(impl_->slots.size()),
      ready_(impl_->device_slots.size()),
      started_(Clock::now()) {
  impl_->state_epoch.store(epoch);
  impl_->state_next.store(start_);
  try {
    planner_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ferry-planner");  // for top, perf and gdb
      plan();
    });
    if (impl_->device_path) {
      fault(FaultPoint::thread_start, start_);
      copier_ = std::thread([this] {
        pthread_setname_np(pthread_self(), "ferry-copy");
        copy();
      });
    }
  } catch (...) {
    // A thread that did start is stopped and joined; the ring is whole again.
    const std::exception_ptr error = std::current_exception();
    shutdown();
    try {
      std::rethrow_exception(error);
    } catch (const Error&) {
      throw;
    } catch (...) {  // std::system_error from std::thread, std::bad_alloc
      throw Error("Loader: cannot start epoch " + std::to_string(epoch) + ": " + describe(error));
    }
  }
}

EpochRun::~EpochRun() {
  stop();
  release_current();
  shutdown();
}

/// Stops the threads, waits for the fill tasks, returns whatever was planned or copied but not
/// delivered to the ring, and lets the loader start another epoch. Runs once: when the epoch
/// ends, fails, or is destroyed.
void EpochRun::shutdown() noexcept {
  if (shut_down_) return;
  shut_down_ = true;
  stop();
  if (planner_.joinable()) planner_.join();
  if (copier_.joinable()) copier_.join();
  // Fill tasks see stopping_ and finish quickly; no slot may be touched after this.
  for (int n = in_flight_->load(); n != 0; n = in_flight_->load()) in_flight_->wait(n);
  if (impl_->engine) {
    try {
      impl_->engine->synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the epoch is over either way
    }
  }
  Planned p;
  while (planned_.pop(p)) impl_->return_slot(p.slot);
  std::uint32_t d = 0;
  while (ready_.pop(d)) {
    impl_->device_slots[d]->released = Event();
    impl_->return_device(d);
  }
  finish_stats();
  EpochRun* self = this;
  impl_->active.compare_exchange_strong(self, nullptr);
}

void EpochRun::fail(std::exception_ptr error) noexcept {
  if (failed_.load()) return;
  background_error_ = std::move(error);
  failed_.store(true);
  planned_signal_.notify();
  ready_signal_.notify();
}

void EpochRun::stop() noexcept {
  stopping_.store(true);
  // Wake every waiter so it sees stopping_.
  impl_->slot_returned.notify();
  impl_->device_returned.notify();
  filled_.notify();
  planned_signal_.notify();
  ready_signal_.notify();
}

void EpochRun::finish_stats() noexcept {
  if (over_) return;
  over_ = true;
  impl_->wall_ns.fetch_add(nanos_since(started_));
}

template <class Ready>
void EpochRun::wait_for(Signal& signal, Ready ready, std::atomic<std::uint64_t>* waited_ns) {
  const auto start = Clock::now();
  for (;;) {
    const std::uint32_t seen = signal.version();
    if (ready() || stopping_.load()) break;
    signal.wait(seen);
  }
  if (waited_ns != nullptr) waited_ns->fetch_add(nanos_since(start));
}

void EpochRun::plan() {
  LoaderImpl& impl = *impl_;
  for (std::size_t k = start_; k < end_; ++k) {
    std::uint32_t id = 0;
    bool got = false;
    wait_for(
        impl.slot_returned, [&] { return got = impl.free_slots.pop(id); }, &impl.slot_wait_ns);
    if (!got) break;  // stopping
    if (stopping_.load()) {
      impl.return_slot(id);
      break;
    }
    Slot& slot = *impl.slots[id];
    slot.error = nullptr;
    slot.number = k;
    slot.filled.store(0, std::memory_order_relaxed);
    bool planned = false;
    try {
      try {
        slot.copied.synchronize();  // the copy out of this slot (device path) has finished
      } catch (...) {
        slot.error = std::current_exception();
      }
      slot.copied = Event();
      fault(FaultPoint::planner, k);
      impl.sampler.batch(epoch_, k, slot.indices);
      if (impl.gather) {
        // Nothing to read: the slot carries the indices, the copy stage gathers on the device.
        std::memcpy(slot.data, slot.indices.data(), slot.indices.size() * sizeof(std::uint64_t));
        slot.filled.store(k + 1, std::memory_order_release);
        planned_.push(Planned{id, k});
        planned_signal_.notify();
        filled_.notify();
        continue;
      }
      // The arena's workers fill the slot; none of them ever waits for a slot: this thread does.
      auto job = std::make_unique<FillJob>(FillJob{this, id, k, in_flight_});
      in_flight_->fetch_add(1);
      planned_.push(Planned{id, k});
      planned = true;
      planned_signal_.notify();
      FERRY_TSAN_RELEASE(job.get());
      try {
        impl.arena.enqueue(FillTask{job.get()});
      } catch (...) {
        in_flight_->fetch_sub(1);
        throw;
      }
      static_cast<void>(job.release());  // run_fill_job owns it now
    } catch (...) {
      // The failure travels in batch k's place: batches before it are delivered, then next()
      // rethrows it, and planning stops here.
      slot.error = std::current_exception();
      slot.filled.store(k + 1, std::memory_order_release);
      if (!planned) planned_.push(Planned{id, k});
      planned_signal_.notify();
      filled_.notify();
      return;
    }
  }
}

void run_fill_job(FillJob* job) {
  FERRY_TSAN_ACQUIRE(job);
  const std::unique_ptr<FillJob> owned(job);
  const auto in_flight = job->in_flight;   // the run may be gone once it drops to 0
  job->run->fill(job->slot, job->number);  // noexcept: a failure goes into the slot
  in_flight->fetch_sub(1);
  in_flight->notify_all();
}

void FillTask::operator()() const { run_fill_job(job); }

void FillRange::operator()(const tbb::blocked_range<std::size_t>& r) const {
  FERRY_TSAN_ACQUIRE(&tsan_edge);
  run->fill_range(*slot, r.begin(), r.end(), *any_failed);
  FERRY_TSAN_RELEASE(&tsan_edge);
}

void EpochRun::fill_range(Slot& slot, std::size_t begin, std::size_t end,
                          std::atomic<bool>& any_failed) {
  LoaderImpl& impl = *impl_;
  const auto start = Clock::now();
  const Dataset& dataset = *impl.dataset;
  // Samples are read in shuffled order: hint a few ahead so their memory loads overlap.
  constexpr std::size_t kAhead = 4;
  for (std::size_t i = begin; i != std::min(end, begin + kAhead); ++i) {
    dataset.prefetch(slot.indices[i]);
  }
  for (std::size_t i = begin; i != end; ++i) {
    if (stopping_.load(std::memory_order_relaxed)) break;
    if (i + kAhead < end) dataset.prefetch(slot.indices[i + kAhead]);
    const std::uint64_t index = slot.indices[i];
    try {
      dataset.read(index, SampleRef(&impl.layout, slot.data, i,
                                    sample_seed(impl.options.seed, epoch_, index)));
      if (!impl.device_path) {
        for (std::size_t k = 0; k < impl.conversions.size(); ++k) {
          ImageConvert args = impl.conversions[k].args;
          const std::size_t f = impl.conversions[k].field;
          args.src = slot.data + impl.layout.offsets[f] + i * impl.layout.sample_bytes[f];
          args.dst = slot.data + impl.out_offset + impl.out_layout.offsets[k] +
                     i * impl.out_layout.sample_bytes[k];
          convert_image_cpu(args);
        }
      }
      slot.failures[i] = nullptr;
    } catch (...) {
      slot.failures[i] = std::current_exception();
      any_failed.store(true, std::memory_order_relaxed);
    }
  }
  impl.read_ns.fetch_add(nanos_since(start));
}

void EpochRun::fill(std::uint32_t slot_id, std::uint64_t number) noexcept {
  LoaderImpl& impl = *impl_;
  Slot& slot = *impl.slots[slot_id];
  const std::size_t count = slot.indices.size();
  std::atomic<bool> any_failed{false};
  try {
    if (!slot.error) {
      fault(FaultPoint::fill, number);
      const std::size_t grain =
          std::max<std::size_t>(1, count / (4 * static_cast<std::size_t>(impl.workers)));
      FERRY_TSAN_RELEASE(&tsan_edge);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, grain),
                        FillRange{this, &slot, &any_failed});
      FERRY_TSAN_ACQUIRE(&tsan_edge);
    }
    if (any_failed.load() && !stopping_.load()) settle_failures(slot);
  } catch (...) {
    // Not a sample's failure (those are caught per sample) but the fill's own: the batch fails.
    FERRY_TSAN_ACQUIRE(&tsan_edge);
    if (!slot.error) slot.error = std::current_exception();
  }
  slot.filled.store(number + 1, std::memory_order_release);
  filled_.notify();
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

void EpochRun::settle_failures(Slot& slot) {
  LoaderImpl& impl = *impl_;
  const std::size_t count = slot.indices.size();
  if (impl.options.on_error == ErrorPolicy::raise) {
    for (std::size_t i = 0; i < count; ++i) {
      if (!slot.failures[i]) continue;
      const std::string what = describe(slot.failures[i]);
      slot.error = std::make_exception_ptr(DataError(
          "Loader: sample " + std::to_string(slot.indices[i]) + " (batch " +
          std::to_string(slot.number) + ", epoch " + std::to_string(epoch_) + "): " + what));
      return;
    }
  }
  // Skip: move the good samples down over the failed ones, field by field, keeping order.
  std::size_t kept = 0;
  std::vector<std::string> reasons;
  for (std::size_t i = 0; i < count; ++i) {
    if (slot.failures[i]) {
      reasons.push_back("sample " + std::to_string(slot.indices[i]) + ": " +
                        describe(slot.failures[i]));
      slot.failures[i] = nullptr;
      continue;
    }
    if (kept != i) {
      for (std::size_t f = 0; f < impl.layout.offsets.size(); ++f) {
        const std::size_t n = impl.layout.sample_bytes[f];
        std::byte* field = slot.data + impl.layout.offsets[f];
        std::memmove(field + kept * n, field + i * n, n);
      }
      if (!impl.device_path) {  // the converted samples the workers wrote
        for (std::size_t k = 0; k < impl.conversions.size(); ++k) {
          const std::size_t n = impl.out_layout.sample_bytes[k];
          std::byte* field = slot.data + impl.out_offset + impl.out_layout.offsets[k];
          std::memmove(field + kept * n, field + i * n, n);
        }
      }
      slot.indices[kept] = slot.indices[i];
    }
    ++kept;
  }
  slot.indices.resize(kept);
  impl.skipped.fetch_add(reasons.size());
  std::lock_guard lock(impl.reasons_mutex);
  for (auto& r : reasons) {
    if (impl.skip_reasons.size() < 100) impl.skip_reasons.push_back(std::move(r));
  }
}

void EpochRun::copy() {
  LoaderImpl& impl = *impl_;
  for (std::size_t k = start_; k < end_; ++k) {
    Planned p;
    bool got = false;
    wait_for(
        planned_signal_, [&] { return got = planned_.pop(p); }, nullptr);
    if (!got) return;  // stopping
    try {
      if (!copy_one(p)) return;  // stopping
    } catch (...) {
      // The stage itself failed (a batch's own failure travels in its device buffer): the
      // consumer gets the batches copied before, then this error.
      impl.return_slot(p.slot);
      fail(std::current_exception());
      return;
    }
  }
}

bool EpochRun::copy_one(const Planned& p) {
  LoaderImpl& impl = *impl_;
  CopyEngine& engine = *impl.engine;
  fault(FaultPoint::copy, p.number);
  Slot& slot = *impl.slots[p.slot];
  wait_for(
      filled_, [&] { return slot.filled.load(std::memory_order_acquire) == p.number + 1; },
      nullptr);
  std::uint32_t d = 0;
  bool have_buffer = false;
  if (!stopping_.load()) {
    wait_for(
        impl.device_returned, [&] { return have_buffer = impl.free_device.pop(d); }, nullptr);
  }
  if (stopping_.load()) {
    if (have_buffer) impl.return_device(d);
    impl.return_slot(p.slot);
    return false;
  }
  DeviceSlot& dev = *impl.device_slots[d];
  dev.indices.assign(slot.indices.begin(), slot.indices.end());
  dev.error = slot.error;
  if (!dev.error) {
    try {
      engine.wait(dev.released);  // on the stream: the consumer's work on it is done
      auto* target = static_cast<std::byte*>(dev.buffer.data());
      const std::size_t count = slot.indices.size();
      if (impl.gather) {
        auto* indices = reinterpret_cast<std::uint64_t*>(target + impl.index_offset);
        engine.copy_async(indices, slot.data, count * sizeof(std::uint64_t),
                          CopyKind::host_to_device);
        for (std::size_t f = 0; f < impl.gather_sources.size(); ++f) {
          engine.gather_async(impl.gather_sources[f], target + impl.layout.offsets[f], indices,
                              count, impl.layout.sample_bytes[f]);
        }
      } else {
        engine.copy_async(target, slot.data, impl.layout.used_bytes(count),
                          CopyKind::host_to_device);
        // uint8 crossed the bus; normalize on the device, behind the copy.
        for (std::size_t c = 0; c < impl.conversions.size(); ++c) {
          ImageConvert args = impl.conversions[c].args;
          args.n = static_cast<std::int64_t>(count);
          args.src = target + impl.layout.offsets[impl.conversions[c].field];
          args.dst = target + impl.out_offset + impl.out_layout.offsets[c];
          if (count > 0) engine.convert_image_async(args);
        }
      }
      dev.ready = engine.record();
      slot.copied = dev.ready;
    } catch (...) {
      dev.error = std::current_exception();
      dev.ready = Event();
    }
  }
  dev.released = Event();
  impl.return_slot(p.slot);  // reused once slot.copied is ready
  ready_.push(d);
  ready_signal_.notify();
  return true;
}

void EpochRun::fail_epoch(std::exception_ptr error) {
  over_ = true;
  shutdown();  // the ring is whole again and the loader ready for another epoch
  if (!error) throw Error("Loader: the epoch was stopped");
  std::rethrow_exception(std::move(error));
}

void EpochRun::release_current() {
  if (current_.lease_) {
    current_.tensors_.clear();  // their storages hold the lease too
    if (current_.lease_.use_count() > 1) current_.lease_->mark_kept();
    current_.lease_.reset();
  }
  current_.indices_.clear();
}

const Batch* EpochRun::next() {
  LoaderImpl& impl = *impl_;
  release_current();
  if (over_) return nullptr;
  if (next_ >= end_) {
    shutdown();  // the loader may start the next epoch while this object lives on
    return nullptr;
  }
  const int buffers =
      static_cast<int>(impl.device_path ? impl.device_slots.size() : impl.slots.size());
  if (impl.kept.load() >= buffers) {
    throw ConfigError("Loader: all " + std::to_string(buffers) +
                      (impl.device_path ? " device buffers" : " staging slots") +
                      " are held by batches (or their tensors) kept past their iteration; release "
                      "some, or raise " +
                      (impl.device_path ? "device_buffers" : "prefetch"));
  }
  const auto wait_start = Clock::now();
  std::shared_ptr<Lease> lease;
  std::byte* base = nullptr;
  Device device = Device::cpu();
  bool pinned = false;
  Event ready;
  if (impl.device_path) {
    std::uint32_t d = 0;
    bool got = false;
    wait_for(
        ready_signal_, [&] { return (got = ready_.pop(d)) || failed_.load(); }, nullptr);
    if (!got) fail_epoch(background_error_);
    DeviceSlot& dev = *impl.device_slots[d];
    try {
      lease = std::make_shared<Lease>(impl_, d, /*device=*/true);
    } catch (...) {
      impl.return_device(d);
      fail_epoch(std::current_exception());
    }
    if (dev.error) fail_epoch(dev.error);
    impl.engine->stream_wait(impl.options.stream, dev.ready);
    base = static_cast<std::byte*>(dev.buffer.data());
    device = impl.engine->device();
    ready = dev.ready;
    current_.indices_.assign(dev.indices.begin(), dev.indices.end());
  } else {
    Planned p;
    bool got = false;
    wait_for(
        planned_signal_, [&] { return (got = planned_.pop(p)) || failed_.load(); }, nullptr);
    if (!got) fail_epoch(background_error_);
    Slot& slot = *impl.slots[p.slot];
    try {
      lease = std::make_shared<Lease>(impl_, p.slot, /*device=*/false);
    } catch (...) {
      impl.return_slot(p.slot);
      fail_epoch(std::current_exception());
    }
    wait_for(
        filled_, [&] { return slot.filled.load(std::memory_order_acquire) == p.number + 1; },
        nullptr);
    if (slot.error) fail_epoch(slot.error);
    base = slot.data;
    pinned = slot.pinned;
    current_.indices_.assign(slot.indices.begin(), slot.indices.end());
  }
  impl.consumer_wait_ns.fetch_add(nanos_since(wait_start));

  const std::size_t count = current_.indices_.size();
  current_.names_ = impl.names;
  current_.number_ = next_;
  current_.ready_ = ready;
  current_.lease_ = lease;
  for (std::size_t f = 0; f < impl.fields.size(); ++f) {
    const int c = impl.conversion_of[f];
    const FieldSpec& spec =
        c < 0 ? impl.fields[f] : impl.conversions[static_cast<std::size_t>(c)].out;
    std::byte* at =
        c < 0 ? base + impl.layout.offsets[f]
              : base + impl.out_offset + impl.out_layout.offsets[static_cast<std::size_t>(c)];
    std::vector<int64_t> shape;
    shape.reserve(spec.shape.size() + 1);
    shape.push_back(static_cast<int64_t>(count));
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    Tensor t = Tensor::wrap(at, std::move(shape), spec.dtype, device, pinned, lease);
    if (!device.is_cpu() || impl.host_engine != nullptr) t.storage()->set_pending(ready, {});
    current_.tensors_.push_back(std::move(t));
  }
  ++next_;
  impl.state_next.store(next_);
  impl.batches.fetch_add(1);
  impl.samples.fetch_add(count);
  impl.bytes.fetch_add(impl.layout.used_bytes(count));
  if (first_) {
    first_ = false;
    impl.first_batch_ns.store(nanos_since(started_));
  }
  return &current_;
}

}  // namespace detail
}  // namespace ferry

namespace ferry {

namespace {

// Bounds on counts of threads and buffers: beyond them a loader is a mistake, not a choice.
constexpr int kMaxWorkers = 1024;
constexpr int kMaxBuffers = 1024;

void validate(const Dataset* dataset, const LoaderOptions& o) {
  if (dataset == nullptr) throw ConfigError("Loader: no dataset");
  if (o.batch_size == 0) throw ConfigError("Loader: batch_size must be at least 1");
  if (o.prefetch < 1) {
    throw ConfigError("Loader: prefetch must be at least 1, got " + std::to_string(o.prefetch));
  }
  if (o.device_buffers < 2) {
    throw ConfigError("Loader: device_buffers must be at least 2, got " +
                      std::to_string(o.device_buffers));
  }
  if (o.workers < 0 || o.workers > kMaxWorkers) {
    throw ConfigError("Loader: workers must lie in [0, " + std::to_string(kMaxWorkers) + "], got " +
                      std::to_string(o.workers));
  }
  if (o.prefetch > kMaxBuffers || o.device_buffers > kMaxBuffers) {
    throw ConfigError("Loader: prefetch and device_buffers must be at most " +
                      std::to_string(kMaxBuffers) + ", got " + std::to_string(o.prefetch) +
                      " and " + std::to_string(o.device_buffers));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw ConfigError("Loader: rank " + std::to_string(o.rank) + " is outside world_size " +
                      std::to_string(o.world_size));
  }
  if (o.simulate_copy.enabled && !o.device.is_cpu()) {
    throw ConfigError("Loader: simulate_copy stands in for a GPU; the device must be cpu, not " +
                      o.device.str());
  }
  const auto fields = dataset->fields();
  if (fields.empty()) throw ConfigError("Loader: the dataset has no fields");
  const std::size_t size = dataset->size();
  const std::span<const Tensor> rows = dataset->rows_in_memory();
  if (!rows.empty()) {
    // The rows stand for the samples: they must be exactly what fields() and size() say.
    if (rows.size() != fields.size()) {
      throw ConfigError("Loader: the dataset has " + std::to_string(fields.size()) +
                        " fields but " + std::to_string(rows.size()) + " tensors of rows");
    }
    for (std::size_t f = 0; f < rows.size(); ++f) {
      const Tensor& t = rows[f];
      std::vector<int64_t> shape{static_cast<int64_t>(size)};
      shape.insert(shape.end(), fields[f].shape.begin(), fields[f].shape.end());
      if (!t.defined() || t.dtype() != fields[f].dtype || t.shape() != shape ||
          t.device() != rows[0].device()) {
        throw ConfigError("Loader: the dataset's rows of field \"" + fields[f].name +
                          "\" are not its samples (dtype, shape or device)");
      }
    }
    const Device where = rows[0].device();
    if (!where.is_cpu() && where != o.device) {
      throw ConfigError("Loader: the dataset's rows live on " + where.str() +
                        "; its loader must run there too, not on " + o.device.str());
    }
  }
  if (size > 0 && static_cast<std::size_t>(o.world_size) > size) {
    throw ConfigError("Loader: world_size " + std::to_string(o.world_size) + " exceeds the " +
                      std::to_string(size) + " samples");
  }
  // The sampler pads a rank's share by wrapping: size + world_size must not overflow.
  static_cast<void>(detail::checked_add(size, o.world_size, "Loader: dataset size + world_size"));
  for (const FieldSpec& f : fields) {
    static_cast<void>(
        detail::checked_nbytes(f.shape, dtype_size(f.dtype), "Loader: field \"" + f.name + "\""));
  }
}

// Samples one slot holds: batch_size, or all this rank's epoch has when that is fewer.
std::size_t staging_capacity(std::size_t dataset_size, const LoaderOptions& o) {
  const auto w = static_cast<std::size_t>(o.world_size);
  const std::size_t per_rank =
      o.drop_last ? dataset_size / w : dataset_size / w + (dataset_size % w != 0);
  return std::max<std::size_t>(1, std::min(o.batch_size, per_rank));
}

int worker_count(int requested) {
  if (requested > 0) return requested;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// The conversions the fields ask for (FieldSpec::normalize), checked.
std::vector<detail::LoaderImpl::Conversion> conversions_of(const std::vector<FieldSpec>& fields) {
  std::vector<detail::LoaderImpl::Conversion> out;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const FieldSpec& spec = fields[f];
    if (!spec.normalize) continue;
    const std::string where = "Loader: field \"" + spec.name + "\" (normalize)";
    if (spec.dtype != DType::u8 || spec.shape.size() != 3) {
      throw ConfigError(where + ": the dataset must write u8 [H, W, C], not " +
                        std::string(dtype_name(spec.dtype)) + " of " +
                        std::to_string(spec.shape.size()) + " dimensions");
    }
    detail::LoaderImpl::Conversion c;
    c.field = f;
    c.args.n = 1;
    c.args.h = spec.shape[0];
    c.args.w = spec.shape[1];
    c.args.c = spec.shape[2];
    detail::set_normalize(*spec.normalize, where.c_str(), c.args);
    c.out = FieldSpec{spec.name, spec.normalize->dtype, {c.args.c, c.args.h, c.args.w}};
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<FieldSpec> output_fields(const std::vector<detail::LoaderImpl::Conversion>& cs) {
  std::vector<FieldSpec> out;
  out.reserve(cs.size());
  for (const auto& c : cs) out.push_back(c.out);
  return out;
}

std::size_t aligned(std::size_t n) {
  return detail::checked_add(n, detail::SlotLayout::kAlignment - 1, "Loader: batch bytes") /
         detail::SlotLayout::kAlignment * detail::SlotLayout::kAlignment;
}

detail::Sampler::Options sampler_options(const LoaderOptions& o) {
  return {o.batch_size,
          o.shuffle,
          o.seed,
          o.drop_last,
          static_cast<std::size_t>(o.rank),
          static_cast<std::size_t>(o.world_size)};
}

}  // namespace

detail::LoaderImpl::LoaderImpl(std::shared_ptr<const Dataset> d, LoaderOptions o)
    : dataset((validate(d.get(), o), std::move(d))),
      options(o),
      fields(dataset->fields()),
      capacity(staging_capacity(dataset->size(), options)),
      layout(fields, capacity),
      conversions(conversions_of(fields)),
      out_layout(output_fields(conversions), capacity),
      out_offset(aligned(layout.bytes)),
      sampler(dataset->size(), sampler_options(options)),
      workers(worker_count(options.workers)),
      device_path(options.device.is_cuda() || options.simulate_copy.enabled),
      free_slots(static_cast<std::size_t>(options.prefetch)),
      free_device(static_cast<std::size_t>(options.device_buffers)),
      arena(workers, /*reserved_for_masters=*/0) {
  check_usable(options.device);
  auto n = std::make_shared<std::vector<std::string>>();
  for (const auto& f : fields) n->push_back(f.name);
  names = std::move(n);
  conversion_of.assign(fields.size(), -1);
  for (std::size_t c = 0; c < conversions.size(); ++c) {
    conversion_of[conversions[c].field] = static_cast<int>(c);
  }
  // The arena's threads come from oneTBB's pool, which by default has one fewer than the cores:
  // ask for enough that `workers` can all fill slots.
  if (static_cast<std::size_t>(workers) + 1 >
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)) {
    parallelism.emplace(tbb::global_control::max_allowed_parallelism,
                        static_cast<std::size_t>(workers) + 1);
  }

  if (options.device.is_cuda()) {
    engine = detail::cuda::make_engine(options.device.index());
  } else if (options.simulate_copy.enabled) {
    auto host = std::make_unique<detail::HostCopyEngine>(
        detail::HostCopyEngine::Options{options.simulate_copy.bytes_per_second});
    host_engine = host.get();
    engine = std::move(host);
  }
  const std::span<const Tensor> rows = dataset->rows_in_memory();
  gather = !rows.empty() && device_path &&
           (rows[0].device().is_cuda() || options.simulate_copy.dataset_on_device);
  // With conversions, the buffer batches are delivered from holds the converted fields too.
  const std::size_t delivered_bytes =
      conversions.empty()
          ? layout.bytes
          : detail::checked_add(out_offset, out_layout.bytes, "Loader: batch bytes");
  std::size_t staging_bytes = device_path ? layout.bytes : delivered_bytes;
  std::size_t device_bytes = delivered_bytes;
  if (gather) {
    for (const Tensor& t : rows) {
      engine->wait(t.ready_event());  // tensors still being copied there
      gather_sources.push_back(static_cast<const std::byte*>(t.storage()->data()) +
                               t.storage_offset());
    }
    staging_bytes = capacity * sizeof(std::uint64_t);
    index_offset = aligned(layout.bytes);
    device_bytes = detail::checked_add(index_offset, staging_bytes, "Loader: batch bytes");
  }
  const bool pin = options.pin_memory && options.device.is_cuda();
  for (int i = 0; i < options.prefetch; ++i) {
    auto slot = std::make_unique<detail::Slot>();
    if (pin) {
      PinnedBuffer b = PinnedBuffer::allocate(staging_bytes);
      slot->data = static_cast<std::byte*>(b.data());
      slot->pinned = b.locked();
      staging.emplace_back(std::move(b));
    } else {
      HostBuffer b = HostBuffer::allocate(staging_bytes);
      slot->data = static_cast<std::byte*>(b.data());
      staging.emplace_back(std::move(b));
    }
    staging_allocations.fetch_add(1);
    slot->indices.reserve(capacity);
    slot->failures.resize(capacity);
    slots.push_back(std::move(slot));
    return_slot(static_cast<std::uint32_t>(i));
  }
  if (device_path) {
    for (int i = 0; i < options.device_buffers; ++i) {
      auto dev = std::make_unique<detail::DeviceSlot>();
      dev->buffer = engine->allocate(device_bytes);
      dev->indices.reserve(capacity);
      device_allocations.fetch_add(1);
      device_slots.push_back(std::move(dev));
      return_device(static_cast<std::uint32_t>(i));
    }
  }
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : impl_(std::make_shared<detail::LoaderImpl>(std::move(dataset), options)) {}

Loader::~Loader() = default;

Epoch Loader::epoch(std::uint64_t e, std::size_t start_batch) {
  std::lock_guard lock(impl_->run_mutex);
  if (impl_->active.load() != nullptr) {
    throw ConfigError(
        "Loader: an epoch is still being iterated; finish or destroy it before starting another");
  }
  auto run = std::make_unique<detail::EpochRun>(impl_, e, start_batch);
  impl_->active.store(run.get());
  return Epoch(std::move(run));
}

Epoch Loader::resume(const LoaderState& state) {
  if (state.seed != impl_->options.seed) {
    throw ConfigError("Loader: the state was saved with seed " + std::to_string(state.seed) +
                      ", this loader has seed " + std::to_string(impl_->options.seed));
  }
  return epoch(state.epoch, state.next_batch);
}

std::size_t Loader::batches_per_epoch() const { return impl_->sampler.batches(); }

LoaderState Loader::state() const {
  return {impl_->options.seed, impl_->state_epoch.load(), impl_->state_next.load()};
}

const LoaderOptions& Loader::options() const noexcept { return impl_->options; }

LoaderStats Loader::stats() const {
  const detail::LoaderImpl& i = *impl_;
  auto seconds = [](const std::atomic<std::uint64_t>& ns) {
    return static_cast<double>(ns.load()) * 1e-9;
  };
  LoaderStats s;
  s.batches = i.batches.load();
  s.samples = i.samples.load();
  s.bytes = i.bytes.load();
  s.skipped = i.skipped.load();
  {
    std::lock_guard lock(impl_->reasons_mutex);
    s.skip_reasons = i.skip_reasons;
  }
  s.read_seconds = seconds(i.read_ns);
  s.slot_wait_seconds = seconds(i.slot_wait_ns);
  s.copy_seconds = i.engine ? i.engine->busy_seconds() : 0.0;
  s.consumer_wait_seconds = seconds(i.consumer_wait_ns);
  s.wall_seconds = seconds(i.wall_ns);
  s.worker_capacity_seconds = s.wall_seconds * i.workers;
  s.first_batch_seconds = seconds(i.first_batch_ns);
  s.staging_allocations = i.staging_allocations.load();
  s.device_allocations = i.device_allocations.load();
  return s;
}

// ---- Epoch ------------------------------------------------------------------------------

Epoch::Epoch(std::unique_ptr<detail::EpochRun> run) noexcept : run_(std::move(run)) {}
Epoch::Epoch(Epoch&&) noexcept = default;
Epoch& Epoch::operator=(Epoch&&) noexcept = default;
Epoch::~Epoch() = default;

const Batch* Epoch::next() { return run_ ? run_->next() : nullptr; }

std::size_t Epoch::size() const noexcept { return run_ ? run_->size() : 0; }

Epoch::iterator Epoch::begin() { return iterator(this); }

Epoch::iterator::iterator(Epoch* epoch) : epoch_(epoch), batch_(epoch->next()) {}

Epoch::iterator& Epoch::iterator::operator++() {
  batch_ = epoch_->next();
  return *this;
}

// ---- Batch ------------------------------------------------------------------------------

const Tensor& Batch::operator[](std::string_view field) const {
  if (names_) {
    for (std::size_t i = 0; i < names_->size(); ++i) {
      if ((*names_)[i] == field && i < tensors_.size()) return tensors_[i];
    }
  }
  throw ConfigError("Batch: no field \"" + std::string(field) + "\"");
}

const Tensor& Batch::at(std::size_t field) const {
  if (field >= tensors_.size()) {
    throw ConfigError("Batch: no field " + std::to_string(field) + "; the batch has " +
                      std::to_string(tensors_.size()));
  }
  return tensors_[field];
}

}  // namespace ferry
