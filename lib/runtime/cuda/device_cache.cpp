// The caching allocator of device memory: blocks by size class, per device, kept after use and
// handed out again, so that steady-state work never calls cudaMalloc or cudaFree (which
// synchronizes the whole device). A block given back carries an event recorded on the stream
// that used it; whoever takes it next makes its own stream wait for that event, on the GPU.

#include <array>
#include <bit>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/cuda_handles.hpp"
#include "runtime/cuda/events.hpp"
#include "runtime/cuda_api.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail::cuda {
namespace {

constexpr std::size_t kSmallest = 512;
// Larger requests are no memory a device has: refused before any rounding can overflow.
constexpr std::size_t kLargest = std::size_t{1} << 56;

struct FreeBlock {
  void* ptr = nullptr;
  cudaEvent_t done = nullptr;  // recorded when it was given back; nullptr: nothing pending
};

struct Cache {
  std::mutex mutex;
  std::map<std::size_t, std::vector<FreeBlock>> free;  // by size class
  std::unordered_map<void*, std::size_t> in_use;       // block -> its size class
  DeviceCacheStats stats;
};

Cache& cache(int index) { return per_device<Cache>(index); }

// Four classes per power of two: at most a quarter of a block is slack.
std::size_t size_class(std::size_t nbytes) noexcept {
  if (nbytes <= kSmallest) return kSmallest;
  const std::size_t p = std::bit_floor(nbytes);
  if (p == nbytes) return nbytes;
  const std::size_t step = p / 4;
  return p + (nbytes - p + step - 1) / step * step;
}

std::vector<FreeBlock> take_all(Cache& c) {
  std::vector<FreeBlock> out;
  std::lock_guard lock(c.mutex);
  for (auto& [bytes, list] : c.free) {
    c.stats.cached_bytes -= bytes * list.size();
    out.insert(out.end(), list.begin(), list.end());
  }
  c.free.clear();
  return out;
}

void trim(int index, Cache& c) {
  std::vector<FreeBlock> blocks = take_all(c);
  if (blocks.empty()) return;
  DeviceGuard guard(index);
  note_host_sync();  // cudaFree waits for the whole device
  std::size_t freed = 0;
  cudaError_t first = cudaSuccess;
  for (const FreeBlock& b : blocks) {
    release_event(index, b.done, EventKind::plain);
    const cudaError_t status = cudaFree(b.ptr);
    if (status == cudaSuccess) {
      ++freed;
    } else if (first == cudaSuccess) {
      first = status;
    }
  }
  {
    std::lock_guard lock(c.mutex);
    c.stats.frees += freed;
  }
  FERRY_CUDA_CHECK(first);
}

}  // namespace

void* device_alloc(int index, std::size_t nbytes, Stream stream) {
  Cache& c = cache(index);
  if (nbytes > kLargest) {
    throw DeviceError("cuda:" + std::to_string(index) + ": " + std::to_string(nbytes) +
                      " bytes is more memory than a device has");
  }
  const std::size_t bytes = size_class(nbytes);
  FreeBlock block;
  {
    std::lock_guard lock(c.mutex);
    auto it = c.free.find(bytes);
    if (it != c.free.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      c.in_use.emplace(block.ptr, bytes);
      c.stats.hits += 1;
      c.stats.cached_bytes -= bytes;
      c.stats.in_use_bytes += bytes;
    }
  }
  if (block.ptr != nullptr) {
    if (block.done != nullptr) {
      // The new user's stream waits for the old users' work, on the GPU.
      const cudaEvent_t done = block.done;
      try {
        DeviceGuard guard(index);
        FERRY_CUDA_CHECK(cudaStreamWaitEvent(stream, done, 0));
      } catch (...) {
        release_event(index, done, EventKind::plain);
        device_free(block.ptr, nullptr);
        throw;
      }
      release_event(index, done, EventKind::plain);
    }
    return block.ptr;
  }
  DeviceGuard guard(index);
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    trim(index, c);  // what the cache holds may make room
    status = cudaMalloc(&p, bytes);
  }
  FERRY_CUDA_CHECK(status);
  try {
    std::lock_guard lock(c.mutex);
    c.in_use.emplace(p, bytes);
    c.stats.mallocs += 1;
    c.stats.in_use_bytes += bytes;
  } catch (...) {
    ignore(cudaFree(p));
    throw;
  }
  return p;
}

void device_free(void* ptr, Stream stream) noexcept {
  if (ptr == nullptr) return;
  for (int index = 0; index < kMaxDevices; ++index) {
    Cache& c = cache(index);
    std::size_t bytes = 0;
    {
      std::lock_guard lock(c.mutex);
      auto it = c.in_use.find(ptr);
      if (it == c.in_use.end()) continue;
      bytes = it->second;
      c.in_use.erase(it);
      c.stats.in_use_bytes -= bytes;
    }
    FreeBlock block{ptr, nullptr};
    try {
      DeviceGuard guard(index);
      block.done = acquire_event(index, EventKind::plain);
      FERRY_CUDA_CHECK(cudaEventRecord(block.done, stream));
    } catch (...) {
      // No event (the runtime is shutting down, or the context is lost): the block cannot be
      // handed out safely, and freeing it would wait for the device. It stays unused.
      (void)cudaGetLastError();
      return;
    }
    try {
      std::lock_guard lock(c.mutex);
      c.free[bytes].push_back(block);
      c.stats.cached_bytes += bytes;
    } catch (...) {  // no memory for the list
      release_event(index, block.done, EventKind::plain);
    }
    return;
  }
}

DeviceCacheStats device_cache_stats(int index) {
  Cache& c = cache(index);
  std::lock_guard lock(c.mutex);
  return c.stats;
}

void device_cache_trim(int index) { trim(index, cache(index)); }

void join_streams(int index, Stream waiter, Stream waited) {
  if (waiter == waited) return;
  const PooledEvent event(index, EventKind::plain);
  DeviceGuard guard(index);
  FERRY_CUDA_CHECK(cudaEventRecord(event.get(), waited));
  FERRY_CUDA_CHECK(cudaStreamWaitEvent(waiter, event.get(), 0));
}

void synchronize_stream(int index, Stream stream) {
  DeviceGuard guard(index);
  const cudaError_t status = cudaStreamQuery(stream);
  if (status == cudaSuccess) return;
  if (status != cudaErrorNotReady) FERRY_CUDA_CHECK(status);
  (void)cudaGetLastError();
  // Through a blocking-sync event, not cudaStreamSynchronize, which may spin (the context's
  // default scheduling): wait_event counts the wait.
  const PooledEvent event(index, EventKind::plain);
  FERRY_CUDA_CHECK(cudaEventRecord(event.get(), stream));
  wait_event(index, event.get());
}

}  // namespace ferry::detail::cuda
