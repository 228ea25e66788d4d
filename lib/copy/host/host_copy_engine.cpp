#include "copy/host/host_copy_engine.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "ferry/error.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail {

HostCopyEngine::HostCopyEngine(Options options)
    : options_(options), thread_([this] {
        pthread_setname_np(pthread_self(), "ferry-hostcopy");  // for top, perf and gdb
        run();
      }) {}

HostCopyEngine::~HostCopyEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
  // Finishing the queued work includes the simulated link carrying it.
  std::this_thread::sleep_until(link_free_);
}

DeviceBuffer HostCopyEngine::allocate(std::size_t nbytes) {
  return DeviceBuffer::allocate(Device::cpu(), nbytes);
}

void HostCopyEngine::enqueue(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
}

void HostCopyEngine::run() {
  const StreamSideWait stream_side;  // this thread is the copy stream: its waits are the GPU's
  for (;;) {
    std::function<void()> work;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  }
}

void HostCopyEngine::copy_async(void* dst, const void* src, std::size_t nbytes, CopyKind /*kind*/) {
  const double bandwidth = options_.bytes_per_second;
  const auto queued = HostEvent::Clock::now();
  enqueue([this, dst, src, nbytes, bandwidth, queued] {
    const auto start = HostEvent::Clock::now();
    if (nbytes != 0) std::memcpy(dst, src, nbytes);
    auto took = HostEvent::Clock::now() - start;
    if (bandwidth > 0) {
      // The link carries this copy once it is free, the copy was queued, and every wait queued
      // before it was over; not when this thread happened to be scheduled.
      took = std::chrono::duration_cast<HostEvent::Clock::duration>(
          std::chrono::duration<double>(static_cast<double>(nbytes) / bandwidth));
      link_free_ = std::max({link_free_, queued, waited_until_}) + took;
    } else {
      link_free_ = std::max(link_free_, HostEvent::Clock::now());
    }
    bytes_copied_.fetch_add(nbytes);
    busy_ns_.fetch_add(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took).count()));
  });
}

void HostCopyEngine::zero_async(void* dst, std::size_t nbytes) {
  enqueue([dst, nbytes] { std::memset(dst, 0, nbytes); });
}

void HostCopyEngine::convert_image_async(const ImageConvert& args) {
  enqueue([args] { convert_image_cpu(args); });
}

void HostCopyEngine::convert_async(const void* src, DType from, void* dst, DType to,
                                   std::size_t count) {
  // Checked here, on the caller's thread: convert() throwing on the copy thread would end the
  // process. The checks are convert()'s own.
  constexpr const char* kWhere = "HostCopyEngine::convert_async";
  if (dtype_size(from) == 0 || dtype_size(to) == 0) {
    throw ConfigError(std::string(kWhere) + ": unknown dtype");
  }
  (void)checked_mul<std::int64_t>(count, std::max(dtype_size(from), dtype_size(to)),
                                  "HostCopyEngine::convert_async: count");
  if (count != 0 && (src == nullptr || dst == nullptr)) {
    throw ConfigError(std::string(kWhere) + ": null source or destination for " +
                      std::to_string(count) + " elements");
  }
  enqueue([=] { convert(src, from, dst, to, count); });
}

void HostCopyEngine::gather_async(const void* src, void* dst, const std::uint64_t* indices,
                                  std::size_t count, std::size_t row_bytes) {
  (void)checked_mul<std::int64_t>(count, row_bytes, "HostCopyEngine::gather_async: rows");
  enqueue([=] { gather_rows_cpu(src, dst, indices, count, row_bytes); });
}

void HostCopyEngine::pad_rows_async(const PadRows& args) {
  enqueue([args] { pad_rows_cpu(args); });
}

Event HostCopyEngine::record() {
  auto event = std::make_shared<HostEvent>();
  enqueue([this, event] { event->signal(link_free_); });
  return Event(event);
}

void HostCopyEngine::wait(const Event& event) {
  if (event.ready()) return;
  enqueue([this, event] {
    event.synchronize();
    waited_until_ = HostEvent::Clock::now();
  });
}

void HostCopyEngine::synchronize() { record().synchronize(); }

void HostCopyEngine::copy_async_on(Stream /*stream*/, void* dst, const void* src,
                                   std::size_t nbytes) {
  copy_async(dst, src, nbytes, CopyKind::host_to_host);
}

Event HostCopyEngine::record_on(Stream /*stream*/) { return {}; }

void HostCopyEngine::stream_wait(Stream /*stream*/, const Event& event) {
  const StreamSideWait stream_side;  // stands for cudaStreamWaitEvent on the consumer's stream
  event.synchronize();
}

void HostCopyEngine::synchronize_stream(Stream /*stream*/) {}

}  // namespace ferry::detail
