#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "ferry/device.hpp"
#include "ferry/dtype.hpp"
#include "ferry/error.hpp"
#include "ferry/event.hpp"
#include "ferry/export.hpp"
#include "ferry/stream.hpp"

struct DLManagedTensor;  // <dlpack/dlpack.h>; include it to use to_dlpack()

namespace ferry {

namespace detail {
class Storage;
struct TensorAccess;
}  // namespace detail

/// A contiguous n-dimensional array on a device, with shared storage: copying a Tensor shares
/// its bytes, as in PyTorch. A default-constructed Tensor is undefined (defined() is false).
///
/// Asynchrony: a tensor written by a non-blocking copy or a kernel carries the event of that
/// work (ready_event()). Everything ferry does with the tensor afterwards is ordered after it:
/// host data() waits for it; device work is queued behind it. Raw users of a device pointer wait
/// on ready_event() themselves. A tensor made by such work keeps the tensors it reads alive until
/// the work is known to be done (a wait, or a query that finds it done, through any copy of the
/// event; at the latest the next operation on the tensor), and no longer: a copy of a loader
/// batch does not hold the batch's buffer. Work done synchronously keeps nothing. Tensors may be
/// used from several threads for reading; writing the same bytes concurrently is the caller's
/// business.
class FERRY_API Tensor {
 public:
  Tensor() noexcept;
  ~Tensor();
  Tensor(const Tensor&) noexcept;
  Tensor& operator=(const Tensor&) noexcept;
  Tensor(Tensor&&) noexcept;
  Tensor& operator=(Tensor&&) noexcept;

  /// Uninitialised memory of `shape` on `device`; `pinned` asks for page-locked host memory
  /// (from PinnedPool::global()). \throws ConfigError naming the shape on a negative dimension,
  /// a shape whose size overflows, host memory that cannot be had, or pinned memory for a device
  /// other than the CPU; DeviceError when the device is not usable or out of memory.
  static Tensor empty(std::vector<int64_t> shape, DType dtype, Device device = Device::cpu(),
                      bool pinned = false);
  /// Like empty(), filled with zeros.
  static Tensor zeros(std::vector<int64_t> shape, DType dtype, Device device = Device::cpu());
  /// A CPU tensor holding a copy of `values`. \throws ConfigError when the shape does not
  /// hold values.size() elements, or as empty().
  template <class T>
  static Tensor from(std::span<const T> values,
                     std::vector<int64_t> shape) {  // NOLINT(performance-unnecessary-value-param)
    return from_bytes(values.data(), values.size_bytes(), std::move(shape), dtype_of<T>());
  }
  template <class T>
  static Tensor from(const std::vector<T>& values, std::vector<int64_t> shape) {
    return from(std::span<const T>(values), std::move(shape));
  }
  /// A CPU tensor holding a copy of `nbytes` bytes at `data`. \throws ConfigError when the
  /// shape does not take `nbytes`, when `data` is null and `nbytes` is not 0, or as empty().
  static Tensor from_bytes(const void* data, std::size_t nbytes, std::vector<int64_t> shape,
                           DType dtype);
  /// A tensor viewing memory that ferry does not own; `owner` is kept alive as long as any
  /// tensor views it. `pinned` must say truthfully whether host memory is page-locked.
  /// \throws ConfigError on a bad shape (as empty()) or null `data` for a non-empty shape.
  static Tensor wrap(void* data, std::vector<int64_t> shape, DType dtype, Device device,
                     bool pinned, std::shared_ptr<void> owner);

  /// This tensor on `device`. When it is there already, the same storage is returned (no copy);
  /// otherwise a new tensor and this one is unchanged. With `non_blocking` and pinned source
  /// memory (or device-to-device) the copy is queued on the device's copy stream and the call
  /// returns at once; from pageable memory it is synchronous, as in CUDA.
  /// \throws DeviceError when a device involved is not usable.
  Tensor to(Device device, bool non_blocking = false) const;
  /// The same, queued on the caller's CUDA `stream` (a cudaStream_t; nullptr: the default
  /// stream) instead of ferry's copy stream: `stream` first waits, on the GPU, for the work that
  /// writes this tensor; the result is ordered on `stream`, so work the caller queues there
  /// after the call reads it without any wait. Without `non_blocking` (or from pageable memory)
  /// the host then waits for `stream`.
  Tensor to(Device device, bool non_blocking, CUstream_st* stream) const;
  /// This tensor as `dtype` (rules: ferry::convert). Same storage when it already is `dtype`.
  Tensor to(DType dtype) const;
  /// Both at once: copy, then convert on the destination device.
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  /// Both at once, the copy queued on `stream` (see to(Device, bool, CUstream_st*)).
  Tensor to(Device device, DType dtype, bool non_blocking, CUstream_st* stream) const;
  /// to(Device::cpu()): the device-to-host path of a training loop. Blocking.
  Tensor cpu() const;
  /// A page-locked copy of this CPU tensor; itself when it is pinned already.
  /// \throws ConfigError for a device tensor.
  Tensor pin_memory() const;
  /// True when this is host memory whose pages are locked (by CUDA or mlock).
  bool is_pinned() const noexcept;
  /// A new tensor with the same values on the same device.
  Tensor clone() const;

