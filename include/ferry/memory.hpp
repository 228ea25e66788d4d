#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "ferry/device.hpp"
#include "ferry/export.hpp"
#include "ferry/stream.hpp"

namespace ferry {

/// Pageable host memory, aligned to 64 bytes. Move-only; the destructor frees it.
class FERRY_API HostBuffer {
 public:
  HostBuffer() noexcept = default;
  /// \throws ConfigError naming the size when it is more than the machine's RAM and swap, or
  /// the memory cannot be had.
  static HostBuffer allocate(std::size_t nbytes);
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Page-locked host memory: from cudaHostAlloc where CUDA is usable (so the GPU's DMA engine
/// reads it directly), otherwise page-aligned memory locked with mlock where the system allows.
/// locked() says truthfully whether the pages are locked. Move-only; the destructor unlocks
/// and frees.
class FERRY_API PinnedBuffer {
 public:
  /// How the pages were locked.
  enum class Lock : std::uint8_t { none, mlock, cuda };

  PinnedBuffer() noexcept = default;
  /// \throws ConfigError as HostBuffer::allocate, or DeviceError when cudaHostAlloc fails.
  static PinnedBuffer allocate(std::size_t nbytes);
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  /// True when the pages are locked in RAM (by CUDA or by mlock).
  bool locked() const noexcept { return lock_ != Lock::none; }
  Lock lock() const noexcept { return lock_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
  Lock lock_ = Lock::none;
};

/// Host memory that other processes can map: a memfd (Linux), mapped shared here. Where `pin`
/// and CUDA is usable its pages are registered with CUDA (cudaHostRegister, portable), so that the
/// GPU's DMA engine reads it as it reads cudaHostAlloc's memory. While it lives, shared_region()
/// finds it from any address inside it. A loader makes its staging slots of it when its dataset's
/// reads are done by other processes (Dataset::shares_staging): they write samples straight into
/// the slots. Move-only; the destructor unregisters, unmaps and closes it (another process's
/// mapping keeps the memory until that process lets it go).
class FERRY_API SharedBuffer {
 public:
  SharedBuffer() noexcept = default;
  /// \throws ConfigError as HostBuffer::allocate (or when no memfd can be made), DeviceError
  /// when CUDA refuses to register it.
  static SharedBuffer allocate(std::size_t nbytes, bool pin);
  SharedBuffer(SharedBuffer&& other) noexcept;
  SharedBuffer& operator=(SharedBuffer&& other) noexcept;
  SharedBuffer(const SharedBuffer&) = delete;
  SharedBuffer& operator=(const SharedBuffer&) = delete;
  ~SharedBuffer();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  /// True when CUDA registered its pages (page-locked).
  bool locked() const noexcept { return registered_; }
  /// Its memfd (close-on-exec): another process maps it (MAP_SHARED) from offset 0.
  int fd() const noexcept { return fd_; }
  /// Unique in this process for its life: a buffer made later never has an earlier one's id.
  std::uint64_t id() const noexcept { return id_; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t mapped_ = 0;  // size_ rounded up to pages
  int fd_ = -1;
  std::uint64_t id_ = 0;
  bool registered_ = false;
};

/// A place in a live SharedBuffer: its memfd and id, the buffer's size, and the offset of the
/// address asked about.
struct SharedRegion {
  int fd = -1;
  std::uint64_t id = 0;
  std::size_t size = 0;
  std::size_t offset = 0;
};

/// The live SharedBuffer that holds `bytes` bytes from `p`, or false. The fd stays valid while
/// that buffer lives (the caller's to ensure: it is writing into it).
FERRY_API bool shared_region(const void* p, std::size_t bytes, SharedRegion& out) noexcept;
/// Bumped each time a SharedBuffer is freed: a process that mapped regions looks again (with
/// shared_region_live) at which are gone when it changed.
FERRY_API std::uint64_t shared_regions_freed() noexcept;
/// True while the SharedBuffer with this id lives.
FERRY_API bool shared_region_live(std::uint64_t id) noexcept;

/// Memory of a device: cudaMalloc on a GPU, or the host copy engine's stand-in buffers.
/// Move-only; the destructor frees it (tolerating a CUDA runtime that is shutting down).
class FERRY_API DeviceBuffer {
 public:
  using Free = void (*)(void* context, void* data) noexcept;

  DeviceBuffer() noexcept = default;
  /// \throws DeviceError when the device is not usable or out of memory (for the CPU's
  /// stand-in: more than the machine's RAM and swap, or memory that cannot be had).
  /// GPU memory comes from the device's caching allocator, for work on the default stream.
  static DeviceBuffer allocate(Device device, std::size_t nbytes);
  /// The same for work queued on `stream`: the block is given back to the cache, when the
  /// buffer goes, behind the work queued on `stream` by then (the host does not wait).
  static DeviceBuffer allocate(Device device, std::size_t nbytes, Stream stream);
  /// Adopts `data`; `free(context, data)` releases it.
  DeviceBuffer(void* data, std::size_t size, Device device, Free free, void* context) noexcept
      : data_(data), size_(size), device_(device), free_(free), context_(context) {}
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  Device device() const noexcept { return device_; }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  std::size_t size_ = 0;
  Device device_;
  Free free_ = nullptr;
  void* context_ = nullptr;
};

/// The figures of a GPU's caching allocator (device_cache_stats()). Device memory for tensors and
/// loaders comes from a cache per device, by size class, as in PyTorch's caching allocator:
/// cudaMalloc only when no cached block fits, cudaFree only on empty_device_cache() or at exit.
struct DeviceCacheStats {
  std::uint64_t mallocs = 0;     ///< cudaMalloc calls
  std::uint64_t hits = 0;        ///< allocations served from the cache
  std::uint64_t frees = 0;       ///< cudaFree calls (empty_device_cache, out-of-memory retries)
  std::size_t cached_bytes = 0;  ///< free blocks held for reuse
  std::size_t in_use_bytes = 0;  ///< blocks handed out and not yet given back
};
/// The caching allocator's figures for `device` (zeros for the CPU or a GPU never used).
/// \throws DeviceError when `device` is a GPU that is not usable.
FERRY_API DeviceCacheStats device_cache_stats(Device device);
/// Waits for `device`, then frees every cached block of its caching allocator (nothing for the
/// CPU). \throws DeviceError when `device` is a GPU that is not usable.
FERRY_API void empty_device_cache(Device device);

/// A cache of pinned buffers by size class (powers of two from 4 KiB), so that pinning the
/// same sizes again costs no cudaHostAlloc or mlock. Thread-safe.
class FERRY_API PinnedPool {
 public:
  struct Stats {
    std::uint64_t hits = 0;        ///< acquire() served from the cache
    std::uint64_t misses = 0;      ///< acquire() that allocated
    std::size_t cached_bytes = 0;  ///< free buffers held for reuse
    std::size_t in_use_bytes = 0;  ///< buffers handed out and not yet returned
  };

  /// A buffer on loan from the pool; returns to it when destroyed. Move-only.
  class Block {
   public:
    Block() noexcept = default;
    Block(Block&&) noexcept = default;
    Block& operator=(Block&& other) noexcept;
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;
    ~Block();
    void* data() const noexcept { return buffer_.data(); }
    /// The usable size: the size class, at least what was asked for.
    std::size_t size() const noexcept { return buffer_.size(); }
    bool locked() const noexcept { return buffer_.locked(); }

   private:
    friend class PinnedPool;
    struct State;
    Block(std::shared_ptr<State> pool, PinnedBuffer buffer) noexcept
        : pool_(std::move(pool)), buffer_(std::move(buffer)) {}
    void give_back() noexcept;
    std::shared_ptr<State> pool_;
    PinnedBuffer buffer_;
  };

  /// \param max_cached_bytes free bytes kept for reuse; beyond it, returned buffers are freed.
  explicit PinnedPool(std::size_t max_cached_bytes = std::size_t{1} << 30);
  /// The process-wide pool that Tensor::pin_memory() draws from.
  static PinnedPool& global();

  /// A buffer of at least `nbytes` (rounded up to its size class). \throws as PinnedBuffer, and
  /// ConfigError for more bytes than the largest size class (2^63).
  Block acquire(std::size_t nbytes);
  Stats stats() const;
  /// Frees every cached buffer.
  void trim();
  /// The size class that serves `nbytes`; `nbytes` itself above 2^63, which acquire() refuses.
  static std::size_t size_class(std::size_t nbytes) noexcept;

 private:
  std::shared_ptr<Block::State> state_;
};

}  // namespace ferry
