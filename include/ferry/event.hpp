#pragma once

#include <memory>
#include <utility>

#include "ferry/export.hpp"

namespace ferry {

namespace detail {
/// What an Event stands for: a point in a stream's work (a CUDA event, or a marker in the
/// host copy engine's queue).
class EventImpl {
 public:
  virtual ~EventImpl() = default;
  /// True once the work before the event has finished. Never blocks.
  virtual bool query() = 0;
  /// Blocks the calling thread until query() is true. \throws DeviceError on a CUDA failure.
  virtual void wait() = 0;
  /// The cudaEvent_t, or nullptr for events that are not CUDA events.
  virtual void* native_handle() noexcept { return nullptr; }
};
}  // namespace detail

/// Marks the completion of asynchronous work (a non-blocking copy, a kernel). Copies share the
/// same event. A default-constructed Event is already complete. Any thread may call any method.
class FERRY_API Event {
 public:
  Event() noexcept = default;
  explicit Event(std::shared_ptr<detail::EventImpl> impl) noexcept : impl_(std::move(impl)) {}

  /// True when the work has finished. Never blocks.
  bool ready() const { return !impl_ || impl_->query(); }
  /// Blocks until the work has finished. \throws DeviceError on a CUDA failure.
  void synchronize() const {
    if (impl_) impl_->wait();
  }
  /// The underlying cudaEvent_t, for cudaStreamWaitEvent on your own stream; nullptr when the
  /// event is complete already or is not a CUDA event.
  void* native_handle() const noexcept { return impl_ ? impl_->native_handle() : nullptr; }

 private:
  std::shared_ptr<detail::EventImpl> impl_;
};

}  // namespace ferry