  bool defined() const noexcept { return storage_ != nullptr; }
  const std::vector<int64_t>& shape() const noexcept { return shape_; }
  /// The size of dimension `dim`. \throws ConfigError when dim >= this->dim().
  int64_t shape(std::size_t dim) const {
    if (dim >= shape_.size()) throw_bad_dim(dim);
    return shape_[dim];
  }
  std::size_t dim() const noexcept { return shape_.size(); }
  DType dtype() const noexcept { return dtype_; }
  Device device() const noexcept;
  int64_t numel() const noexcept;
  std::size_t nbytes() const noexcept {
    return static_cast<std::size_t>(numel()) * dtype_size(dtype_);
  }
  /// Pointer to the first element. For host tensors, waits for pending asynchronous writes.
  void* data() const;
  /// Typed data(). \throws ConfigError when T does not match dtype().
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data());
  }

  /// Rows [start, start + length) of dimension 0, sharing storage. \throws ConfigError naming
  /// the rows and the shape when they are not within dimension 0, or for a scalar.
  Tensor slice(int64_t start, int64_t length) const;
  /// The same storage with another shape of equal numel. \throws ConfigError otherwise.
  Tensor reshape(std::vector<int64_t> shape) const;
  /// True when both tensors view the same storage.
  bool shares_storage_with(const Tensor& other) const noexcept {
    return storage_ != nullptr && storage_ == other.storage_;
  }

  /// Completes when the asynchronous work that writes this tensor has finished.
  Event ready_event() const;
  /// Blocks until ready_event() is complete.
  void synchronize() const;

  /// Exports as DLPack, sharing storage: the consumer (at::fromDLPack, CuPy, JAX) calls the
  /// deleter when done. Waits on the host for pending writes first: safe for any consumer.
  DLManagedTensor* to_dlpack() const;
  /// Exports for a consumer that works on CUDA `stream` (DLPack's stream argument; nullptr: the
  /// default stream): `stream` waits, on the GPU, for the pending writes, and the host does not.
  /// A loader batch whose LoaderOptions::stream is `stream` is ordered on it already: nothing is
  /// queued at all. When the storage goes, ferry's later use of its memory waits for the work
  /// queued on `stream` by then. Host tensors are waited for on the host, as to_dlpack().
  DLManagedTensor* to_dlpack(CUstream_st* stream) const;
  /// Takes a DLPack tensor (contiguous, a dtype ferry knows, on cpu or cuda) without a copy;
  /// its deleter runs when the last ferry tensor viewing it goes. \throws ConfigError otherwise,
  /// or when the DLTensor does not describe memory (negative or more than 64 dimensions, a
  /// negative or overflowing shape, null data for a non-empty shape, an overflowing
  /// byte_offset); the deleter runs then too.
  /// A CUDA tensor is taken as written by work on the default stream: ferry's work on it waits
  /// for what was queued there by the time of the call (DLPack's convention when no stream is
  /// named).
  static Tensor from_dlpack(DLManagedTensor* managed);
  /// The same for a CUDA tensor whose producer writes it on `producer_stream`: ferry's work on
  /// it waits, on the GPU, for the work queued there by the time of the call.
  /// \throws DeviceError when the tensor's GPU is not usable, besides the errors above.
  static Tensor from_dlpack(DLManagedTensor* managed, CUstream_st* producer_stream);

  /// Byte offset of data() within the storage.
  std::size_t storage_offset() const noexcept { return offset_; }

 private:
  friend struct detail::TensorAccess;  // ferry's own code: lib/core/tensor_access.hpp
  FERRY_HIDDEN Tensor(std::shared_ptr<detail::Storage> storage, std::size_t offset,
                      std::vector<int64_t> shape, DType dtype) noexcept;
  void check_dtype(DType requested) const;
  [[noreturn]] void throw_bad_dim(std::size_t dim) const;
  std::shared_ptr<detail::Storage> storage_;
  std::size_t offset_ = 0;
  std::vector<int64_t> shape_;
  DType dtype_ = DType::f32;
};

}  // namespace ferry
