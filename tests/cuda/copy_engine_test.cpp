// The CUDA copy engine (ferry::detail::cuda::engine, behind the CopyEngine interface): work
// queued in order completes in order, record() events become ready, and the consumer's stream
// (here the default stream, nullptr) can be made to wait for the copy stream and marked.

#include "copy/copy_engine.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "copy/cuda_engines.hpp"
#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DeviceBuffer;
using ferry::DType;
using ferry::Event;
using ferry::PinnedBuffer;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_bytes;
using ferry::detail::CopyEngine;
using ferry::detail::CopyKind;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr auto kTimeout = std::chrono::seconds(20);

/// Pinned memory holding `bytes`.
PinnedBuffer pinned_copy_of(const std::vector<std::uint8_t>& bytes) {
  PinnedBuffer b = PinnedBuffer::allocate(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

/// Polls `events` (queued in this order) until the last is ready or the timeout passes, and
/// checks at every poll that none is ready before one queued earlier. Later events are read
/// first, so "later ready" read at one instant implies "earlier ready" read just after.
::testing::AssertionResult complete_in_order(const std::vector<Event>& events) {
  const auto deadline = std::chrono::steady_clock::now() + kTimeout;
  int polls = 0;
  for (;;) {
    std::vector<bool> ready(events.size());
    for (std::size_t i = events.size(); i > 0; --i) ready[i - 1] = events[i - 1].ready();
    for (std::size_t i = 1; i < events.size(); ++i) {
      if (ready[i] && !ready[i - 1]) {
        return ::testing::AssertionFailure() << "event " << i << " was ready before event "
                                             << (i - 1) << " (poll " << polls << ")";
      }
    }
    if (ready.back()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure() << "the last event was not ready after 20 s";
    }
    ++polls;
    std::this_thread::yield();
  }
}

class GpuCopyEngine : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    engine_ = &ferry::detail::cuda::engine(0);
  }
  CopyEngine& engine() { return *engine_; }

 private:
  CopyEngine* engine_ = nullptr;
};

TEST_F(GpuCopyEngine, IsOnePerDeviceAndOwnsItsDeviceMemory) {
  EXPECT_EQ(&engine(), &ferry::detail::cuda::engine(0));
  EXPECT_EQ(engine().device(), Device::cuda(0));
  const DeviceBuffer b = engine().allocate(12345);
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 12345U);
  EXPECT_EQ(b.device(), Device::cuda(0));
}

TEST_F(GpuCopyEngine, CopiesQueuedInOrderCompleteInOrder) {
  // host -> a -> b -> host, each step reading what the one before writes; 64 MiB, so the
  // steps take long enough to be caught out of order.
  const std::size_t n = 64 * kMiB + 3;
  const std::vector<std::uint8_t> bytes = pattern(n, 1);
  const PinnedBuffer src = pinned_copy_of(bytes);
  PinnedBuffer dst = PinnedBuffer::allocate(n);
  std::memset(dst.data(), 0, n);
  const DeviceBuffer a = engine().allocate(n);
  const DeviceBuffer b = engine().allocate(n);

  std::vector<Event> events;
  engine().copy_async(a.data(), src.data(), n, CopyKind::host_to_device);
  events.push_back(engine().record());
  engine().copy_async(b.data(), a.data(), n, CopyKind::device_to_device);
  events.push_back(engine().record());
  engine().copy_async(dst.data(), b.data(), n, CopyKind::device_to_host);
  events.push_back(engine().record());
  for (const Event& e : events) EXPECT_NE(e.native_handle(), nullptr);

  EXPECT_TRUE(complete_in_order(events));
  for (const Event& e : events) EXPECT_TRUE(e.ready());
  EXPECT_TRUE(same_bytes(bytes.data(), dst.data(), n));
}

