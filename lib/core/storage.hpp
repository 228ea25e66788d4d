#pragma once

#include <cstddef>
#include <memory>
#include <variant>
#include <vector>

#include "ferry/device.hpp"
#include "ferry/event.hpp"
#include "ferry/memory.hpp"

namespace ferry::detail {

/// The bytes behind one or more Tensors, and the asynchronous work that writes them.
///
/// Threads: the pending write is set once, by the thread that made the storage, before any
/// Tensor holding it is handed out; afterwards the storage is only read, from any thread.
///
/// Sources: storage written by asynchronous work keeps the storages that work reads alive until
/// it is known to be complete, and no longer: the first query or wait (from any thread, through
/// any copy of the event) that finds the work done lets them go. A copy of a loader batch must
/// not hold the batch's ring buffer once the copy is made.
class Storage {
 public:
  /// Memory that ferry does not own, kept alive by `owner`.
  struct External {
    void* data = nullptr;
    std::size_t size = 0;
    std::shared_ptr<void> owner;
  };
  using Memory = std::variant<HostBuffer, PinnedPool::Block, DeviceBuffer, External>;

  Storage(Memory memory, Device device, bool pinned) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  /// Waits for the pending write (work may still be reading the sources it keeps alive).
  ~Storage();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  Device device() const noexcept { return device_; }
  bool pinned() const noexcept { return pinned_; }

  /// Records that asynchronous work writes this storage, reading `sources`, which stay alive
  /// until the work is known to be done (see above). Work already done keeps no sources.
  /// \pre called before the storage is shared with another thread.
  /// \throws DeviceError when CUDA cannot tell whether `event` is done.
  void set_pending(Event event, std::vector<std::shared_ptr<const Storage>> sources);
  /// The event of the pending write (a complete event when there is none). Looking lets the
  /// sources of finished work go. \throws DeviceError when CUDA cannot tell.
  const Event& pending() const;

 private:
  Memory memory_;
  void* data_;
  std::size_t size_;
  Device device_;
  bool pinned_;
  Event pending_;               // holds the sources while the work runs
  bool keeps_sources_ = false;  // pending_ is a PendingWrite
};

/// New storage of `nbytes` on `device`: pageable or pooled pinned memory on the CPU, device
/// memory on a GPU. \throws ConfigError when host memory of that size cannot be had;
/// DeviceError when device memory cannot.
std::shared_ptr<Storage> allocate_storage(std::size_t nbytes, Device device, bool pinned);

}  // namespace ferry::detail
