#include "copy/host/host_copy_engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "core/storage.hpp"
#include "core/tensor_access.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Event;
using ferry::detail::CopyKind;
using ferry::detail::HostCopyEngine;
using ferry::detail::HostEvent;
using ferry::detail::TensorAccess;
using namespace std::chrono_literals;

std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 31);
  return v;
}

TEST(HostCopyEngine, CopiesCompleteInOrderBeforeTheirEventsReportDone) {
  // 8 MiB/s: each 1 MiB copy takes at least 125 ms, so nothing can finish before we look.
  HostCopyEngine engine(HostCopyEngine::Options{8.0 * (1 << 20)});
  constexpr std::size_t kBytes = 1 << 20;
  std::vector<std::vector<std::uint8_t>> src;
  std::vector<ferry::DeviceBuffer> dst;
  std::vector<Event> done;
  for (std::uint8_t i = 0; i < 3; ++i) {
    src.push_back(pattern(kBytes, i));
    dst.push_back(engine.allocate(kBytes));
    std::memset(dst.back().data(), 0, kBytes);
  }
  for (std::size_t i = 0; i < 3; ++i) {
    engine.copy_async(dst[i].data(), src[i].data(), kBytes, CopyKind::host_to_device);
    done.push_back(engine.record());
  }
  EXPECT_FALSE(done[0].ready()) << "a 125 ms copy finished at once";
  EXPECT_FALSE(done[2].ready());
  done[1].synchronize();
  EXPECT_TRUE(done[0].ready()) << "the second copy finished before the first";
  EXPECT_EQ(std::memcmp(dst[0].data(), src[0].data(), kBytes), 0);
  EXPECT_EQ(std::memcmp(dst[1].data(), src[1].data(), kBytes), 0);
  done[2].synchronize();
  EXPECT_EQ(std::memcmp(dst[2].data(), src[2].data(), kBytes), 0);
  EXPECT_EQ(engine.bytes_copied(), 3 * kBytes);
}

TEST(HostCopyEngine, LaterWorkSeesEarlierWork) {
  HostCopyEngine engine;
  const auto a = pattern(4096, 5);
  auto b = engine.allocate(4096);
  auto c = engine.allocate(4096);
  engine.copy_async(b.data(), a.data(), 4096, CopyKind::host_to_device);
  engine.copy_async(c.data(), b.data(), 4096, CopyKind::device_to_device);
  engine.synchronize();
  EXPECT_EQ(std::memcmp(c.data(), a.data(), 4096), 0);
}

TEST(HostCopyEngine, ZeroingRunsInQueueOrder) {
  HostCopyEngine engine;
  const auto a = pattern(4096, 6);
  auto b = engine.allocate(4096);
  auto c = engine.allocate(4096);
  engine.copy_async(b.data(), a.data(), 4096, CopyKind::host_to_device);
  engine.zero_async(static_cast<std::uint8_t*>(b.data()) + 1000, 96);
  engine.copy_async(c.data(), b.data(), 4096, CopyKind::device_to_device);
  engine.synchronize();
  auto expected = a;
  std::fill_n(expected.begin() + 1000, 96, std::uint8_t{0});
  EXPECT_EQ(std::memcmp(c.data(), expected.data(), 4096), 0);
}

TEST(HostCopyEngine, WaitHoldsLaterWorkOnTheStreamNotTheCaller) {
  HostCopyEngine engine;
  auto gate = std::make_shared<HostEvent>();
  const auto src = pattern(256, 1);
  auto dst = engine.allocate(256);
  std::memset(dst.data(), 0, 256);
  const auto start = std::chrono::steady_clock::now();
  engine.wait(Event(gate));
  engine.copy_async(dst.data(), src.data(), 256, CopyKind::host_to_device);
  const Event copied = engine.record();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "wait() blocked the caller";
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(copied.ready()) << "the copy ran before the event it waits for";
  EXPECT_EQ(static_cast<unsigned char*>(dst.data())[0], 0);
  gate->signal();
  copied.synchronize();
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), 256), 0);
}

TEST(HostCopyEngine, InjectedBandwidthSlowsCopiesDown) {
  HostCopyEngine engine(HostCopyEngine::Options{100e6});
  const auto src = pattern(4'000'000, 2);
  auto dst = engine.allocate(src.size());
  const auto start = std::chrono::steady_clock::now();
  engine.copy_async(dst.data(), src.data(), src.size(), CopyKind::host_to_device);
  engine.synchronize();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 40ms);  // 4 MB at 100 MB/s
}

