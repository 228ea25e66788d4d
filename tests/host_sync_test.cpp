// Host synchronizations are counted (ferry::host_sync_count, LoaderStats::host_syncs): every
// wait that blocks a host thread on unfinished device work, and only those. The host copy engine
// counts its waits as the CUDA engine does, so the contract "a steady-state epoch makes no host
// synchronization on the consumer's thread" is checked here, without a GPU.

#include "runtime/host_sync.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "copy/host/host_copy_engine.hpp"
#include "core/storage.hpp"
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

TEST(HostSync, AThreadsOwnCountMovesOnlyWithItsOwnWaits) {
  HostCopyEngine engine(HostCopyEngine::Options{kSlowLink});
  std::vector<std::uint8_t> src(kBytes, 5), dst(kBytes, 0);
  engine.copy_async(dst.data(), src.data(), kBytes, CopyKind::host_to_host);
  const Event done = engine.record();
  const std::uint64_t mine = ferry::host_sync_count_this_thread();
  const std::uint64_t all = host_sync_count();
  std::uint64_t theirs = 0;
  std::thread other([&] {
    done.synchronize();
    theirs = ferry::host_sync_count_this_thread();
  });
  other.join();
  EXPECT_EQ(theirs, 1U) << "the other thread waited once, on unfinished work";
  EXPECT_EQ(host_sync_count(), all + 1);
  EXPECT_EQ(ferry::host_sync_count_this_thread(), mine) << "this thread never waited";
  EXPECT_EQ(dst[0], 5);
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

namespace {

// A storage that goes while work still writes it does not wait for the work: its memory, and the
// sources the work reads, are kept aside until a later allocation finds the work done.
TEST(HostSync, AStorageThatGoesDuringItsWriteNeitherWaitsNorFreesTheMemoryUnderIt) {
  using ferry::detail::Storage;
  HostCopyEngine engine(HostCopyEngine::Options{kSlowLink});
  ferry::PinnedPool& pool = ferry::PinnedPool::global();
  auto source = ferry::detail::allocate_storage(kBytes, Device::cpu(), /*pinned=*/true);
  auto target = ferry::detail::allocate_storage(kBytes, Device::cpu(), /*pinned=*/true);
  std::memset(source->data(), 9, kBytes);
  engine.copy_async(target->data(), source->data(), kBytes, CopyKind::host_to_host);
  const Event write = engine.record();
  target->set_pending(write, {source});
  const std::weak_ptr<Storage> source_alive = source;
  source.reset();  // the pending write keeps it
  const std::size_t in_use = pool.stats().in_use_bytes;
  const std::uint64_t before = host_sync_count();
  target.reset();  // the write is still running: no wait, and both blocks stay in use
  EXPECT_EQ(host_sync_count(), before);
  EXPECT_FALSE(write.ready());
  EXPECT_FALSE(source_alive.expired()) << "the copy's source went while the copy read it";
  EXPECT_EQ(pool.stats().in_use_bytes, in_use) << "the target's memory went back under the copy";
  write.synchronize();
  // The next allocation finds the work done and lets both go.
  (void)ferry::detail::allocate_storage(16, Device::cpu(), false);
  EXPECT_TRUE(source_alive.expired());
  EXPECT_LT(pool.stats().in_use_bytes, in_use);
}

}  // namespace
