#include "core/storage.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "runtime/cuda_api.hpp"

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

// Memory of storages that went while work still wrote them, with the work's event (which holds
// the sources it reads): kept until a sweep finds the work done. Never destroyed: what is left
// at exit goes with the process.
struct Deferred {
  std::mutex mutex;
  std::vector<std::pair<Event, Storage::Memory>> entries;
};

Deferred& deferred() {
  static auto* d = new Deferred();
  return *d;
}

// Lets go of the memory whose work is done. The entries are destroyed outside the lock: their
// sources' destructors may defer memory in turn.
void sweep() noexcept {
  Deferred& d = deferred();
  std::vector<std::pair<Event, Storage::Memory>> done;
  {
    std::lock_guard lock(d.mutex);
    if (d.entries.empty()) return;
    auto keep = d.entries.begin();
    for (auto it = d.entries.begin(); it != d.entries.end(); ++it) {
      if (known_done(it->first)) {
        try {
          done.push_back(std::move(*it));
          continue;
        } catch (...) {  // no memory to move it out: it stays, for a later sweep
        }
      }
      if (keep != it) *keep = std::move(*it);
      ++keep;
    }
    d.entries.erase(keep, d.entries.end());
  }
}

void defer(Event event, Storage::Memory memory) noexcept {
  sweep();
  Deferred& d = deferred();
  try {
    std::lock_guard lock(d.mutex);
    d.entries.emplace_back(std::move(event), std::move(memory));
  } catch (...) {
    // No memory to keep it aside: the host waits for the work instead.
    try {
      event.synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report a failed copy
    }
  }
}

}  // namespace

Storage::Storage(Memory memory, Device device, bool pinned, Stream stream) noexcept
    : memory_(std::move(memory)),
      data_(data_of(memory_)),
      size_(size_of(memory_)),
      device_(device),
      pinned_(pinned),
      stream_(stream) {}

Storage::~Storage() {
  if (device_.is_cuda()) {
    for (Stream use : uses_) {
      try {
        cuda::join_streams(device_.index(), stream_, use);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor has no one to tell
      }
    }
  }
  if (known_done(pending_)) return;
  // Device memory whose pending work is ordered on its own stream goes back behind that work
  // (the caching allocator gives blocks back in stream order): only the sources the work reads
  // wait, aside.
  if (device_.is_cuda() && ordered_on_ && *ordered_on_ == stream_) {
    if (keeps_sources_) defer(std::move(pending_), HostBuffer());
    return;
  }
  defer(std::move(pending_), std::move(memory_));
}

void Storage::set_pending(Event event, std::vector<std::shared_ptr<const Storage>> sources,
                          std::optional<Stream> ordered_on) {
  pending_ = event;  // first: whatever fails below, the storage waits for the work
  keeps_sources_ = false;
  ordered_on_ = ordered_on;
  if (ordered_on) {
    // The work runs on a stream of this storage's device (of the source's, for a copy to the
    // host): a block of that device is given back behind it, on the GPU.
    std::erase_if(sources, [&](const std::shared_ptr<const Storage>& source) {
      if (!source || !source->stream_ordered()) return false;
      if (device_.is_cuda() && device_ != source->device()) return false;  // a peer copy
      source->add_stream_use(*ordered_on);
      return true;
    });
  }
  // Work done already (a copy that completed synchronously) has nothing left to read.
  if (sources.empty() || known_done(event)) return;
  pending_ = Event(std::make_shared<PendingWrite>(std::move(event), std::move(sources)));
  keeps_sources_ = true;
}

bool Storage::ordered_on(Stream stream) const {
  if (ordered_on_ && *ordered_on_ == stream) return true;
  return known_done(pending());
}

void Storage::add_stream_use(Stream stream) const {
  if (stream == stream_) return;
  std::lock_guard lock(uses_mutex_);
  if (std::find(uses_.begin(), uses_.end(), stream) == uses_.end()) uses_.push_back(stream);
}

const Event& Storage::pending() const {
  if (keeps_sources_) (void)pending_.ready();  // lets the sources of finished work go
  return pending_;
}

std::shared_ptr<Storage> allocate_storage(std::size_t nbytes, Device device, bool pinned,
                                          Stream stream) {
  sweep();
  if (device.is_cuda()) {
    DeviceBuffer buffer = DeviceBuffer::allocate(device, nbytes, stream);
    return std::make_shared<Storage>(std::move(buffer), device, false, stream);
  }
  if (pinned) {
    PinnedPool::Block block = PinnedPool::global().acquire(nbytes);
    const bool locked = block.locked();
    return std::make_shared<Storage>(std::move(block), device, locked);
  }
  return std::make_shared<Storage>(HostBuffer::allocate(nbytes), device, false);
}

}  // namespace ferry::detail
