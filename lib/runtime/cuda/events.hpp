#pragma once

// CUDA events from a pool per device: made once, reused, never destroyed on the hot path. Every
// event ferry records is made with cudaEventBlockingSync, so a host that waits on one sleeps
// instead of spinning a core that the loader's workers need.

#include <cuda_runtime_api.h>

#include <utility>

namespace ferry::detail::cuda {

enum class EventKind { plain, timed };

/// An event of cuda:index from its pool (made in that device's context when the pool is
/// empty). \throws DeviceError.
cudaEvent_t acquire_event(int index, EventKind kind);
/// Gives an event back to cuda:index's pool.
void release_event(int index, cudaEvent_t event, EventKind kind) noexcept;

/// An owned pooled event; back to its pool when destroyed.
class PooledEvent {
 public:
  PooledEvent() noexcept = default;
  PooledEvent(int index, EventKind kind) : index_(index), kind_(kind) {
    event_ = acquire_event(index, kind);
  }
  PooledEvent(PooledEvent&& other) noexcept
      : index_(other.index_), kind_(other.kind_), event_(std::exchange(other.event_, nullptr)) {}
  PooledEvent& operator=(PooledEvent&& other) noexcept {
    std::swap(index_, other.index_);
    std::swap(kind_, other.kind_);
    std::swap(event_, other.event_);
    return *this;
  }
  PooledEvent(const PooledEvent&) = delete;
  PooledEvent& operator=(const PooledEvent&) = delete;
  ~PooledEvent() {
    if (event_ != nullptr) release_event(index_, event_, kind_);
  }
  cudaEvent_t get() const noexcept { return event_; }
  int device() const noexcept { return index_; }

 private:
  int index_ = 0;
  EventKind kind_ = EventKind::plain;
  cudaEvent_t event_ = nullptr;
};

/// Waits on the host until `event`, of cuda:index, is done: first a query, then (counted as a host
/// synchronization) cudaEventSynchronize. Calls CUDA with cuda:index current, so that a thread
/// that never chose a device makes no context on cuda:0. \throws DeviceError.
void wait_event(int index, cudaEvent_t event);
/// True when `event`, of cuda:index, is done; never blocks. \throws DeviceError on a failure
/// other than "not ready".
bool event_done(int index, cudaEvent_t event);

}  // namespace ferry::detail::cuda
