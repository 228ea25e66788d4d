#pragma once

// The CUDA runtime as the rest of ferry sees it, the bottom rung of the library: devices,
// pinned host memory and device memory, with no CUDA types here. Implemented by
// runtime/cuda/cuda_api.cpp when ferry is built with CUDA, by runtime/no_cuda/ otherwise.

#include <cstddef>
#include <string>

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
/// `nbytes` (at least 1) of memory on cuda:index, from cudaMalloc.
/// \pre cuda:index is usable (device_problem(index) is ""). \throws DeviceError.
void* device_alloc(int index, std::size_t nbytes);
/// Frees device_alloc memory; tolerates a runtime that is shutting down.
void device_free(void* ptr) noexcept;

}  // namespace ferry::detail::cuda
