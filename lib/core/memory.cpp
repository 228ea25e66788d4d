#include "ferry/memory.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checked.hpp"
#include "ferry/error.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry {
namespace {

constexpr std::size_t kHostAlignment = 64;

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

// `n` (at least 1) rounded up to a multiple of `to`, or nothing when that overflows.
std::optional<std::size_t> round_up(std::size_t n, std::size_t to) noexcept {
  const auto sum = detail::try_add<std::size_t>(n == 0 ? 1 : n, to - 1);
  if (!sum) return std::nullopt;
  return *sum / to * to;
}

// The most one host allocation may take: the machine's RAM and swap together, as Linux's own
// overcommit heuristic. Anything larger could never be filled, and asking the allocator for it
// aborts under the sanitizers instead of failing.
std::size_t host_memory_limit() noexcept {
  static const std::size_t limit = [] {
    struct sysinfo info {};
    if (::sysinfo(&info) != 0) return std::size_t{std::numeric_limits<std::ptrdiff_t>::max()};
    const auto total = detail::try_add<std::size_t>(info.totalram, info.totalswap);
    const auto bytes = total ? detail::try_mul<std::size_t>(*total, info.mem_unit) : std::nullopt;
    return bytes ? *bytes : std::size_t{std::numeric_limits<std::ptrdiff_t>::max()};
  }();
  return limit;
}

// The system calls themselves: sanitizer runtimes replace mlock/munlock with no-ops that
// report success, and locked() must tell the truth.
bool lock_pages(void* p, std::size_t n) noexcept { return ::syscall(SYS_mlock, p, n) == 0; }
void unlock_pages(void* p, std::size_t n) noexcept { (void)::syscall(SYS_munlock, p, n); }

// `nbytes` of host memory aligned to `alignment`. \throws E, naming `what` and the size, when
// it cannot be had.
template <class E>
void* aligned_or_throw(std::size_t alignment, std::size_t nbytes, const char* what) {
  // aligned_alloc needs a size that is a multiple of the alignment, and a non-zero one.
  const std::optional<std::size_t> bytes = round_up(nbytes, alignment);
  if (!bytes || *bytes > host_memory_limit()) {
    throw E(std::string(what) + ": " + std::to_string(nbytes) +
            " bytes is more than this machine's memory (" + std::to_string(host_memory_limit()) +
            " bytes of RAM and swap)");
  }
  void* p = std::aligned_alloc(alignment, *bytes);
  if (p == nullptr) {
    throw E(std::string(what) + ": out of host memory for " + std::to_string(nbytes) + " bytes");
  }
  return p;
}

// The size of a transparent huge page (2 MiB on x86-64), or 0 where the kernel has none.
std::size_t huge_page_size() noexcept {
  static const std::size_t size = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    std::size_t n = 0;
    return (in >> n) && std::has_single_bit(n) ? n : std::size_t{0};
  }();
  return size;
}

// Asks for huge pages over the whole huge pages inside [p, p + n) (MADV_HUGEPAGE; the ends stay
// in small pages, so nothing past `n` is made resident). A fresh allocation's first touch,
// whether a memcpy or a device-to-host copy, then faults once per 2 MiB instead of once per
// 4 KiB: 64 MiB first written 5x faster on the machine that measured it (1.5 GB/s was `cpu()`'s
// rate into fresh memory on an H200's host). Only a hint: where huge pages are off ("never"),
// or none are free, the pages are small as before.
void advise_huge_pages(void* p, std::size_t n) noexcept {
  const std::size_t huge = huge_page_size();
  if (huge == 0 || n < 2 * huge) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (begin + huge - 1) / huge * huge;
  const std::uintptr_t last = (begin + n) / huge * huge;
  if (last > first) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): the address of memory this buffer owns
    (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
}

}  // namespace

// ---- HostBuffer -----------------------------------------------------------------------

