#pragma once

// cudasim: a CPU model of CUDA devices, for running ferry's CUDA backend (lib/runtime/cuda,
// lib/copy/cuda) and its GPU tests (tests/cuda) in CI on machines without a GPU. It implements
// the part of the CUDA runtime API that ferry calls (include/cuda_runtime_api.h), with the
// semantics that ferry's correctness rests on:
//
//  * Streams run their work in order, asynchronously, on a thread each, after an optional delay
//    per operation (FERRY_CUDASIM_DELAY_US): a host that reads a result before waiting for it
//    reads stale bytes. The legacy default stream (nullptr) orders itself with blocking streams.
//  * Events record a point in a stream; cudaStreamWaitEvent orders streams; queries never block.
//  * Device memory is host memory at an address with bit 62 set, which no host instruction can
//    dereference: touching device memory from the host faults, as it does on a GPU. Only copies
//    and kernels, which run on streams, see its bytes. Fresh device memory holds garbage.
//  * Copies check their kind against the memory they touch; copies that involve pageable host
//    memory block the host, as CUDA's do (counted: Counts::pageable_copies). A copy between two
//    devices works with or without peer access (cudaMemcpyPeer, or cudaMemcpyDefault with
//    unified addressing), as CUDA stages it.
//  * A launch is checked as CUDA checks it, against an H200's limits (cudaGetDeviceProperties):
//    at most 1024 threads a block, block dimensions up to (1024, 1024, 64), grid dimensions up to
//    (2^31 - 1, 65535, 65535), none zero, dynamic shared memory up to 48 KiB (the opt-in to more,
//    cudaFuncSetAttribute, is not modelled: ferry's kernels use none); else it fails with
//    cudaErrorInvalidConfiguration, which is not sticky. A kernel into a stream of another device
//    than the current one fails with cudaErrorInvalidResourceHandle.
//  * Every load and store of a kernel (FERRY_LD, FERRY_ST in cudasim_device.hpp) is checked: an
//    address not aligned to its type's alignment faults with cudaErrorMisalignedAddress; one
//    outside every live allocation of the kernel's device and of page-locked host memory (one
//    byte past a cudaMalloc block included), in freed memory, in pageable host memory, or on
//    another device without cudaDeviceEnablePeerAccess faults with cudaErrorIllegalAddress.
//    Faults, and work that touches freed memory, make the device's error sticky: every later
//    call on it fails with it.
//  * cudaFree synchronizes the device; cudaSetDevice makes the device's context; the driver's
//    cuDevicePrimaryCtxGetState answers from the same model.
//  * FERRY_CUDASIM_DEVICES devices (2 by default; 0: "no CUDA-capable device"), each with
//    FERRY_CUDASIM_MEMORY_MIB of memory (an H200's 143771 by default; only what is allocated is
//    host memory).
//
// ferry's kernels (lib/copy/cuda/kernels.cu) run too, compiled as C++ (cudasim_device.hpp): each
// launch runs every thread of its grid in turn, so their indexing, grid-stride loops, vector
// widths, alignment and bounds are checked against the CPU twins. What it cannot show: races
// between GPU threads (the kernels share no data between threads, and the threads of a launch run
// one after another), the device's own float rounding (the stand-ins round as ferry's CPU rules
// do), speed, and the real driver's corner cases.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

namespace ferry_cudasim {

/// The limits of the device cudasim models (an H200, sm_90), as cudaGetDeviceProperties reports.
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
inline constexpr unsigned kMaxGridDim[3] = {2147483647U, 65535, 65535};
inline constexpr std::size_t kSharedMemPerBlock = 49152;

/// Queues `work` on `stream` (of the current device), as a kernel launch of `grid` x `block` with
/// `shared_bytes` of dynamic shared memory: a launch error (a sticky one, a stream of another
/// device, a configuration beyond the device's limits) is returned and nothing is queued; a Fault
/// thrown by `work` when it runs makes the device's error sticky.
cudaError_t launch(cudaStream_t stream, dim3 grid, dim3 block, std::size_t shared_bytes,
                   std::function<void()> work);

/// Inside work queued by launch(): the host address of a `bytes`-byte access at `ptr` that must
/// be `align`-aligned, in device memory of the stream's device (or of a peer whose access it
/// enabled) or page-locked host memory. \throws Fault (cudaErrorMisalignedAddress) when it is
/// misaligned, Fault (cudaErrorIllegalAddress) when it is not inside one live allocation of that
/// kind.
void* device_access(const void* ptr, std::size_t bytes, std::size_t align);

/// What device_access throws: the kernel read or wrote memory it may not; the device's sticky
/// error becomes `error`.
struct Fault {
  cudaError_t error = cudaErrorIllegalAddress;
};

/// The next `times` calls of the runtime function `function` (e.g. "cudaMemcpyAsync", or
/// "launch" for a kernel) fail with `error` and do nothing else. Calls on every thread count, or
/// with `this_thread_only`, the calling thread's only.
void fail_next(const char* function, cudaError_t error, int times = 1,
               bool this_thread_only = false);
/// Forgets every pending fail_next.
void clear_failures();

/// Device `index` faults as if a kernel had touched an illegal address: its error is sticky from
/// now on, and every later call that works on it returns cudaErrorIllegalAddress.
void fault(int index);

/// True when device `index` has its context (cudaSetDevice, or any call that needs one, ran
/// there).
bool has_context(int index);

/// Calls made so far, in the whole process, of the runtime functions that a steady state must
/// not make: allocations and frees (cudaFree waits for the device), event creation (events come
/// from a pool), host functions on a stream, and host waits that found work unfinished.
struct Counts {
  std::uint64_t mallocs = 0;          ///< cudaMalloc
  std::uint64_t frees = 0;            ///< cudaFree of memory
  std::uint64_t host_allocs = 0;      ///< cudaHostAlloc, cudaMallocHost
  std::uint64_t host_frees = 0;       ///< cudaFreeHost
  std::uint64_t host_registers = 0;   ///< cudaHostRegister
  std::uint64_t events_made = 0;      ///< cudaEventCreate*
  std::uint64_t spinning_events = 0;  ///< ... without cudaEventBlockingSync
  std::uint64_t host_functions = 0;   ///< cudaLaunchHostFunc
  std::uint64_t blocking_waits = 0;   ///< synchronizations that had to wait
  std::uint64_t pageable_copies = 0;  ///< cudaMemcpyAsync that blocked the host: pageable memory
};
Counts counts();

}  // namespace ferry_cudasim