TEST(HostCopyEngine, DestructionFinishesQueuedWork) {
  const auto src = pattern(1 << 16, 3);
  auto dst = ferry::DeviceBuffer::allocate(ferry::Device::cpu(), src.size());
  Event done;
  {
    HostCopyEngine engine(HostCopyEngine::Options{64.0 * (1 << 20)});
    for (int i = 0; i < 4; ++i) {
      engine.copy_async(dst.data(), src.data(), src.size(), CopyKind::host_to_device);
    }
    done = engine.record();
  }
  EXPECT_TRUE(done.ready());
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), src.size()), 0);
}

TEST(HostCopyEngine, ConversionsMatchTheirCpuFunctions) {
  HostCopyEngine engine;
  const std::vector<float> values = {-1.5f, 0.25f, 70000.0f, 3.0f};
  auto half = engine.allocate(values.size() * 2);
  engine.convert_async(values.data(), ferry::DType::f32, half.data(), ferry::DType::f16,
                       values.size());
  std::vector<std::uint8_t> image(2 * 3 * 4);  // [H=2, W=3, C=4]
  std::iota(image.begin(), image.end(), std::uint8_t{10});
  auto chw = engine.allocate(image.size());
  ferry::detail::ImageConvert args;
  args.src = image.data();
  args.dst = chw.data();
  args.n = 1;
  args.h = 2;
  args.w = 3;
  args.c = 4;
  engine.convert_image_async(args);
  engine.synchronize();
  const auto* h = static_cast<const ferry::Half*>(half.data());
  for (std::size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(h[i].bits, ferry::to_half(values[i]).bits);
  }
  const auto* out = static_cast<const std::uint8_t*>(chw.data());
  for (int c = 0; c < 4; ++c) {
    for (int p = 0; p < 6; ++p)
      EXPECT_EQ(out[c * 6 + p], image[static_cast<std::size_t>(p * 4 + c)]);
  }
}

TEST(HostCopyEngine, ConsumerSideEventsAndWaits) {
  HostCopyEngine engine(HostCopyEngine::Options{16.0 * (1 << 20)});
  EXPECT_TRUE(engine.record_on(nullptr).ready());  // the consumer is the calling thread
  const auto src = pattern(1 << 20, 4);
  auto dst = engine.allocate(src.size());
  engine.copy_async(dst.data(), src.data(), src.size(), CopyKind::host_to_device);
  const Event copied = engine.record();
  engine.stream_wait(nullptr, copied);  // blocks this thread until the copy is done
  EXPECT_TRUE(copied.ready());
  EXPECT_EQ(std::memcmp(dst.data(), src.data(), src.size()), 0);
  EXPECT_EQ(copied.native_handle(), nullptr);
  EXPECT_TRUE(Event().ready());
}

TEST(HostCopyEngine, ManyProducersLoseNoCopy) {
  HostCopyEngine engine;
  constexpr int kThreads = 4;
  constexpr int kCopies = 100;
  std::vector<std::uint64_t> src(kThreads * kCopies);
  std::iota(src.begin(), src.end(), std::uint64_t{1});
  auto dst = engine.allocate(src.size() * sizeof(std::uint64_t));
  std::memset(dst.data(), 0, dst.size());
  auto* out = static_cast<std::uint64_t*>(dst.data());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCopies; ++i) {
        const auto k = static_cast<std::size_t>(t * kCopies + i);
        engine.copy_async(out + k, &src[k], sizeof(std::uint64_t), CopyKind::host_to_device);
      }
    });
  }
  for (auto& th : threads) th.join();
  engine.synchronize();
  EXPECT_EQ(std::memcmp(out, src.data(), dst.size()), 0);
}

// A loader batch as the copy stage makes it: memory wrapped with an owner, the lease on its
// ring slot, standing in.
struct Batch {
  std::vector<std::uint8_t> memory = pattern(4096, 9);
  std::shared_ptr<int> lease = std::make_shared<int>(0);
  std::weak_ptr<int> watch = lease;
  ferry::Tensor tensor = ferry::Tensor::wrap(memory.data(), {4096}, ferry::DType::u8,
                                             ferry::Device::cpu(), false, std::move(lease));
};

// Queues a copy of `from` behind `gate` on `engine`, as Tensor::to() does on a GPU: the copy
// keeps its source until the work is done.
ferry::Tensor copy_behind(HostCopyEngine& engine, const Event& gate, const ferry::Tensor& from) {
  ferry::Tensor to = ferry::Tensor::empty(from.shape(), from.dtype());
  engine.wait(gate);
  engine.copy_async(TensorAccess::address(to), TensorAccess::address(from), from.nbytes(),
                    CopyKind::device_to_device);
  TensorAccess::storage(to)->set_pending(engine.record(), {TensorAccess::storage(from)});
  return to;
}

