// Host synchronizations are counted (ferry::host_sync_count, LoaderStats::host_syncs): every
// wait that blocks a host thread on unfinished device work, and only those. The host copy engine
// counts its waits as the CUDA engine does, so the contract "a steady-state epoch makes no host
// synchronization on the consumer's thread" is checked here, without a GPU.

#include "runtime/host_sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "copy/host/host_copy_engine.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Device;
using ferry::Event;
using ferry::host_sync_count;
using ferry::LoaderOptions;
using ferry::detail::CopyKind;
using ferry::detail::HostCopyEngine;
using ferry::testing::IndexDataset;

// 64 KiB through a link of 200 kB/s: the copy's event is not ready for about 330 ms, long enough
// that a test thread descheduled under a sanitizer's load still finds it unfinished.
constexpr std::size_t kBytes = 64 * 1024;
constexpr double kSlowLink = 2e5;

TEST(HostSync, AWaitOnUnfinishedWorkCountsOnceAndAWaitOnFinishedWorkNever) {
  HostCopyEngine engine(HostCopyEngine::Options{kSlowLink});
  std::vector<std::uint8_t> src(kBytes, 7), dst(kBytes, 0);
  engine.copy_async(dst.data(), src.data(), kBytes, CopyKind::host_to_host);
  const Event done = engine.record();
  const std::uint64_t before = host_sync_count();
  EXPECT_FALSE(done.ready());
  EXPECT_EQ(host_sync_count(), before) << "a query is no synchronization";
  done.synchronize();
  EXPECT_EQ(host_sync_count(), before + 1);
  EXPECT_EQ(dst[kBytes - 1], 7);
  done.synchronize();
  Event().synchronize();
  EXPECT_EQ(host_sync_count(), before + 1) << "finished work costs nothing";
}

TEST(HostSync, AStreamWaitIsNoHostSynchronizationAndAScopeBooksItsThreadsWaits) {
  HostCopyEngine engine(HostCopyEngine::Options{kSlowLink});
  std::vector<std::uint8_t> src(kBytes, 3), dst(kBytes, 0);
  engine.copy_async(dst.data(), src.data(), kBytes, CopyKind::host_to_host);
  const Event first = engine.record();
  const std::uint64_t before = host_sync_count();
  // The host engine's consumer stream is the calling thread: its wait stands for one on a GPU
  // stream.
  engine.stream_wait(nullptr, first);
  EXPECT_TRUE(first.ready());
  EXPECT_EQ(host_sync_count(), before);

  std::atomic<std::uint64_t> booked{0};
  engine.copy_async(dst.data(), src.data(), kBytes, CopyKind::host_to_host);
  const Event second = engine.record();
  {
    const ferry::detail::SyncScope scope(&booked);
    engine.synchronize();
  }
  EXPECT_TRUE(second.ready());
  EXPECT_EQ(booked.load(), 1U);
  EXPECT_EQ(host_sync_count(), before + 1);
}

// Batches of 16 samples of 4 KiB through a simulated link of 2 MB/s: each copy takes about 30 ms,
// so any wait for one in next() would find it unfinished and be counted.
TEST(HostSync, ASteadyStateEpochMakesNoHostSynchronizationOnTheConsumersThread) {
  constexpr std::int64_t kWidth = 4096;
  auto dataset = std::make_shared<IndexDataset>(96, kWidth);
  LoaderOptions o = ferry::testing::cpu_options(16, true, 5);
  ferry::detail::SimulatedCopy simulated;
  simulated.enabled = true;
  simulated.bytes_per_second = 2e6;
  ferry::Loader loader = ferry::detail::make_loader(dataset, o, simulated);
  std::size_t samples = 0;
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    for (const ferry::Batch& b : loader.epoch(epoch)) {
      EXPECT_TRUE(ferry::testing::holds_its_samples(b, kWidth));
      samples += b.size();
    }
  }
  EXPECT_EQ(samples, 192U);
  const ferry::LoaderStats s = loader.stats();
  EXPECT_EQ(s.host_syncs, 0U) << "next() or letting a batch go blocked on the copy";
  EXPECT_EQ(s.batches, 12U);
}

}  // namespace
