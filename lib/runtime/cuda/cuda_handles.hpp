#pragma once

// RAII handles for the CUDA runtime. Only lib/runtime/cuda/ and lib/copy/cuda/ include this
// (and CUDA's headers).

#include <cuda_runtime_api.h>

#include <array>
#include <string>
#include <utility>

#include "ferry/error.hpp"

namespace ferry::detail::cuda {

/// "<file>:<line>: <expr>: <cudaGetErrorString>".
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                   int line);

/// The file a FERRY_CUDA_CHECK names: its name only where the compiler knows __FILE_NAME__.
/// __FILE__ in a unity unit is the absolute path the unit includes, so an object of every
/// checkout would differ and miss ccache in a clone at another path (docs/CI.md).
#ifdef __FILE_NAME__
#define FERRY_CUDA_CHECK_FILE __FILE_NAME__
#else
#define FERRY_CUDA_CHECK_FILE __FILE__
#endif

/// Checks a CUDA runtime call; throws DeviceError with the CUDA error text.
#define FERRY_CUDA_CHECK(expr)                                                             \
  do {                                                                                     \
    const cudaError_t ferry_status_ = (expr);                                              \
    if (ferry_status_ != cudaSuccess) {                                                    \
      ::ferry::detail::cuda::throw_cuda_error(ferry_status_, #expr, FERRY_CUDA_CHECK_FILE, \
                                              __LINE__);                                   \
    }                                                                                      \
  } while (false)

/// The most GPUs ferry keeps per-device state for.
inline constexpr int kMaxDevices = 64;

/// The `T` of cuda:index (a pool, a cache), one per device, made on first use and never
/// destroyed: what is given back during static destruction still finds it, and the runtime
/// frees the CUDA resources themselves at exit. \throws DeviceError for an index beyond
/// kMaxDevices.
template <class T>
T& per_device(int index) {
  static auto* all = new std::array<T, kMaxDevices>();
  if (index < 0 || index >= kMaxDevices) {
    throw DeviceError("cuda:" + std::to_string(index) + ": more devices than ferry serves (" +
                      std::to_string(kMaxDevices) + ")");
  }
  return (*all)[static_cast<std::size_t>(index)];
}

/// Drops a failed call's error where no one can be told (destructors, cleanup): the error is
/// cleared, so that the next CUDA call on the thread does not report it as its own.
inline void ignore(cudaError_t status) noexcept {
  if (status != cudaSuccess) (void)cudaGetLastError();
}

/// True when cuda:index's primary context exists already (asking makes none).
bool has_context(int index) noexcept;

/// Makes `device` current for the scope, and restores the previous one. A thread that never
/// chose a device reports device 0 without having a context there: then the guard leaves
/// `device` current rather than make one on device 0 (a process that uses only cuda:1 never
/// touches cuda:0).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    FERRY_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
      FERRY_CUDA_CHECK(cudaSetDevice(device));
      restore_ = has_context(previous_);
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (restore_) ignore(cudaSetDevice(previous_));
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
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
    if (stream_ != nullptr) ignore(cudaStreamDestroy(stream_));
  }
  StreamView view() const noexcept { return StreamView(stream_); }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace ferry::detail::cuda
