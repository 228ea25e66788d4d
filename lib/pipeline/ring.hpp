#pragma once

// The buffer ring: the loader's staging slots and device buffers, made once and reused by every
// epoch. Free buffers wait in lock-free lists; whoever returns one wakes its waiters. A batch
// (or a tensor of it) kept past its iteration holds its buffer through a Lease; when every
// buffer is held that way, the consumer would wait for ever, so stalled() says so instead.
//
// Under autotune the ring holds up to max_slots slots but makes them lazily: the planner (the
// only thread that acquires slots) makes one when it may use more than are made and none is
// free, after asking whether the memory budget allows it. At most limit() slots are in use
// (acquired and not yet released) at once. Lowering the limit gives memory back: while more
// slots are made than the limit, the planner frees the staging buffer of each slot it finds
// free (after the copy out of it), and its id waits to be made again.
//
// Batches kept past their iteration (list(loader), labels kept for a metric) hold their staging
// slots (no copy stage). Once they would leave the pipeline less than one slot of the limit,
// each one more kept counts no longer among those in use: the planner makes a new slot in its
// place, when the memory budget allows it (may_make), up to kKeptSlots more than the capacity.
// As kept batches go, the slots above the limit are freed again.

#include <algorithm>
#include <atomic>
#include <boost/lockfree/queue.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <variant>
#include <vector>

#include "copy/copy_engine.hpp"
#include "ferry/event.hpp"
#include "ferry/memory.hpp"
#include "pipeline/staging.hpp"

namespace ferry::detail {

using Clock = std::chrono::steady_clock;

inline std::uint64_t nanos_since(Clock::time_point start) noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

/// A counter to wait on without spinning: whoever changes something a waiter may want calls
/// notify(). A waiter reads version(), checks its condition, and only then wait(version), so no
/// wake-up is lost. A wait may also end at a deadline (the consumer's next() waits in slices,
/// so that its caller can run signal handlers): such waits sleep on the counter's futex with a
/// timeout, which notify() wakes only while one is waiting (no lock on either side).
class Signal {
 public:
  std::uint32_t version() const noexcept { return value_.load(std::memory_order_seq_cst); }
  /// Waits until the version moves from `seen`.
  void wait(std::uint32_t seen) const noexcept { value_.wait(seen, std::memory_order_seq_cst); }
  /// Waits until the version moves from `seen` or `deadline` passes; false at the deadline.
  bool wait_until(std::uint32_t seen, Clock::time_point deadline) const noexcept {
    // The waiter counts itself before it checks the version, and notify() bumps the version
    // before it checks the count (all sequentially consistent): either the waiter sees the new
    // version, or notify() sees it counted and wakes the futex, whose wait returns at once if the
    // version moved before it slept.
    // First a few looks with the processor given up between them, as std::atomic::wait does
    // before it sleeps: a batch due within microseconds is taken without a sleep and a wake-up.
    // Once per version and thread: a wait that comes back to the version its last one timed out
    // on (the consumer's next() waiting in 20 ms slices for a slow batch) sleeps at once.
    if (!timed_out_before(seen)) {
      for (int i = 0; i < kYields; ++i) {
        if (value_.load(std::memory_order_seq_cst) != seen) return true;
        yield();
      }
    }
    timed_waiters_.fetch_add(1, std::memory_order_seq_cst);
    bool moved = false;
    for (;;) {
      if (value_.load(std::memory_order_seq_cst) != seen) {
        moved = true;
        break;
      }
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) break;
      futex_wait(seen, std::chrono::duration_cast<std::chrono::nanoseconds>(left));
    }
    timed_waiters_.fetch_sub(1, std::memory_order_seq_cst);
    if (!moved) timed_out(seen);
    return moved;
  }
  void notify() noexcept {
    value_.fetch_add(1, std::memory_order_seq_cst);
    value_.notify_all();
    if (timed_waiters_.load(std::memory_order_seq_cst) != 0) futex_wake();
  }
  /// The times this thread gave up the processor in wait_until() (for tests).
  static std::uint64_t yields_here() noexcept;

