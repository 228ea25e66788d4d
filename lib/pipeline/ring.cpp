#include "pipeline/ring.hpp"

namespace ferry::detail {

BufferRing::BufferRing(const Sizes& sizes, CopyEngine* engine)
    : free_slots_(static_cast<std::size_t>(sizes.slots)),
      free_device_(static_cast<std::size_t>(sizes.device_buffers)) {
  for (int i = 0; i < sizes.slots; ++i) {
    auto slot = std::make_unique<Slot>();
    if (sizes.pinned) {
      PinnedBuffer b = PinnedBuffer::allocate(sizes.staging_bytes);
      slot->data = static_cast<std::byte*>(b.data());
      slot->pinned = b.locked();
      staging_.emplace_back(std::move(b));
    } else {
      HostBuffer b = HostBuffer::allocate(sizes.staging_bytes);
      slot->data = static_cast<std::byte*>(b.data());
      staging_.emplace_back(std::move(b));
    }
    slot->indices.reserve(sizes.capacity);
    slot->failures.resize(sizes.capacity);
    slot->rows.reset(sizes.ragged_fields, sizes.capacity);
    slots_.push_back(std::move(slot));
    release_slot(static_cast<std::uint32_t>(i));
  }
  for (int i = 0; i < sizes.device_buffers; ++i) {
    auto dev = std::make_unique<DeviceSlot>();
    dev->buffer = engine->allocate(sizes.device_bytes);
    dev->indices.reserve(sizes.capacity);
    dev->rows.reset(sizes.ragged_fields, sizes.capacity);
    device_slots_.push_back(std::move(dev));
    release_device(static_cast<std::uint32_t>(i));
  }
}

void BufferRing::release_slot(std::uint32_t id) noexcept {
  while (!free_slots_.push(id)) {
  }  // never full: it holds at most every slot
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
  const std::size_t buffers = device_slots_.empty() ? slots_.size() : device_slots_.size();
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
