#pragma once

// The CUDA runtime as the rest of ferry sees it: no CUDA headers here. Implemented by
// cuda_api.cpp when ferry is built with CUDA, by no_cuda/cuda_absent.cpp otherwise.

#include <cstddef>
#include <memory>
#include <string>

namespace ferry::detail {
class CopyEngine;
}

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
/// The process-wide copy engine of cuda:index, made on first use.
/// \throws DeviceError when the device is not usable.
CopyEngine& engine(int index);
/// A copy engine of its own for cuda:index (its own stream), as a loader's copy stage uses.
/// \throws DeviceError when the device is not usable.
std::unique_ptr<CopyEngine> make_engine(int index);

}  // namespace ferry::detail::cuda