 private:
  static constexpr int kYields = 12;
  static void yield() noexcept;
  /// Whether this thread's last timed wait that ended at its deadline was on this signal at
  /// `seen`; timed_out() records one.
  bool timed_out_before(std::uint32_t seen) const noexcept;
  void timed_out(std::uint32_t seen) const noexcept;
  void futex_wait(std::uint32_t seen, std::chrono::nanoseconds left) const noexcept;
  void futex_wake() const noexcept;

  std::atomic<std::uint32_t> value_{0};
  mutable std::atomic<std::uint32_t> timed_waiters_{0};
};

/// Waits on `signal` until `ready()` or `stop()` is true (checked in that order, so what is
/// ready is taken even when stopping). Adds the time waited to `waited_ns` if given.
template <class Ready, class Stop>
void wait_until(Signal& signal, Ready ready, Stop stop, std::atomic<std::uint64_t>* waited_ns) {
  const auto start = Clock::now();
  for (;;) {
    const std::uint32_t seen = signal.version();
    if (ready() || stop()) break;
    signal.wait(seen);
  }
  if (waited_ns != nullptr) waited_ns->fetch_add(nanos_since(start));
}

/// wait_until() that gives up at `deadline` (time_point::max(): never): false then, with neither
/// `ready()` nor `stop()` true.
template <class Ready, class Stop>
bool wait_until(Signal& signal, Ready ready, Stop stop, Clock::time_point deadline) {
  for (;;) {
    const std::uint32_t seen = signal.version();
    if (ready() || stop()) return true;
    if (deadline == Clock::time_point::max()) {
      signal.wait(seen);
    } else if (!signal.wait_until(seen, deadline)) {
      return ready() || stop();
    }
  }
}

/// One staging slot: a batch's bytes in (page-locked) host memory, and what the workers leave.
struct Slot {
  std::byte* data = nullptr;
  bool pinned = false;                       ///< data's pages are locked
  std::vector<std::uint64_t> indices;        ///< the batch's dataset indices
  std::vector<std::uint64_t> places;         ///< their epoch positions (their samples' seeds)
  std::vector<std::exception_ptr> failures;  ///< per position, set by workers
  std::size_t number = 0;                    ///< the batch's number in its epoch
  std::exception_ptr error;                  ///< the batch failed
  BatchRows rows;                            ///< where ragged fields' samples lie
  std::atomic<std::uint64_t> filled{0};      ///< number + 1 once the workers are done
  Event copied;                              ///< the copy out of this slot (device path)
};

/// One device buffer and the batch it holds.
struct DeviceSlot {
  DeviceBuffer buffer;
  std::vector<std::uint64_t> indices;
  std::exception_ptr error;
  BatchRows rows;  ///< the batch's, copied from its slot
  Event ready;     ///< the copy into it has finished
  Event released;  ///< the consumer is done with it (recorded on the consumer's stream)
};

class BufferRing {
 public:
  struct Sizes {
    int slots = 1;                  ///< staging slots made now and in use at most (prefetch)
    int max_slots = 0;              ///< slots it may make later (autotune); < slots: slots
    std::size_t staging_bytes = 0;  ///< each
    std::size_t capacity = 1;       ///< samples per batch
    bool pinned = false;            ///< page-locked staging
    bool shared = false;            ///< staging other processes map (SharedBuffer)
    int device_buffers = 0;         ///< 0: no copy stage
    std::size_t device_bytes = 0;   ///< each
    std::size_t ragged_fields = 0;  ///< fields whose rows vary per sample
  };
  /// Allocates every buffer (device buffers through `engine`, which outlives the ring).
  /// \throws what the allocations throw.
  BufferRing(const Sizes& sizes, CopyEngine* engine);
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  /// Slots made and not given back: the staging buffers that exist now.
  std::size_t slot_count() const noexcept { return made_.load(std::memory_order_acquire); }
  /// Staging buffers allocated so far, those given back and made again included.
  std::uint64_t slot_allocations() const noexcept {
    return allocations_.load(std::memory_order_relaxed);
  }
  /// Slots the ring may hold in use (the most limit() may be).
  std::size_t slot_capacity() const noexcept { return capacity_; }
  /// Slot ids, those made in place of kept batches' included.
  std::size_t slot_ids() const noexcept { return slots_.size(); }
  /// Slots made at most beyond slot_capacity() in place of kept batches' (no copy stage).
  static constexpr int kKeptSlots = 1024;
  std::size_t staging_bytes() const noexcept { return staging_bytes_; }
  std::size_t device_count() const noexcept { return device_slots_.size(); }
  Slot& slot(std::uint32_t id) noexcept { return *slots_[id]; }
  DeviceSlot& device(std::uint32_t id) noexcept { return *device_slots_[id]; }

