#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "copy/copy_engine.hpp"
#include "runtime/cuda/cuda_handles.hpp"

namespace ferry::detail::cuda {

/// The copy engine of one GPU: a non-blocking copy stream; copies are cudaMemcpyAsync, image
/// conversions are kernels on the same stream, events are CUDA events.
class CudaCopyEngine final : public CopyEngine {
 public:
  /// Makes the device's context and the stream. \throws DeviceError.
  explicit CudaCopyEngine(int index);

  Device device() const noexcept override { return Device::cuda(index_); }
  DeviceBuffer allocate(std::size_t nbytes) override;
  void copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind kind) override;
  void convert_image_async(const ImageConvert& args) override;
  void pad_rows_async(const PadRows& args) override;
  void convert_async(const void* src, DType from, void* dst, DType to, std::size_t count) override;
  void gather_async(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                    std::size_t row_bytes) override;
  Event record() override;
  void wait(const Event& event) override;
  void synchronize() override;
  double busy_seconds() const noexcept override;
  Event record_on(void* stream) override;
  void stream_wait(void* stream, const Event& event) override;

  StreamView stream() const noexcept { return stream_.view(); }

  /// The copy-time bookkeeping a host callback updates when the stream finishes a copy.
  struct CopyClock {
    std::atomic<std::int64_t> busy_ns{0};
    std::int64_t last_done_ns = 0;  // only the callback thread touches it (callbacks are serial)
  };

 private:
  Event record_on_stream(cudaStream_t stream);
  int index_;
  CudaStream stream_;
  std::unique_ptr<CopyClock> clock_ = std::make_unique<CopyClock>();
};

}  // namespace ferry::detail::cuda
