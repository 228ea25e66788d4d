#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "copy/copy_engine.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail {

/// An event of the host copy engine: a flag its copy thread sets, waited on with C++20
/// atomic wait/notify.
class HostEvent final : public EventImpl {
 public:
  using Clock = std::chrono::steady_clock;

  /// Ready once signalled and `deadline` has passed: the simulated link's time.
  bool query() override {
    return done_.load(std::memory_order_acquire) && Clock::now() >= deadline_;
  }
  void wait() override {
    if (query()) return;
    note_host_sync();
    done_.wait(false, std::memory_order_acquire);
    std::this_thread::sleep_until(deadline_);
  }
  /// \post every waiter is woken; query() is true from `deadline` on.
  void signal(Clock::time_point deadline = {}) noexcept {
    deadline_ = deadline;  // published by the release store below
    done_.store(true, std::memory_order_release);
    done_.notify_all();
  }

 private:
  std::atomic<bool> done_{false};
  Clock::time_point deadline_{};
};

/// A copy engine on host memory: "device" buffers are separate host allocations and one copy
/// thread plays the copy stream, running queued work in order. With `bytes_per_second` > 0 the
/// copies go through a simulated link: each starts when the link is free and lasts
/// nbytes / bytes_per_second, and an event completes when the link has carried everything
/// before it. The copy thread does the memcpy at once and never sleeps for the link, so how
/// soon the OS schedules it does not stretch the simulated time. Tests and benchmarks use it
/// to stand in for a
/// PCIe link. The destructor finishes the queued work, then joins the thread.
class HostCopyEngine final : public CopyEngine {
 public:
  struct Options {
    double bytes_per_second = 0;  ///< injected bandwidth; 0: as fast as memcpy
  };

  HostCopyEngine() : HostCopyEngine(Options{}) {}
  explicit HostCopyEngine(Options options);
  ~HostCopyEngine() override;

  Device device() const noexcept override { return Device::cpu(); }
  DeviceBuffer allocate(std::size_t nbytes) override;
  void copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind kind) override;
  void zero_async(void* dst, std::size_t nbytes) override;
  void convert_image_async(const ImageConvert& args) override;
  void pad_rows_async(const PadRows& args) override;
  void convert_async(const void* src, DType from, void* dst, DType to, std::size_t count) override;
  void gather_async(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                    std::size_t row_bytes) override;
  Event record() override;
  void wait(const Event& event) override;
  void synchronize() override;
  Stream stream() const noexcept override { return nullptr; }
  void copy_async_on(Stream stream, void* dst, const void* src, std::size_t nbytes) override;
  Event record_on(Stream stream) override;
  void stream_wait(Stream stream, const Event& event) override;
  void synchronize_stream(Stream stream) override;

  /// Bytes copied so far (by finished copies).
  std::uint64_t bytes_copied() const noexcept { return bytes_copied_.load(); }
  /// Seconds the copy thread spent copying (injected time included).
  double busy_seconds() const noexcept override {
    return static_cast<double>(busy_ns_.load()) * 1e-9;
  }

 private:
  void enqueue(std::function<void()> work);
  void run();

  Options options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::atomic<std::uint64_t> bytes_copied_{0};
  std::atomic<std::uint64_t> busy_ns_{0};
  // The copy thread's own: when the link is idle, and when the last queued wait ended.
  HostEvent::Clock::time_point link_free_{};
  HostEvent::Clock::time_point waited_until_{};
  std::thread thread_;  // last: starts after everything it uses exists
};

}  // namespace ferry::detail