  /// Slots in use at most (acquired and not yet released).
  int limit() const noexcept { return limit_.load(std::memory_order_acquire); }
  /// Sets limit() (1 to slot_capacity()); a lower one takes effect as slots come back, and
  /// the planner's next acquire_slot() frees the made slots above it that are free.
  void set_limit(int slots) noexcept;

  /// A free slot, waiting for one while limit() slots are in use; nothing when `stop()` turned
  /// true first. First, while more slots are made than limit(), it frees free ones (see
  /// give_back_slots). With none free but fewer than limit() made, it makes one if `may_make()`
  /// (the budget allows it); a slot that cannot be allocated is not retried (the limit stays
  /// where the slots are). Called by one thread at a time (the planner).
  template <class Stop, class MayMake>
  std::optional<std::uint32_t> acquire_slot(Stop stop, std::atomic<std::uint64_t>* waited_ns,
                                            MayMake may_make) {
    std::uint32_t id = 0;
    bool got = false;
    wait_until(
        slot_returned_,
        [&] {
          give_back_slots();
          const int kept = kept_slots();
          if (in_use_.load(std::memory_order_acquire) - kept >= limit()) return false;
          got = free_slots_.pop(id);
          if (!got &&
              slot_count() < static_cast<std::size_t>(limit()) + static_cast<std::size_t>(kept) &&
              may_make()) {
            got = make_slot(id);
          }
          if (got) in_use_.fetch_add(1, std::memory_order_acq_rel);
          return got;
        },
        stop, waited_ns);
    if (!got) return std::nullopt;
    return id;
  }
  template <class Stop>
  std::optional<std::uint32_t> acquire_slot(Stop stop, std::atomic<std::uint64_t>* waited_ns) {
    return acquire_slot(stop, waited_ns, [] { return false; });
  }
  /// A free device buffer, as acquire_slot().
  template <class Stop>
  std::optional<std::uint32_t> acquire_device(Stop stop) {
    return acquire(free_device_, device_returned_, stop, nullptr);
  }
  /// Returns a slot that acquire_slot() gave.
  void release_slot(std::uint32_t id) noexcept;
  /// Called with a slot's bytes when the consumer lets its batch go (Lease, no copy stage),
  /// before the slot is free again. Set before the first batch; never throws.
  void set_let_go(std::function<void(std::span<std::byte>)> hook) { let_go_ = std::move(hook); }
  /// The consumer let slot `id`'s batch go (Lease): let_go's hook, then release_slot().
  void let_go(std::uint32_t id) noexcept {
    if (let_go_) let_go_(std::span<std::byte>(slots_[id]->data, staging_bytes_));
    release_slot(id);
  }
  void release_device(std::uint32_t id) noexcept;
  /// let_go's hook for every free slot (an epoch left early: none is written until the next).
  /// No other thread takes a slot meanwhile.
  void let_go_free() noexcept;
  /// Wakes every waiter, so that it looks at its stop condition again.
  void wake() noexcept;

