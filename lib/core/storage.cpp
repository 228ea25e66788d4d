#include "core/storage.hpp"

#include <atomic>
#include <mutex>
#include <utility>

namespace ferry::detail {
namespace {

void* data_of(const Storage::Memory& m) noexcept {
  return std::visit(
      [](const auto& v) -> void* {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Storage::External>) {
          return v.data;
        } else {
          return v.data();
        }
      },
      m);
}

std::size_t size_of(const Storage::Memory& m) noexcept {
  return std::visit(
      [](const auto& v) -> std::size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Storage::External>) {
          return v.size;
        } else {
          return v.size();
        }
      },
      m);
}

// The event of asynchronous work that reads `sources`: they stay alive until a query or wait
// finds the work done, then go at once, whoever asked.
class PendingWrite final : public EventImpl {
 public:
  PendingWrite(Event work, std::vector<std::shared_ptr<const Storage>> sources) noexcept
      : work_(std::move(work)), sources_(std::move(sources)) {}

  bool query() override {
    if (done_.load(std::memory_order_acquire)) return true;
    if (!work_.ready()) return false;
    release();
    return true;
  }
  void wait() override {
    if (done_.load(std::memory_order_acquire)) return;
    work_.synchronize();
    release();
  }
  void* native_handle() noexcept override { return work_.native_handle(); }

 private:
  void release() noexcept {
    std::vector<std::shared_ptr<const Storage>> dropped;  // freed after the lock is let go
    std::lock_guard lock(mutex_);
    dropped.swap(sources_);
    done_.store(true, std::memory_order_release);
  }

  Event work_;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::vector<std::shared_ptr<const Storage>> sources_;
};

// True when `event` says its work is done; false when CUDA cannot tell (the error comes again
// to whoever waits for it).
bool known_done(const Event& event) noexcept {
  try {
    return event.ready();
  } catch (...) {
    return false;
  }
}

}  // namespace

Storage::Storage(Memory memory, Device device, bool pinned) noexcept
    : memory_(std::move(memory)),
      data_(data_of(memory_)),
      size_(size_of(memory_)),
      device_(device),
      pinned_(pinned) {}

Storage::~Storage() {
  try {
    pending_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report a failed copy
  }
}

void Storage::set_pending(Event event, std::vector<std::shared_ptr<const Storage>> sources) {
  pending_ = event;  // first: whatever fails below, the storage waits for the work
  keeps_sources_ = false;
  // Work done already (a copy that completed synchronously) has nothing left to read.
  if (sources.empty() || known_done(event)) return;
  pending_ = Event(std::make_shared<PendingWrite>(std::move(event), std::move(sources)));
  keeps_sources_ = true;
}

const Event& Storage::pending() const {
  if (keeps_sources_) (void)pending_.ready();  // lets the sources of finished work go
  return pending_;
}

std::shared_ptr<Storage> allocate_storage(std::size_t nbytes, Device device, bool pinned) {
  if (device.is_cuda()) {
    DeviceBuffer buffer = DeviceBuffer::allocate(device, nbytes);
    return std::make_shared<Storage>(std::move(buffer), device, false);
  }
  if (pinned) {
    PinnedPool::Block block = PinnedPool::global().acquire(nbytes);
    const bool locked = block.locked();
    return std::make_shared<Storage>(std::move(block), device, locked);
  }
  return std::make_shared<Storage>(HostBuffer::allocate(nbytes), device, false);
}

}  // namespace ferry::detail
