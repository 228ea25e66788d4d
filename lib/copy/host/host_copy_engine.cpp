#include "copy/host/host_copy_engine.hpp"

#include <chrono>
#include <cstddef>
#include <cstring>
#include <utility>

namespace ferry::detail {

HostCopyEngine::HostCopyEngine(Options options) : options_(options), thread_([this] { run(); }) {}

HostCopyEngine::~HostCopyEngine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  thread_.join();
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
  enqueue([this, dst, src, nbytes, bandwidth] {
    const auto start = std::chrono::steady_clock::now();
    if (nbytes != 0) std::memcpy(dst, src, nbytes);
    if (bandwidth > 0) {
      const std::chrono::duration<double> cost(static_cast<double>(nbytes) / bandwidth);
      std::this_thread::sleep_until(start +
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(cost));
    }
    bytes_copied_.fetch_add(nbytes);
    busy_ns_.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count()));
  });
}

void HostCopyEngine::convert_image_async(const ImageConvert& args) {
  enqueue([args] { convert_image_cpu(args); });
}

void HostCopyEngine::convert_async(const void* src, DType from, void* dst, DType to,
                                   std::size_t count) {
  enqueue([=] { convert(src, from, dst, to, count); });
}

void HostCopyEngine::gather_async(const void* src, void* dst, const std::uint64_t* indices,
                                  std::size_t count, std::size_t row_bytes) {
  enqueue([=] {
    const auto* from = static_cast<const std::byte*>(src);
    auto* to = static_cast<std::byte*>(dst);
    for (std::size_t i = 0; i < count; ++i) {
      std::memcpy(to + i * row_bytes, from + indices[i] * row_bytes, row_bytes);
    }
  });
}

Event HostCopyEngine::record() {
  auto event = std::make_shared<HostEvent>();
  enqueue([event] { event->signal(); });
  return Event(event);
}

void HostCopyEngine::wait(const Event& event) {
  if (event.ready()) return;
  enqueue([event] { event.synchronize(); });
}

void HostCopyEngine::synchronize() { record().synchronize(); }

Event HostCopyEngine::record_on(void* /*stream*/) { return {}; }

void HostCopyEngine::stream_wait(void* /*stream*/, const Event& event) { event.synchronize(); }

}  // namespace ferry::detail
