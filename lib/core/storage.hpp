#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "ferry/device.hpp"
#include "ferry/event.hpp"
#include "ferry/memory.hpp"
#include "ferry/stream.hpp"

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

  /// `stream`: the CUDA stream the storage's device work is ordered on (its memory was allocated
  /// for it, or, for a loader batch, the consumer's stream); nullptr for host memory.
  Storage(Memory memory, Device device, bool pinned, Stream stream = nullptr) noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  /// Never blocks. Streams outside ferry that used the storage (add_stream_use) are joined into
  /// its stream on the GPU; memory still being written, and the sources the work reads, are
  /// kept aside until the work is done (released by a later storage's allocation or
  /// destruction that finds it done).
  ~Storage();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  Device device() const noexcept { return device_; }
  bool pinned() const noexcept { return pinned_; }
  Stream stream() const noexcept { return stream_; }
  /// \pre called before the storage is shared with another thread.
  void set_stream(Stream stream) noexcept { stream_ = stream; }

  /// Records that asynchronous work writes this storage, reading `sources`, which stay alive
  /// until the work is known to be done (see above). Work already done keeps no sources.
  /// `ordered_on`: a stream already ordered after the work (it waits for it, or runs it). A
  /// source in device memory from the caching allocator, of the device whose stream runs the
  /// work, is not kept: it records `ordered_on` as a stream that uses it (add_stream_use), so
  /// that when it goes its block returns to the cache behind the work, on the GPU, and a host
  /// that runs ahead of the GPU reuses blocks instead of piling up new ones.
  /// \pre called before the storage is shared with another thread.
  /// \throws DeviceError when CUDA cannot tell whether `event` is done.
  void set_pending(Event event, std::vector<std::shared_ptr<const Storage>> sources,
                   std::optional<Stream> ordered_on = std::nullopt);
  /// The event of the pending write (a complete event when there is none). Looking lets the
  /// sources of finished work go. \throws DeviceError when CUDA cannot tell.
  const Event& pending() const;
  /// True when work queued on `stream` from now on runs after the pending write: there is none,
  /// it is done, or `stream` is already ordered after it. Never blocks.
  bool ordered_on(Stream stream) const;
  /// Work on `stream`, which ferry does not see (a DLPack consumer's), reads the storage: when
  /// the storage goes, its stream waits for the work queued on `stream` by then.
  void add_stream_use(Stream stream) const;
  /// True when the memory is a block of the caching allocator (DeviceBuffer): given back in
  /// stream order, it needs no host to keep it while work reads it.
  bool stream_ordered() const noexcept { return std::holds_alternative<DeviceBuffer>(memory_); }

 private:
  Memory memory_;
  void* data_;
  std::size_t size_;
  Device device_;
  bool pinned_;
  Stream stream_;
  Event pending_;               // holds the sources while the work runs
  bool keeps_sources_ = false;  // pending_ is a PendingWrite
  std::optional<Stream> ordered_on_;
  mutable std::mutex uses_mutex_;
  mutable std::vector<Stream> uses_;  // guarded by uses_mutex_
};

/// New storage of `nbytes` on `device`: pageable or pooled pinned memory on the CPU, device
/// memory on a GPU. \throws ConfigError when host memory of that size cannot be had;
/// DeviceError when device memory cannot.
/// `stream`: the stream the device memory's work will be queued on.
std::shared_ptr<Storage> allocate_storage(std::size_t nbytes, Device device, bool pinned,
                                          Stream stream = nullptr);

}  // namespace ferry::detail
