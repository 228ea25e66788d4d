#pragma once

#include <cstdint>

#include "ferry/export.hpp"

/// The CUDA runtime's stream type, forward-declared: cudaStream_t is `CUstream_st*`, so a
/// stream from CUDA, libtorch (`at::cuda::getCurrentCUDAStream().stream()`) or CuPy passes
/// as it is, and no CUDA header is needed to include ferry's.
struct CUstream_st;

namespace ferry {

/// A CUDA stream (a cudaStream_t). nullptr is the default stream.
using Stream = CUstream_st*;

/// How many times ferry has blocked a host thread until device work finished, in this process:
/// a wait on an event or a stream that was not done yet, a synchronous copy, or a device-wide
/// synchronization. Work found done costs nothing and is not counted. A host copy engine (the
/// stand-in for a GPU in tests) counts its waits the same way. Never throws.
FERRY_API std::uint64_t host_sync_count() noexcept;

/// The same, for the calling thread only: what blocked it, not the loader's own threads (a
/// planner waiting for a staging slot) nor other threads. Never throws.
FERRY_API std::uint64_t host_sync_count_this_thread() noexcept;

}  // namespace ferry
