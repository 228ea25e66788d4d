#include "runtime/cuda/events.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_handles.hpp"
#include "runtime/cuda_api.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail::cuda {
namespace {

// How long a host wait polls before it sleeps.
constexpr auto kPollFor = std::chrono::microseconds(50);

struct Pool {
  std::mutex mutex;
  std::array<std::vector<cudaEvent_t>, 2> free;  // by EventKind
};

Pool& pool(int index) { return per_device<Pool>(index); }

// A pooled CUDA event as a ferry::Event.
class CudaEventImpl final : public EventImpl {
 public:
  explicit CudaEventImpl(int index) : event_(index, EventKind::plain) {}
  bool query() override {
    if (done_.load(std::memory_order_relaxed)) return true;
    const bool done = event_done(event_.device(), event_.get());
    if (done) done_.store(true, std::memory_order_relaxed);
    return done;
  }
  void wait() override {
    if (done_.load(std::memory_order_relaxed)) return;
    wait_event(event_.device(), event_.get());
    done_.store(true, std::memory_order_relaxed);
  }
  void* native_handle() noexcept override { return event_.get(); }
  cudaEvent_t get() const noexcept { return event_.get(); }

 private:
  PooledEvent event_;
  std::atomic<bool> done_{false};  // once seen done, stays done: it is not recorded again
};

}  // namespace

Event record_event(int index, Stream stream) {
  auto event = std::make_shared<CudaEventImpl>(index);
  DeviceGuard guard(index);
  FERRY_CUDA_CHECK(cudaEventRecord(event->get(), stream));
  return Event(std::move(event));
}

void stream_wait_event(int index, Stream stream, const Event& event) {
  if (event.ready()) return;  // done already: nothing to wait for
  if (void* handle = event.native_handle()) {
    DeviceGuard guard(index);
    FERRY_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(handle), 0));
    return;
  }
  event.synchronize();  // a host event: nothing on the GPU can wait for it
}

cudaEvent_t acquire_event(int index, EventKind kind) {
  Pool& p = pool(index);
  {
    std::lock_guard lock(p.mutex);
    auto& list = p.free[static_cast<std::size_t>(kind)];
    if (!list.empty()) {
      cudaEvent_t e = list.back();
      list.pop_back();
      return e;
    }
  }
  DeviceGuard guard(index);
  cudaEvent_t e = nullptr;
  const unsigned flags = kind == EventKind::timed
                             ? cudaEventBlockingSync
                             : (cudaEventBlockingSync | cudaEventDisableTiming);
  FERRY_CUDA_CHECK(cudaEventCreateWithFlags(&e, flags));
  return e;
}

void release_event(int index, cudaEvent_t event, EventKind kind) noexcept {
  if (event == nullptr || index < 0 || index >= kMaxDevices) return;
  Pool& p = pool(index);
  try {
    std::lock_guard lock(p.mutex);
    p.free[static_cast<std::size_t>(kind)].push_back(event);
  } catch (...) {  // no memory for the list: the event goes instead
    ignore(cudaEventDestroy(event));
  }
}

namespace {
// event_done with the event's device current already.
bool query(cudaEvent_t event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  FERRY_CUDA_CHECK(status);
  return true;
}
}  // namespace

bool event_done(int index, cudaEvent_t event) {
  DeviceGuard guard(index);
  return query(event);
}

void wait_event(int index, cudaEvent_t event) {
  DeviceGuard guard(index);
  if (query(event)) return;
  note_host_sync();
  // A short wait (a copy about to end) is caught by polling for a few microseconds, without a
  // blocking sync's wake-up latency; a long one sleeps in cudaEventSynchronize (the event is
  // made with cudaEventBlockingSync) instead of spinning a core the workers need.
  const auto until = std::chrono::steady_clock::now() + kPollFor;
  while (std::chrono::steady_clock::now() < until) {
    if (query(event)) return;
    std::this_thread::yield();
  }
  FERRY_CUDA_CHECK(cudaEventSynchronize(event));
}

}  // namespace ferry::detail::cuda
