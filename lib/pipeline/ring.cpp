#include "pipeline/ring.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <new>

namespace ferry::detail {

// The futex is the counter's own word (std::atomic<std::uint32_t> holds just the value).
static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

namespace {
thread_local std::uint64_t t_yields = 0;
// This thread's last timed wait that ended at its deadline: on which signal, at which version.
thread_local const void* t_timed_out_on = nullptr;
thread_local std::uint32_t t_timed_out_at = 0;
}  // namespace

void Signal::yield() noexcept {
  ++t_yields;
  ::sched_yield();
}

std::uint64_t Signal::yields_here() noexcept { return t_yields; }

bool Signal::timed_out_before(std::uint32_t seen) const noexcept {
  return t_timed_out_on == this && t_timed_out_at == seen;
}

void Signal::timed_out(std::uint32_t seen) const noexcept {
  t_timed_out_on = this;
  t_timed_out_at = seen;
}

void Signal::futex_wait(std::uint32_t seen, std::chrono::nanoseconds left) const noexcept {
  timespec timeout{};
  timeout.tv_sec = static_cast<time_t>(left.count() / 1'000'000'000);
  timeout.tv_nsec = static_cast<long>(left.count() % 1'000'000'000);
  // Returns at once if the word is no longer `seen`; spurious returns are looked at again.
  static_cast<void>(::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&value_),
                              FUTEX_WAIT_PRIVATE, seen, &timeout, nullptr, 0));
}

void Signal::futex_wake() const noexcept {
  static_cast<void>(::syscall(SYS_futex, reinterpret_cast<const std::uint32_t*>(&value_),
                              FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0));
}

BufferRing::BufferRing(const Sizes& sizes, CopyEngine* engine)
    : sizes_(sizes),
      staging_bytes_(sizes.staging_bytes),
      staging_(static_cast<std::size_t>(std::max(sizes.slots, sizes.max_slots)) +
               (sizes.device_buffers == 0 ? kKeptSlots : 0)),
      slots_(staging_.size()),
      capacity_(static_cast<std::size_t>(std::max(sizes.slots, sizes.max_slots))),
      limit_(sizes.slots),
      free_slots_(slots_.size()),
      free_device_(static_cast<std::size_t>(sizes.device_buffers)) {
  unmade_.reserve(slots_.size());
  for (std::size_t id = slots_.size(); id-- > 0;) unmade_.push_back(static_cast<std::uint32_t>(id));
  for (int i = 0; i < sizes.slots; ++i) push_free(add_slot());
  for (int i = 0; i < sizes.device_buffers; ++i) {
    auto dev = std::make_unique<DeviceSlot>();
    dev->buffer = engine->allocate(sizes.device_bytes);
    dev->indices.reserve(sizes.capacity);
    dev->rows.reset(sizes.ragged_fields, sizes.capacity);
    device_slots_.push_back(std::move(dev));
    release_device(static_cast<std::uint32_t>(i));
  }
}

std::uint32_t BufferRing::add_slot() {
  const std::size_t next = unmade_.back();
  // An id made before keeps its Slot (its Event and counters) in place; only the buffers are
  // new. No other thread refers to an id without a buffer.
  if (!slots_[next]) slots_[next] = std::make_unique<Slot>();
  Slot& slot = *slots_[next];
  if (sizes_.shared) {
    SharedBuffer b = SharedBuffer::allocate(sizes_.staging_bytes, sizes_.pinned);
    slot.data = static_cast<std::byte*>(b.data());
    slot.pinned = b.locked();
    staging_[next] = std::move(b);
  } else if (sizes_.pinned) {
    PinnedBuffer b = PinnedBuffer::allocate(sizes_.staging_bytes);
    slot.data = static_cast<std::byte*>(b.data());
    slot.pinned = b.locked();
    staging_[next] = std::move(b);
  } else {
    HostBuffer b = HostBuffer::allocate(sizes_.staging_bytes);
    slot.data = static_cast<std::byte*>(b.data());
    staging_[next] = std::move(b);
  }
  try {
    slot.indices.reserve(sizes_.capacity);
    slot.failures.resize(sizes_.capacity);
    slot.rows.reset(sizes_.ragged_fields, sizes_.capacity);
  } catch (...) {
    staging_[next] = std::monostate{};
    slot.data = nullptr;
    throw;
  }
  unmade_.pop_back();
  allocations_.fetch_add(1, std::memory_order_relaxed);
  // slot(next) may be read from now on: it reaches other threads through the planner's queue.
  made_.fetch_add(1, std::memory_order_acq_rel);
  return static_cast<std::uint32_t>(next);
}

void BufferRing::give_back_slots() noexcept {
  while (slot_count() >
         static_cast<std::size_t>(limit()) + static_cast<std::size_t>(kept_slots())) {
    std::uint32_t id = 0;
    if (!free_slots_.pop(id)) return;  // the others are in use: freed when they come back
    Slot& slot = *slots_[id];
    try {
      slot.copied.synchronize();  // the copy stage may still read the buffer
    } catch (...) {
      push_free(id);  // the planner meets the failure when it takes the slot
      return;
    }
    slot.copied = Event();
    staging_[id] = std::monostate{};
    slot.data = nullptr;
    slot.pinned = false;
    slot.indices = {};
    slot.failures = {};
    slot.rows.reset(0, 0);
    unmade_.push_back(id);
    made_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

bool BufferRing::make_slot(std::uint32_t& id) noexcept {
  if (grow_failed_.load() || unmade_.empty()) return false;
  try {
    id = add_slot();
    return true;
  } catch (...) {
    grow_failed_.store(true);  // the slots made serve on; ask the allocator no more
    return false;
  }
}

void BufferRing::set_limit(int slots) noexcept {
  limit_.store(std::clamp(slots, 1, static_cast<int>(capacity_)), std::memory_order_release);
  slot_returned_.notify();
}

void BufferRing::push_free(std::uint32_t id) noexcept {
  while (!free_slots_.push(id)) {
  }  // never full: it holds at most every slot
}

void BufferRing::release_slot(std::uint32_t id) noexcept {
  push_free(id);
  in_use_.fetch_sub(1, std::memory_order_acq_rel);
  slot_returned_.notify();
}

void BufferRing::let_go_free() noexcept {
  if (!let_go_) return;
  std::vector<std::uint32_t> ids;
  try {
    ids.reserve(slots_.size());
  } catch (...) {
    return;  // no memory: the pages stay until the next epoch
  }
  std::uint32_t id = 0;
  while (ids.size() < slots_.size() && free_slots_.pop(id)) ids.push_back(id);
  for (const std::uint32_t s : ids) {
    if (slots_[s]->data != nullptr) let_go_(std::span<std::byte>(slots_[s]->data, staging_bytes_));
    push_free(s);
  }
}

void BufferRing::release_device(std::uint32_t id) noexcept {
  while (!free_device_.push(id)) {
  }
  device_returned_.notify();
}

void BufferRing::wake() noexcept {
  slot_returned_.notify();
  device_returned_.notify();
}

bool BufferRing::stalled(bool may_make) const noexcept {
  const std::size_t buffers =
      device_slots_.empty() ? static_cast<std::size_t>(limit()) : device_slots_.size();
  if (static_cast<std::size_t>(kept_.load()) < buffers) return false;
  // A slot made in place of a kept batch's: the budget allows it, and an id is left.
  return !device_slots_.empty() || !may_make || grow_failed_.load() ||
         slot_count() >= slots_.size();
}

Lease::~Lease() {
  if (kept_) ring_.remove_kept();
  if (!device_) {
    ring_.let_go(id_);
    return;
  }
  DeviceSlot& d = ring_.device(id_);
  try {
    // The copy stream waits for this before it overwrites the buffer: work the consumer
    // queued on its stream may still read it.
    d.released = engine_->record_on(stream_);
  } catch (...) {
    // No event: the consumer's stream may still have work reading the buffer, and nothing
    // could order the copy stream after it. The host waits for that stream instead.
    try {
      engine_->synchronize_stream(stream_);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor has no one to tell
    }
    d.released = Event();
  }
  ring_.release_device(id_);
}

void Lease::mark_kept() noexcept {
  kept_ = true;
  ring_.add_kept();
}

}  // namespace ferry::detail
