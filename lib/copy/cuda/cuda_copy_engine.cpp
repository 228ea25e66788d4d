#include "copy/cuda/cuda_copy_engine.hpp"

#include <algorithm>
#include <chrono>
#include <memory>

#include "copy/cuda/kernels.hpp"

namespace ferry::detail::cuda {
namespace {

class CudaEventImpl final : public EventImpl {
 public:
  bool query() override {
    const cudaError_t status = cudaEventQuery(event_.get());
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    FERRY_CUDA_CHECK(status);
    return true;
  }
  void wait() override { FERRY_CUDA_CHECK(cudaEventSynchronize(event_.get())); }
  void* native_handle() noexcept override { return event_.get(); }
  cudaEvent_t get() const noexcept { return event_.get(); }

 private:
  CudaEvent event_;
};

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int make_context(int index) {
  DeviceGuard guard(index);
  FERRY_CUDA_CHECK(cudaFree(nullptr));  // creates the context now, so failures show here
  return index;
}

}  // namespace

CudaCopyEngine::CudaCopyEngine(int index)
    : index_(make_context(index)), stream_([index] {
        DeviceGuard guard(index);
        return CudaStream();
      }()) {}

DeviceBuffer CudaCopyEngine::allocate(std::size_t nbytes) {
  return DeviceBuffer::allocate(device(), nbytes);
}

void CudaCopyEngine::copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind /*kind*/) {
  if (nbytes == 0) return;
  DeviceGuard guard(index_);
  // cudaMemcpyDefault: unified addressing tells the direction, including peer copies.
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream_.view().get()));
  // When the stream gets past the copy, a host callback books its time: from when it was
  // queued, or the previous copy ended, to now. The callback only reads the clock.
  struct Booking {
    CopyClock* clock;
    std::int64_t queued_ns;
  };
  auto* booking = new Booking{clock_.get(), now_ns()};
  const cudaError_t status = cudaLaunchHostFunc(
      stream_.view().get(),
      [](void* data) {
        const std::unique_ptr<Booking> b(static_cast<Booking*>(data));
        const std::int64_t done = now_ns();
        const std::int64_t start = std::max(b->queued_ns, b->clock->last_done_ns);
        b->clock->busy_ns.fetch_add(done - start);
        b->clock->last_done_ns = done;
      },
      booking);
  if (status != cudaSuccess) {
    delete booking;
    FERRY_CUDA_CHECK(status);
  }
}

double CudaCopyEngine::busy_seconds() const noexcept {
  return static_cast<double>(clock_->busy_ns.load()) * 1e-9;
}

void CudaCopyEngine::convert_image_async(const ImageConvert& args) {
  DeviceGuard guard(index_);
  launch_convert_image(args, stream_.view().get());
}

void CudaCopyEngine::convert_async(const void* src, DType from, void* dst, DType to,
                                   std::size_t count) {
  DeviceGuard guard(index_);
  launch_convert(src, from, dst, to, count, stream_.view().get());
}

void CudaCopyEngine::pad_rows_async(const PadRows& args) {
  DeviceGuard guard(index_);
  launch_pad_rows(args, stream_.view().get());
}

void CudaCopyEngine::gather_async(const void* src, void* dst, const std::uint64_t* indices,
                                  std::size_t count, std::size_t row_bytes) {
  DeviceGuard guard(index_);
  launch_gather_rows(src, dst, indices, count, row_bytes, stream_.view().get());
}

Event CudaCopyEngine::record_on_stream(cudaStream_t stream) {
  DeviceGuard guard(index_);
  auto event = std::make_shared<CudaEventImpl>();
  FERRY_CUDA_CHECK(cudaEventRecord(event->get(), stream));
  return Event(std::move(event));
}

Event CudaCopyEngine::record() { return record_on_stream(stream_.view().get()); }

void CudaCopyEngine::wait(const Event& event) { stream_wait(stream_.view().get(), event); }

void CudaCopyEngine::synchronize() {
  DeviceGuard guard(index_);
  FERRY_CUDA_CHECK(cudaStreamSynchronize(stream_.view().get()));
}

Event CudaCopyEngine::record_on(void* stream) {
  return record_on_stream(static_cast<cudaStream_t>(stream));
}

void CudaCopyEngine::stream_wait(void* stream, const Event& event) {
  if (void* native = event.native_handle()) {
    DeviceGuard guard(index_);
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                         static_cast<cudaEvent_t>(native), 0));
    return;
  }
  event.synchronize();  // a host event: nothing on the GPU can wait for it
}

}  // namespace ferry::detail::cuda