  /// A batch let go by its epoch but still held (kept) by the user, and its end.
  void add_kept() noexcept {
    kept_.fetch_add(1);
    slot_returned_.notify();  // the planner may make a slot in its place
  }
  int kept() const noexcept { return kept_.load(); }
  void remove_kept() noexcept { kept_.fetch_sub(1); }
  /// True when kept batches hold every buffer the consumer receives batches in and no slot can
  /// be made in place of one (`may_make`: the memory budget allows one more): it would wait for
  /// ever.
  bool stalled(bool may_make) const noexcept;

 private:
  using FreeList = boost::lockfree::queue<std::uint32_t>;
  template <class Stop>
  static std::optional<std::uint32_t> acquire(FreeList& list, Signal& returned, Stop stop,
                                              std::atomic<std::uint64_t>* waited_ns) {
    std::uint32_t id = 0;
    bool got = false;
    wait_until(
        returned, [&] { return got = list.pop(id); }, stop, waited_ns);
    if (!got) return std::nullopt;
    return id;
  }

  /// Makes a slot of an id without one (the last of unmade_) and returns its id.
  /// \throws what the allocation throws.
  std::uint32_t add_slot();
  /// While more slots are made than limit(): frees the staging buffer of a free slot, once the
  /// copy out of it has finished (a copy that fails to finish keeps it). Planner only.
  void give_back_slots() noexcept;
  /// add_slot() as `id`, under the capacity; false when its memory cannot be had.
  bool make_slot(std::uint32_t& id) noexcept;
  /// Slots that may be made in place of kept batches' (none with a copy stage: those hold
  /// device buffers): as many as leave one slot of the limit to the pipeline. A loop's variable
  /// holding the previous batch while it asks for the next (one kept) costs nothing.
  int kept_slots() const noexcept {
    return device_slots_.empty() ? std::max(0, kept_.load() - limit() + 1) : 0;
  }
  void push_free(std::uint32_t id) noexcept;

  Sizes sizes_;
  std::size_t staging_bytes_ = 0;
  // Sized to the capacity up front, so that making a slot never moves another: slots_[id] of a
  // slot made is read by every stage while the planner makes the next one.
  std::vector<std::variant<std::monostate, HostBuffer, PinnedBuffer, SharedBuffer>> staging_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::size_t capacity_ = 0;          // slot_capacity()
  std::atomic<std::size_t> made_{0};  // slots with a staging buffer
  std::atomic<std::uint64_t> allocations_{0};
  std::vector<std::uint32_t> unmade_;  // ids without one, the next to make last (planner only)
  std::atomic<int> limit_{1};
  std::atomic<int> in_use_{0};
  std::atomic<bool> grow_failed_{false};  // an allocation failed: make no more
  std::vector<std::unique_ptr<DeviceSlot>> device_slots_;
  FreeList free_slots_;
  FreeList free_device_;
  Signal slot_returned_;
  Signal device_returned_;
  std::atomic<int> kept_{0};
  std::function<void(std::span<std::byte>)> let_go_;
};

/// The hold a batch has on its buffer: a staging slot (no copy stage) or a device buffer. The
/// buffer goes back to the ring when the last copy of the batch, or of one of its tensors, goes;
/// a device buffer only after the work the consumer queued on its stream so far (an event the
/// copy stream waits for before it overwrites the buffer).
class Lease {
 public:
  /// `owner` keeps the ring and the engine alive as long as the lease.
  Lease(std::shared_ptr<const void> owner, BufferRing& ring, CopyEngine* engine, Stream stream,
        std::uint32_t id, bool device) noexcept
      : owner_(std::move(owner)),
        ring_(ring),
        engine_(engine),
        stream_(stream),
        id_(id),
        device_(device) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();
  /// Called when the epoch lets go of the batch while the user still holds it.
  void mark_kept() noexcept;

 private:
  std::shared_ptr<const void> owner_;
  BufferRing& ring_;
  CopyEngine* engine_;
  Stream stream_;
  std::uint32_t id_;
  bool device_;
  bool kept_ = false;
};

}  // namespace ferry::detail
