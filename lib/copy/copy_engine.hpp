#pragma once

// The copy stage behind an interface: CudaCopyEngine (copy/cuda) moves bytes over PCIe on a
// CUDA copy stream; HostCopyEngine (copy/host) does the same with a copy thread and separate
// host buffers, so that every asynchronous path runs in CI without a GPU.

#include <cstddef>
#include <cstdint>

#include "core/image_ops.hpp"
#include "core/row_ops.hpp"
#include "ferry/device.hpp"
#include "ferry/dtype.hpp"
#include "ferry/event.hpp"
#include "ferry/memory.hpp"
#include "ferry/stream.hpp"

namespace ferry::detail {

enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };

/// One copy stream and the device memory it writes. Work is queued in order and runs in that
/// order; record() marks a point in it. All methods may be called from any thread, but the
/// order of work queued concurrently from several threads is the order the calls happened in.
class CopyEngine {
 public:
  CopyEngine() = default;
  CopyEngine(const CopyEngine&) = delete;
  CopyEngine& operator=(const CopyEngine&) = delete;
  virtual ~CopyEngine() = default;

  /// The device whose memory allocate() returns.
  virtual Device device() const noexcept = 0;
  /// Device memory. \throws DeviceError.
  virtual DeviceBuffer allocate(std::size_t nbytes) = 0;
  /// Queues a copy of `nbytes` from `src` to `dst`; returns at once.
  /// \pre both stay valid, and `src` unchanged, until an event recorded after it is ready.
  virtual void copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind kind) = 0;
  /// Queues the zeroing of `nbytes` of device memory at `dst` (cudaMemsetAsync).
  virtual void zero_async(void* dst, std::size_t nbytes) = 0;
  /// Queues an image conversion on device memory (the kernel, or its CPU twin).
  virtual void convert_image_async(const ImageConvert& args) = 0;
  /// Queues ferry::convert() of `count` elements on device memory.
  virtual void convert_async(const void* src, DType from, void* dst, DType to,
                             std::size_t count) = 0;
  /// Queues a row gather on device memory: dst row i = src row indices[i], for `count` rows of
  /// `row_bytes`. `indices` lies in device memory (written by an earlier queued copy).
  virtual void gather_async(const void* src, void* dst, const std::uint64_t* indices,
                            std::size_t count, std::size_t row_bytes) = 0;
  /// Queues the padding of packed rows on device memory (see PadRows).
  virtual void pad_rows_async(const PadRows& args) = 0;
  /// An event that is ready once everything queued so far has finished.
  virtual Event record() = 0;
  /// Work queued after this call waits for `event`; the calling thread does not.
  virtual void wait(const Event& event) = 0;
  /// Blocks the calling thread until everything queued so far has finished.
  virtual void synchronize() = 0;
  /// The copy stream (nullptr for the host engine, which has none).
  virtual Stream stream() const noexcept = 0;
  /// Queues a copy on the caller's `stream` instead of the copy stream (host engine: on its
  /// queue). \pre as copy_async, until an event recorded on `stream` after it is ready.
  virtual void copy_async_on(Stream stream, void* dst, const void* src, std::size_t nbytes) = 0;
  /// Marks the start and the end of one batch's work on the copy stream, for busy_seconds().
  /// The CUDA engine records a pair of timed events, read later, off the copy path.
  virtual void mark_busy_start() {}
  virtual void mark_busy_end() {}
  /// Seconds the copy stream has spent on finished marked work so far (the loader's copy
  /// stats). Never blocks.
  virtual double busy_seconds() const noexcept = 0;

  /// An event on the consumer's stream (a cudaStream_t; nullptr: the default stream), ready when
  /// the work queued there so far has finished. The host engine's consumer is the calling
  /// thread itself, so its event is ready at once.
  virtual Event record_on(Stream stream) = 0;
  /// The consumer's stream waits for `event` without blocking the host (host engine: the
  /// calling thread waits, which stands for a wait on a GPU stream and is not counted as a host
  /// synchronization).
  virtual void stream_wait(Stream stream, const Event& event) = 0;
  /// The host waits for the work queued on the consumer's `stream` so far (host engine: there
  /// is none). \throws DeviceError.
  virtual void synchronize_stream(Stream stream) = 0;
};

}  // namespace ferry::detail