HostBuffer HostBuffer::allocate(std::size_t nbytes) {
  HostBuffer b;
  b.data_ = aligned_or_throw<ConfigError>(kHostAlignment, nbytes, "HostBuffer::allocate");
  b.size_ = nbytes;
  advise_huge_pages(b.data_, nbytes);
  return b;
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HostBuffer::~HostBuffer() { std::free(data_); }

// ---- PinnedBuffer ---------------------------------------------------------------------

PinnedBuffer PinnedBuffer::allocate(std::size_t nbytes) {
  PinnedBuffer b;
  b.size_ = nbytes;
  if (detail::cuda::device_count() > 0) {
    b.data_ = detail::cuda::host_alloc(nbytes == 0 ? 1 : nbytes);
    b.lock_ = Lock::cuda;
    return b;
  }
  b.data_ = aligned_or_throw<ConfigError>(page_size(), nbytes, "PinnedBuffer::allocate");
  const std::size_t bytes = round_up(nbytes, page_size()).value_or(0);  // fits: allocated
  // mlock fails without CAP_IPC_LOCK beyond RLIMIT_MEMLOCK: then the memory is ordinary
  // pageable memory and locked() says so.
  b.lock_ = lock_pages(b.data_, bytes) ? Lock::mlock : Lock::none;
  return b;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      lock_(std::exchange(other.lock_, Lock::none)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    PinnedBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    lock_ = std::exchange(other.lock_, Lock::none);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ == nullptr) return;
  if (lock_ == Lock::cuda) {
    detail::cuda::host_free(data_);
    return;
  }
  if (lock_ == Lock::mlock) unlock_pages(data_, round_up(size_, page_size()).value_or(0));
  std::free(data_);
}

// ---- DeviceBuffer ---------------------------------------------------------------------

DeviceBuffer DeviceBuffer::allocate(Device device, std::size_t nbytes) {
  return allocate(device, nbytes, nullptr);
}

DeviceBuffer DeviceBuffer::allocate(Device device, std::size_t nbytes, Stream stream) {
  check_usable(device);
  if (device.is_cpu()) {
    // Host memory stands in for a device: used by the host copy engine.
    auto free_host = [](void* /*context*/, void* data) noexcept { std::free(data); };
    return {aligned_or_throw<DeviceError>(kHostAlignment, nbytes, "DeviceBuffer::allocate"), nbytes,
            device, free_host, nullptr};
  }
  // The context is the stream the block's work is queued on: it goes back to the cache behind it.
  auto free_device = [](void* context, void* data) noexcept {
    detail::cuda::device_free(data, static_cast<Stream>(context));
  };
  return {detail::cuda::device_alloc(device.index(), nbytes, stream), nbytes, device, free_device,
          stream};
}

DeviceCacheStats device_cache_stats(Device device) {
  if (device.is_cpu()) return {};
  check_usable(device);
  return detail::cuda::device_cache_stats(device.index());
}

void empty_device_cache(Device device) {
  if (device.is_cpu()) return;
  check_usable(device);
  detail::cuda::device_cache_trim(device.index());
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_(other.device_),
      free_(std::exchange(other.free_, nullptr)),
      context_(std::exchange(other.context_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
    free_ = std::exchange(other.free_, nullptr);
    context_ = std::exchange(other.context_, nullptr);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr && free_ != nullptr) free_(context_, data_);
  data_ = nullptr;
  free_ = nullptr;
}

// ---- PinnedPool -----------------------------------------------------------------------

struct PinnedPool::Block::State {
  explicit State(std::size_t max_cached) : max_cached_bytes(max_cached) {}
  std::mutex mutex;
  std::map<std::size_t, std::vector<PinnedBuffer>> free;  // by size class
  Stats stats;
  std::size_t max_cached_bytes;
};

PinnedPool::PinnedPool(std::size_t max_cached_bytes)
    : state_(std::make_shared<Block::State>(max_cached_bytes)) {}

PinnedPool& PinnedPool::global() {
  // Never destroyed: blocks may outlive static destruction; they hold the state anyway.
  static auto* pool = new PinnedPool();
  return *pool;
}

namespace {
constexpr std::size_t kMaxClass = (std::numeric_limits<std::size_t>::max() >> 1) + 1;
}

std::size_t PinnedPool::size_class(std::size_t nbytes) noexcept {
  constexpr std::size_t kMin = 4096;
  if (nbytes > kMaxClass) return nbytes;  // no power of two above it: a class of its own
  return nbytes <= kMin ? kMin : std::bit_ceil(nbytes);
}

PinnedPool::Block PinnedPool::acquire(std::size_t nbytes) {
  if (nbytes > kMaxClass) {
    throw ConfigError("PinnedPool::acquire: " + std::to_string(nbytes) +
                      " bytes is more than any size class");
  }
  const std::size_t cls = size_class(nbytes);
  {
    std::lock_guard lock(state_->mutex);
    auto it = state_->free.find(cls);
    if (it != state_->free.end() && !it->second.empty()) {
      PinnedBuffer b = std::move(it->second.back());
      it->second.pop_back();
      state_->stats.hits++;
      state_->stats.cached_bytes -= cls;
      state_->stats.in_use_bytes += cls;
      return Block(state_, std::move(b));
    }
  }
  PinnedBuffer b = PinnedBuffer::allocate(cls);  // outside the lock: may be slow
  std::lock_guard lock(state_->mutex);
  state_->stats.misses++;
  state_->stats.in_use_bytes += cls;
  return Block(state_, std::move(b));
}

PinnedPool::Stats PinnedPool::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

void PinnedPool::trim() {
  std::map<std::size_t, std::vector<PinnedBuffer>> dropped;
  std::lock_guard lock(state_->mutex);
  dropped.swap(state_->free);
  state_->stats.cached_bytes = 0;
}

void PinnedPool::Block::give_back() noexcept {
  if (!pool_ || buffer_.data() == nullptr) return;
  const std::size_t cls = buffer_.size();
  PinnedBuffer dropped;
  {
    std::lock_guard lock(pool_->mutex);
    pool_->stats.in_use_bytes -= cls;
    const auto cached = detail::try_add<std::size_t>(pool_->stats.cached_bytes, cls);
    if (cached && *cached <= pool_->max_cached_bytes) {
      try {
        pool_->free[cls].push_back(std::move(buffer_));
        pool_->stats.cached_bytes += cls;
      } catch (...) {
        dropped = std::move(buffer_);
      }
    } else {
      dropped = std::move(buffer_);
    }
  }
  pool_.reset();
}

PinnedPool::Block& PinnedPool::Block::operator=(Block&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::move(other.pool_);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

PinnedPool::Block::~Block() { give_back(); }

}  // namespace ferry
