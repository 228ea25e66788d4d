#include "pipeline/ring.hpp"

#include <algorithm>
#include <new>

namespace ferry::detail {

BufferRing::BufferRing(const Sizes& sizes, CopyEngine* engine)
    : sizes_(sizes),
      staging_bytes_(sizes.staging_bytes),
      staging_(static_cast<std::size_t>(std::max(sizes.slots, sizes.max_slots))),
      slots_(static_cast<std::size_t>(std::max(sizes.slots, sizes.max_slots))),
      limit_(sizes.slots),
      free_slots_(slots_.size()),
      free_device_(static_cast<std::size_t>(sizes.device_buffers)) {
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
  const std::size_t next = made_.load(std::memory_order_relaxed);
  auto slot = std::make_unique<Slot>();
  if (sizes_.pinned) {
    PinnedBuffer b = PinnedBuffer::allocate(sizes_.staging_bytes);
    slot->data = static_cast<std::byte*>(b.data());
    slot->pinned = b.locked();
    staging_[next] = std::move(b);
  } else {
    HostBuffer b = HostBuffer::allocate(sizes_.staging_bytes);
    slot->data = static_cast<std::byte*>(b.data());
    staging_[next] = std::move(b);
  }
  try {
    slot->indices.reserve(sizes_.capacity);
    slot->failures.resize(sizes_.capacity);
    slot->rows.reset(sizes_.ragged_fields, sizes_.capacity);
  } catch (...) {
    staging_[next] = std::monostate{};
    throw;
  }
  slots_[next] = std::move(slot);
  made_.store(next + 1, std::memory_order_release);  // slot(next) may be read from now on
  return static_cast<std::uint32_t>(next);
}

bool BufferRing::make_slot(std::uint32_t& id) noexcept {
  if (grow_failed_ || slot_count() >= slots_.size()) return false;
  try {
    id = add_slot();
    return true;
  } catch (...) {
    grow_failed_ = true;  // the slots made serve on; ask the allocator no more
    return false;
  }
}

void BufferRing::set_limit(int slots) noexcept {
  limit_.store(std::clamp(slots, 1, static_cast<int>(slots_.size())), std::memory_order_release);
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

void BufferRing::release_device(std::uint32_t id) noexcept {
  while (!free_device_.push(id)) {
  }
  device_returned_.notify();
}

void BufferRing::wake() noexcept {
  slot_returned_.notify();
  device_returned_.notify();
}

bool BufferRing::stalled() const noexcept {
  const std::size_t buffers =
      device_slots_.empty() ? static_cast<std::size_t>(limit()) : device_slots_.size();
  return static_cast<std::size_t>(kept_.load()) >= buffers;
}

Lease::~Lease() {
  if (kept_) ring_.remove_kept();
  if (!device_) {
    ring_.release_slot(id_);
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