TEST_F(GpuCopyEngine, LaterCopiesToTheSameBytesWin) {
  // 24 different sources copied one after another into the same device bytes: the last one
  // queued is what stays.
  constexpr int kCopies = 24;
  const std::size_t n = 4 * kMiB + 1;
  std::vector<std::vector<std::uint8_t>> sources;
  std::vector<PinnedBuffer> pinned;
  for (int i = 0; i < kCopies; ++i) {
    sources.push_back(pattern(n, 500U + static_cast<unsigned>(i)));
    pinned.push_back(pinned_copy_of(sources.back()));
  }
  const DeviceBuffer dev = engine().allocate(n);
  std::vector<Event> events;
  for (const PinnedBuffer& p : pinned) {
    engine().copy_async(dev.data(), p.data(), n, CopyKind::host_to_device);
    events.push_back(engine().record());
  }
  PinnedBuffer back = PinnedBuffer::allocate(n);
  engine().copy_async(back.data(), dev.data(), n, CopyKind::device_to_host);
  events.push_back(engine().record());
  EXPECT_TRUE(complete_in_order(events));
  EXPECT_TRUE(same_bytes(sources.back().data(), back.data(), n));
}

TEST_F(GpuCopyEngine, SynchronizeWaitsForEverythingQueued) {
  const std::size_t n = 32 * kMiB;
  const std::vector<std::uint8_t> bytes = pattern(n, 2);
  const PinnedBuffer src = pinned_copy_of(bytes);
  PinnedBuffer dst = PinnedBuffer::allocate(n);
  const DeviceBuffer dev = engine().allocate(n);
  engine().copy_async(dev.data(), src.data(), n, CopyKind::host_to_device);
  const Event first = engine().record();
  engine().copy_async(dst.data(), dev.data(), n, CopyKind::device_to_host);
  const Event second = engine().record();
  engine().synchronize();
  EXPECT_TRUE(first.ready());
  EXPECT_TRUE(second.ready());
  EXPECT_TRUE(same_bytes(bytes.data(), dst.data(), n));
  // Nothing queued since: a new event is ready as soon as the GPU sees it.
  const Event idle = engine().record();
  idle.synchronize();
  EXPECT_TRUE(idle.ready());
}

TEST_F(GpuCopyEngine, ConversionsRunBetweenTheCopiesAroundThem) {
  const std::size_t count = 8 * kMiB + 5;
  const std::vector<std::uint8_t> bytes = pattern(count, 3);
  const PinnedBuffer src = pinned_copy_of(bytes);
  const DeviceBuffer in = engine().allocate(count);
  const DeviceBuffer out = engine().allocate(count * sizeof(float));
  PinnedBuffer back = PinnedBuffer::allocate(count * sizeof(float));

  // No waits in between: the stream's order alone must put the kernel after the copy in, and
  // the copy out after the kernel.
  engine().copy_async(in.data(), src.data(), count, CopyKind::host_to_device);
  engine().convert_async(in.data(), DType::u8, out.data(), DType::f32, count);
  engine().copy_async(back.data(), out.data(), count * sizeof(float), CopyKind::device_to_host);
  engine().record().synchronize();

  std::vector<float> expected(count);
  ferry::convert(bytes.data(), DType::u8, expected.data(), DType::f32, count);
  EXPECT_TRUE(same_bytes(expected.data(), back.data(), count * sizeof(float)));
}

TEST_F(GpuCopyEngine, ImageConversionRunsBetweenTheCopiesAroundThem) {
  const std::int64_t n = 16, h = 97, w = 101, c = 3;
  const auto count = static_cast<std::size_t>(n * h * w * c);
  const std::vector<std::uint8_t> bytes = pattern(count, 4);
  const PinnedBuffer src = pinned_copy_of(bytes);
  const DeviceBuffer in = engine().allocate(count);
  const DeviceBuffer out = engine().allocate(count * sizeof(float));
  PinnedBuffer back = PinnedBuffer::allocate(count * sizeof(float));

  ferry::detail::ImageConvert args;
  args.src_dtype = DType::u8;
  args.dst_dtype = DType::f32;
  args.n = n;
  args.h = h;
  args.w = w;
  args.c = c;
  args.to_chw = true;
  args.normalize = true;
  args.mul = {1.0f / 58.0f, 1.0f / 57.0f, 1.0f / 57.5f, 0.0f};
  args.add = {-2.1f, -2.0f, -1.8f, 0.0f};

  engine().copy_async(in.data(), src.data(), count, CopyKind::host_to_device);
  ferry::detail::ImageConvert on_gpu = args;
  on_gpu.src = in.data();
  on_gpu.dst = out.data();
  engine().convert_image_async(on_gpu);
  engine().copy_async(back.data(), out.data(), count * sizeof(float), CopyKind::device_to_host);
  engine().synchronize();

  std::vector<float> expected(count);
  ferry::detail::ImageConvert on_cpu = args;
  on_cpu.src = bytes.data();
  on_cpu.dst = expected.data();
  ferry::detail::convert_image_cpu(on_cpu);
  EXPECT_TRUE(same_bytes(expected.data(), back.data(), count * sizeof(float)));
}

