// A steady-state epoch on the GPU path, counted by the model of the runtime itself rather than by
// ferry's own figures: after a warm-up epoch, an epoch of normalized images handed to a consumer's
// stream over DLPack calls no cudaMalloc, cudaFree, cudaHostAlloc or cudaFreeHost, makes no CUDA
// event (they come from a pool), queues no host function, never blocks the consumer's thread,
// and every event ferry ever made sleeps rather than spins when waited on. And a loader without
// pinned staging is caught: each batch's copy from pageable memory blocks its copy thread, and
// ferry counts it as the host synchronization it is.

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_test_util.hpp"
#include "cudasim.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::Device;
using ferry::DType;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::Tensor;

struct Epoch {
  std::size_t samples = 0;
  bool labels_right = true;
};

// One epoch, each batch handed to `consumer` over DLPack; every third batch's labels read back.
Epoch run(Loader& loader, std::uint64_t number, cudaStream_t consumer) {
  Epoch e;
  for (const Batch& b : loader.epoch(number)) {
    DLManagedTensor* image = b["image"].to_dlpack(consumer);
    if (b.number() % 3 == 0) {
      const Tensor labels = b["label"].cpu();
      for (std::size_t i = 0; i < b.size(); ++i) {
        e.labels_right = e.labels_right && labels.data<std::int64_t>()[i] ==
                                               static_cast<std::int64_t>(b.indices()[i]);
      }
    }
    image->deleter(image);
    e.samples += b.size();
  }
  return e;
}

TEST(CudasimSteadyState, AnEpochAllocatesNothingMakesNoEventQueuesNoHostFunctionAndNeverBlocks) {
  cudaStream_t consumer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  {
    LoaderOptions o;
    o.batch_size = 8;
    o.shuffle = true;
    o.seed = 4;
    o.workers = 2;
    o.prefetch = 3;
    // The fixed pipeline: autotune may add a slot (a cudaHostAlloc) in any epoch where the
    // consumer waited, which a busy machine decides, not the loader's steady state.
    o.autotune = false;
    o.device = Device::cuda(0);
    o.stream = consumer;
    Loader loader(std::make_shared<ferry::cuda_testing::SmallImages>(100), o);
    const Epoch warm = run(loader, 0, consumer);
    ASSERT_EQ(warm.samples, 100U);
    ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);

    const ferry_cudasim::Counts before = ferry_cudasim::counts();
    const std::uint64_t syncs = ferry::host_sync_count_this_thread();
    const std::uint64_t stats_syncs = loader.stats().host_syncs;
    const Epoch steady = run(loader, 1, consumer);
    const ferry_cudasim::Counts after = ferry_cudasim::counts();

    EXPECT_EQ(steady.samples, 100U);
    EXPECT_TRUE(steady.labels_right);
    EXPECT_EQ(after.mallocs, before.mallocs) << "cudaMalloc in a steady-state epoch";
    EXPECT_EQ(after.frees, before.frees) << "cudaFree (it waits for the device)";
    EXPECT_EQ(after.host_allocs, before.host_allocs) << "cudaHostAlloc";
    EXPECT_EQ(after.host_frees, before.host_frees) << "cudaFreeHost";
    EXPECT_EQ(after.events_made, before.events_made) << "events made, not taken from the pool";
    EXPECT_EQ(after.host_functions, before.host_functions) << "a host function on a stream";
    EXPECT_EQ(after.spinning_events, 0U) << "an event made without cudaEventBlockingSync";
    EXPECT_GT(after.events_made, 0U);
    // The label read-backs wait for their copies; the hand-offs and next() never do.
    EXPECT_EQ(loader.stats().host_syncs, stats_syncs) << "next() blocked the consumer's thread";
    EXPECT_LE(ferry::host_sync_count_this_thread() - syncs, 5U);  // batches 0, 3, 6, 9, 12
  }
  (void)cudaStreamSynchronize(consumer);
  (void)cudaStreamDestroy(consumer);
}

// Batches of a loader copied to cuda:0 (nothing read back): the copies the model saw block the
// host (pageable memory) and the host synchronizations ferry counted on the loader's threads.
struct Staging {
  std::uint64_t batches = 0;
  std::uint64_t pageable_copies = 0;
  std::uint64_t background_syncs = 0;
};

Staging staging(bool pin_memory) {
  LoaderOptions o;
  o.batch_size = 8;
  o.workers = 2;
  o.prefetch = 2;
  o.device = Device::cuda(0);
  o.pin_memory = pin_memory;
  Loader loader(std::make_shared<ferry::cuda_testing::SmallImages>(64), o);
  for (const Batch& b : loader.epoch(0)) (void)b;  // warm-up
  const ferry_cudasim::Counts before = ferry_cudasim::counts();
  const std::uint64_t syncs = loader.stats().background_syncs;
  Staging s;
  for (const Batch& b : loader.epoch(1)) {
    (void)b;
    ++s.batches;
  }
  s.pageable_copies = ferry_cudasim::counts().pageable_copies - before.pageable_copies;
  s.background_syncs = loader.stats().background_syncs - syncs;
  return s;
}

TEST(CudasimSteadyState, PageableStagingMakesEveryBatchsCopyAHostSyncPinnedStagingNone) {
  const Staging pageable = staging(false);
  ASSERT_EQ(pageable.batches, 8U);
  EXPECT_GE(pageable.pageable_copies, pageable.batches) << "copies from pageable memory";
  EXPECT_GE(pageable.background_syncs, pageable.batches) << "ferry counted them as host syncs";

  const Staging pinned = staging(true);
  ASSERT_EQ(pinned.batches, 8U);
  EXPECT_EQ(pinned.pageable_copies, 0U) << "a pinned loader's copy blocked the host";
}

}  // namespace
