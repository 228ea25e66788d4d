#pragma once

// The CUDA runtime as the rest of ferry sees it, the bottom rung of the library: devices,
// pinned host memory, device memory from a caching allocator, and stream ordering, with no CUDA
// types here (a stream is the runtime's own CUstream_st*, forward-declared). Implemented by
// runtime/cuda/ when ferry is built with CUDA, by runtime/no_cuda/ otherwise.

#include <cstddef>
#include <string>

#include "ferry/event.hpp"
#include "ferry/memory.hpp"
#include "ferry/stream.hpp"

namespace ferry::detail::cuda {

/// True when this build has the CUDA backend.
bool built() noexcept;
/// Usable CUDA devices, 0 on any failure. Computed once.
int device_count() noexcept;
/// Why no device is usable (CUDA's error text), or "" when one is.
std::string unavailable_reason();
/// "" when cuda:index is usable, else the reason in CUDA's words.
std::string device_problem(int index);
/// Page-locked host memory from cudaHostAlloc. \throws DeviceError.
void* host_alloc(std::size_t nbytes);
/// Frees host_alloc memory; tolerates a runtime that is shutting down.
void host_free(void* ptr) noexcept;
/// Page-locks `nbytes` of host memory at `ptr` for every device (cudaHostRegister, portable).
/// \throws DeviceError.
void host_register(void* ptr, std::size_t nbytes);
/// Undoes host_register; tolerates a runtime that is shutting down.
void host_unregister(void* ptr) noexcept;

/// `nbytes` (at least 1) of memory on cuda:index for work queued on `stream`, from the device's
/// caching allocator: a cached block when one of the size class is free (`stream` then waits, on
/// the GPU, for the work that used it before), else cudaMalloc. When cudaMalloc runs out, the
/// cache is emptied and it tries once more.
/// \pre cuda:index is usable (device_problem(index) is ""). \throws DeviceError.
void* device_alloc(int index, std::size_t nbytes, Stream stream);
/// Gives device_alloc memory back to the cache once the work queued on `stream` so far is done;
/// the host does not wait. Tolerates a runtime that is shutting down.
void device_free(void* ptr, Stream stream) noexcept;
/// The caching allocator's figures for cuda:index (zeros for a device never used).
DeviceCacheStats device_cache_stats(int index);
/// Waits for the device, then cudaFree()s every cached block of cuda:index. \throws DeviceError.
void device_cache_trim(int index);

/// Work queued on `waiter` after this call waits, on the GPU, for the work queued on `waited`
/// so far; the host does not wait. Both are streams of cuda:index. \throws DeviceError.
void join_streams(int index, Stream waiter, Stream waited);
/// An event of cuda:index (pooled, blocking-sync) recorded on `stream`: ready when the work
/// queued there so far is done. \throws DeviceError.
Event record_event(int index, Stream stream);
/// Work queued on `stream` (of cuda:index) after this call waits for `event`: on the GPU for a
/// CUDA event, on the host for another kind; nothing when it is done already.
/// \throws DeviceError.
void stream_wait_event(int index, Stream stream, const Event& event);
/// True when kernels on cuda:index can read host memory at `ptr` directly (page-locked memory
/// that CUDA knows: cudaHostAlloc'd or registered), at the same address. Never throws.
bool device_reads_host(int index, const void* ptr) noexcept;
/// The calling thread waits until the work queued on `stream` so far is done (a counted host
/// synchronization when it is not done yet). \throws DeviceError.
void synchronize_stream(int index, Stream stream);

}  // namespace ferry::detail::cuda
