#pragma once

#include <deque>
#include <mutex>
#include <utility>

#include "copy/copy_engine.hpp"
#include "runtime/cuda/cuda_handles.hpp"
#include "runtime/cuda/events.hpp"

namespace ferry::detail::cuda {

/// The copy engine of one GPU: a non-blocking copy stream; copies are cudaMemcpyAsync, image
/// conversions are kernels on the same stream, events come from the device's pool. Nothing on
/// the copy path calls back to the host: copy time comes from timed events read later.
class CudaCopyEngine final : public CopyEngine {
 public:
  /// Makes the device's context and the stream. \throws DeviceError.
  explicit CudaCopyEngine(int index);

  Device device() const noexcept override { return Device::cuda(index_); }
  DeviceBuffer allocate(std::size_t nbytes) override;
  void copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind kind) override;
  void copy_async_on(Stream stream, void* dst, const void* src, std::size_t nbytes) override;
  void zero_async(void* dst, std::size_t nbytes) override;
  void convert_image_async(const ImageConvert& args) override;
  void pad_rows_async(const PadRows& args) override;
  void convert_async(const void* src, DType from, void* dst, DType to, std::size_t count) override;
  void gather_async(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                    std::size_t row_bytes) override;
  Event record() override;
  void wait(const Event& event) override;
  void synchronize() override;
  Stream stream() const noexcept override { return stream_.view().get(); }
  void mark_busy_start() override;
  void mark_busy_end() override;
  double busy_seconds() const noexcept override;
  Event record_on(Stream stream) override;
  void stream_wait(Stream stream, const Event& event) override;
  void synchronize_stream(Stream stream) override;

 private:
  /// Adds the spans whose end is done to busy_; with `all`, none is left pending unread.
  void harvest() const noexcept;

  int index_;
  CudaStream stream_;
  mutable std::mutex timing_mutex_;
  PooledEvent open_span_;  // the start of the span being marked
  mutable std::deque<std::pair<PooledEvent, PooledEvent>> spans_;
  mutable double busy_ = 0;
};

}  // namespace ferry::detail::cuda
