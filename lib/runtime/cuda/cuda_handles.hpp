#pragma once

// RAII handles for the CUDA runtime. Only lib/runtime/cuda/ and lib/copy/cuda/ include this
// (and CUDA's headers).

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "ferry/error.hpp"

namespace ferry::detail::cuda {

/// "<file>:<line>: <expr>: <cudaGetErrorString>".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                   int line);

/// Checks a CUDA runtime call; throws DeviceError with the CUDA error text.
#define FERRY_CUDA_CHECK(expr)                                                           \
  do {                                                                                   \
    const cudaError_t ferry_status_ = (expr);                                            \
    if (ferry_status_ != cudaSuccess) {                                                  \
      ::ferry::detail::cuda::throw_cuda_error(ferry_status_, #expr, __FILE__, __LINE__); \
    }                                                                                    \
  } while (false)

/// Makes `device` current for the scope, and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FERRY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) FERRY_CUDA_CHECK(cudaSetDevice(device));
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() { (void)cudaSetDevice(previous_); }

 private:
  int previous_ = 0;
};

/// A non-owning stream handle.
class StreamView {
 public:
  constexpr StreamView() noexcept = default;
  constexpr explicit StreamView(cudaStream_t stream) noexcept : stream_(stream) {}
  constexpr cudaStream_t get() const noexcept { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// An owned non-blocking stream (it does not synchronize with the legacy default stream).
class CudaStream {
 public:
  CudaStream() { FERRY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  CudaStream(CudaStream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  CudaStream& operator=(CudaStream&& other) noexcept {
    std::swap(stream_, other.stream_);
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  ~CudaStream() {
    // cudaErrorCudartUnloading at exit is fine: the runtime frees it anyway.
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }
  StreamView view() const noexcept { return StreamView(stream_); }

 private:
  cudaStream_t stream_ = nullptr;
};

/// An owned event without timing (the cheap kind).
class CudaEvent {
 public:
  CudaEvent() { FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  CudaEvent(CudaEvent&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  ~CudaEvent() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
  }
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace ferry::detail::cuda
