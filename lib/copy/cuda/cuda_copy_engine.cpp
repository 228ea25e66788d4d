#include "copy/cuda/cuda_copy_engine.hpp"

#include <memory>
#include <optional>

#include "copy/cuda/kernels.hpp"
#include "runtime/cuda_api.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail::cuda {
namespace {

// Spans of marked work kept before the oldest finished ones are read.
constexpr std::size_t kSpansBeforeHarvest = 64;

// True when `ptr` is pageable host memory: memory CUDA knows nothing of.
bool pageable(const void* ptr) noexcept {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attributes.type == cudaMemoryTypeUnregistered;
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
  return DeviceBuffer::allocate(device(), nbytes, stream());
}

void CudaCopyEngine::copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind /*kind*/) {
  copy_async_on(stream(), dst, src, nbytes);
}

void CudaCopyEngine::copy_async_on(Stream stream, void* dst, const void* src, std::size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(index_);
  // A copy to or from pageable memory returns only once CUDA has staged the host's bytes: a
  // host synchronization, counted as one (a loader without pinned staging shows them).
  if (pageable(src) || pageable(dst)) note_host_sync();
  // cudaMemcpyDefault: unified addressing tells the direction, including peer copies.
  FERRY_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
}

void CudaCopyEngine::zero_async(void* dst, std::size_t nbytes) {
  if (nbytes == 0) return;
  DeviceGuard guard(index_);
  FERRY_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, stream_.view().get()));
}

void CudaCopyEngine::mark_busy_start() {
  PooledEvent start(index_, EventKind::timed);
  DeviceGuard guard(index_);
  FERRY_CUDA_CHECK(cudaEventRecord(start.get(), stream_.view().get()));
  const std::lock_guard lock(timing_mutex_);
  open_span_ = std::move(start);
}

void CudaCopyEngine::mark_busy_end() {
  PooledEvent end(index_, EventKind::timed);
  DeviceGuard guard(index_);
  FERRY_CUDA_CHECK(cudaEventRecord(end.get(), stream_.view().get()));
  bool full = false;
  {
    const std::lock_guard lock(timing_mutex_);
    if (open_span_.get() == nullptr) return;
    spans_.emplace_back(std::move(open_span_), std::move(end));
    full = spans_.size() > kSpansBeforeHarvest;
  }
  if (full) harvest();
}

void CudaCopyEngine::harvest() const noexcept {
  const std::lock_guard lock(timing_mutex_);
  if (spans_.empty()) return;
  std::optional<DeviceGuard> guard;  // stats() may come from a thread that chose no device
  try {
    guard.emplace(index_);
  } catch (...) {  // the runtime is gone: nothing more can be read
    (void)cudaGetLastError();
    return;
  }
  while (!spans_.empty()) {
    const auto& [start, end] = spans_.front();
    const cudaError_t status = cudaEventQuery(end.get());
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return;  // spans finish in order: the rest are later
    }
    float ms = 0;
    if (status == cudaSuccess && cudaEventElapsedTime(&ms, start.get(), end.get()) == cudaSuccess) {
      busy_ += static_cast<double>(ms) * 1e-3;
    } else {
      (void)cudaGetLastError();  // a failed span counts nothing
    }
    spans_.pop_front();
  }
}

double CudaCopyEngine::busy_seconds() const noexcept {
  harvest();
  const std::lock_guard lock(timing_mutex_);
  return busy_;
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

Event CudaCopyEngine::record() { return record_event(index_, stream()); }

void CudaCopyEngine::wait(const Event& event) { stream_wait(stream(), event); }

void CudaCopyEngine::synchronize() { synchronize_stream(stream()); }

Event CudaCopyEngine::record_on(Stream stream) { return record_event(index_, stream); }

void CudaCopyEngine::stream_wait(Stream stream, const Event& event) {
  stream_wait_event(index_, stream, event);
}

void CudaCopyEngine::synchronize_stream(Stream stream) { cuda::synchronize_stream(index_, stream); }

}  // namespace ferry::detail::cuda