TEST(HostCopyEngine, AsynchronousCopiesKeepTheirSourceUntilAWaitFindsThemDone) {
  HostCopyEngine engine;
  auto gate = std::make_shared<HostEvent>();
  Batch batch;
  const ferry::Tensor copy = copy_behind(engine, Event(gate), batch.tensor);
  batch.tensor = ferry::Tensor();
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(copy.ready_event().ready());
  EXPECT_FALSE(batch.watch.expired()) << "the source went while the copy may still read it";
  const Event done = copy.ready_event();  // a copy of the event: waiting on it is enough
  gate->signal();
  done.synchronize();
  EXPECT_TRUE(batch.watch.expired()) << "the copy keeps the batch's buffer after its work";
  EXPECT_EQ(std::memcmp(copy.data(), batch.memory.data(), batch.memory.size()), 0);
}

TEST(HostCopyEngine, AsynchronousCopiesDropTheirSourceWhenAQueryOrTheNextOperationLooks) {
  HostCopyEngine engine;
  {
    auto gate = std::make_shared<HostEvent>();
    Batch batch;
    const ferry::Tensor copy = copy_behind(engine, Event(gate), batch.tensor);
    batch.tensor = ferry::Tensor();
    gate->signal();
    engine.synchronize();  // done, but nobody has looked yet
    EXPECT_FALSE(batch.watch.expired());
    EXPECT_TRUE(copy.ready_event().ready());  // a query that finds it done
    EXPECT_TRUE(batch.watch.expired());
  }
  {
    auto gate = std::make_shared<HostEvent>();
    Batch batch;
    const ferry::Tensor copy = copy_behind(engine, Event(gate), batch.tensor);
    batch.tensor = ferry::Tensor();
    gate->signal();
    engine.synchronize();
    const ferry::Tensor half = copy.to(ferry::DType::f16);  // the next operation on it
    EXPECT_TRUE(batch.watch.expired());
    EXPECT_EQ(half.data<ferry::Half>()[1].bits, ferry::to_half(batch.memory[1]).bits);
  }
}

TEST(HostCopyEngine, WorkDoneAlreadyKeepsNoSources) {
  auto done = std::make_shared<HostEvent>();
  done->signal();  // a copy that completed synchronously
  Batch batch;
  const ferry::Tensor copy = ferry::Tensor::empty({4096}, ferry::DType::u8);
  std::memcpy(copy.data(), batch.tensor.data(), 4096);
  TensorAccess::storage(copy)->set_pending(Event(done), {TensorAccess::storage(batch.tensor)});
  batch.tensor = ferry::Tensor();
  EXPECT_TRUE(batch.watch.expired()) << "finished work recorded its sources";
  EXPECT_EQ(static_cast<const std::uint8_t*>(copy.data())[4095], batch.memory[4095]);
}

TEST(HostCopyEngine, ConcurrentQueriesReleaseTheSourcesOnce) {
  HostCopyEngine engine;
  auto gate = std::make_shared<HostEvent>();
  Batch batch;
  auto released = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<void> counted(nullptr, [released](void*) { released->fetch_add(1); });
  ferry::Tensor source = ferry::Tensor::wrap(batch.memory.data(), {4096}, ferry::DType::u8,
                                             ferry::Device::cpu(), false, counted);
  counted.reset();
  ferry::Tensor copy = copy_behind(engine, Event(gate), source);
  source = ferry::Tensor();
  const Event event = copy.ready_event();
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&event] {
      const auto deadline = std::chrono::steady_clock::now() + 2s;
      while (!event.ready() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::yield();
    });
  }
  gate->signal();
  for (auto& th : threads) th.join();
  EXPECT_TRUE(event.ready());
  EXPECT_EQ(released->load(), 1);
  copy = ferry::Tensor();
  EXPECT_EQ(released->load(), 1);
}

TEST(HostCopyEngine, CountsWhoseBytesOverflowAreConfigErrorsBeforeAnythingIsQueued) {
  using ferry::testing::expect_error;
  HostCopyEngine engine;
  float in = 0;
  double out = 0;
  constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();
  expect_error<ferry::ConfigError>(
      [&] { engine.convert_async(&in, ferry::DType::f32, &out, ferry::DType::f64, kMaxSize / 4); },
      {"HostCopyEngine::convert_async", "x 8"});
  expect_error<ferry::ConfigError>(
      [&] { engine.convert_async(&in, static_cast<ferry::DType>(42), &out, ferry::DType::f64, 1); },
      {"HostCopyEngine::convert_async", "unknown dtype"});
  const std::uint64_t index = 0;
  expect_error<ferry::ConfigError>([&] { engine.gather_async(&in, &out, &index, kMaxSize / 2, 4); },
                                   {"HostCopyEngine::gather_async", "x 4"});
  engine.synchronize();
  EXPECT_EQ(out, 0.0);
}

}  // namespace