TEST_F(GpuCopyEngine, DefaultStreamWaitsForTheCopyStream) {
  const std::size_t n = 64 * kMiB;
  const std::vector<std::uint8_t> bytes = pattern(n, 5);
  const PinnedBuffer src = pinned_copy_of(bytes);
  const DeviceBuffer dev = engine().allocate(n);

  engine().copy_async(dev.data(), src.data(), n, CopyKind::host_to_device);
  const Event copied = engine().record();
  // The consumer's stream (the default stream) waits on the GPU, not the host...
  engine().stream_wait(nullptr, copied);
  // ...so a mark on it cannot complete before the copy.
  const Event consumer = engine().record_on(nullptr);
  EXPECT_NE(consumer.native_handle(), nullptr);
  EXPECT_TRUE(complete_in_order({copied, consumer}));
  consumer.synchronize();
  EXPECT_TRUE(copied.ready());
}

TEST_F(GpuCopyEngine, CopyStreamWaitsForTheDefaultStream) {
  // The other direction: a mark on the consumer's stream, and the copy stream waits for it.
  const Event consumer = engine().record_on(nullptr);
  engine().wait(consumer);
  const Event after = engine().record();
  EXPECT_TRUE(complete_in_order({consumer, after}));
}

TEST_F(GpuCopyEngine, RecordOnTheIdleDefaultStreamBecomesReady) {
  const Event e = engine().record_on(nullptr);
  e.synchronize();
  EXPECT_TRUE(e.ready());
}

TEST_F(GpuCopyEngine, WaitingForACompleteEventCostsNothing) {
  // A default Event is complete and no CUDA event: nothing to queue, nothing to block on.
  const Event done = engine().record();
  done.synchronize();
  const std::uint64_t before = ferry::host_sync_count();
  engine().stream_wait(nullptr, Event());
  engine().wait(Event());
  engine().wait(done);
  done.synchronize();
  EXPECT_TRUE(done.ready());
  EXPECT_EQ(ferry::host_sync_count(), before);
}

TEST_F(GpuCopyEngine, ZeroByteCopiesAreAllowedAndTheStreamGoesOn) {
  const DeviceBuffer dev = engine().allocate(0);
  PinnedBuffer host = PinnedBuffer::allocate(0);
  engine().copy_async(dev.data(), host.data(), 0, CopyKind::host_to_device);
  engine().copy_async(host.data(), dev.data(), 0, CopyKind::device_to_host);
  // The stream still carries real copies after them.
  const DeviceBuffer more = engine().allocate(64);
  PinnedBuffer in = PinnedBuffer::allocate(64);
  PinnedBuffer out = PinnedBuffer::allocate(64);
  for (int i = 0; i < 64; ++i)
    static_cast<std::uint8_t*>(in.data())[i] = static_cast<std::uint8_t>(i * 3);
  engine().copy_async(more.data(), in.data(), 64, CopyKind::host_to_device);
  engine().copy_async(out.data(), more.data(), 64, CopyKind::device_to_host);
  engine().record().synchronize();
  EXPECT_EQ(std::memcmp(in.data(), out.data(), 64), 0);
}

TEST_F(GpuCopyEngine, OutOfRangeDeviceIsADeviceError) {
  try {
    (void)ferry::detail::cuda::engine(99);
    ADD_FAILURE() << "engine(99) did not throw";
  } catch (const ferry::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:99 is not usable"), std::string::npos) << e.what();
  }
}

}  // namespace
