// The GPU path's contract: memory comes from the caching allocator and non-blocking work never
// makes the host wait; the DLPack hand-off and import are stream-ordered; a steady-state epoch
// makes no host synchronization on the consumer's thread; a failed CUDA call does not poison the
// next one; the loader's device operations (normalize, gather, skip) give the CPU loader's
// bytes; copy-stage failures reach next(); a process may exit with a loader alive; cuda:1 works
// where it exists. Each test skips, with CUDA's reason, without a GPU.

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "pipeline/fault.hpp"

#if FERRY_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using ferry::Batch;
using ferry::Device;
using ferry::DType;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::Tensor;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_bytes;
using ferry::cuda_testing::same_tensor;
using ferry::testing::IndexDataset;
using ferry::testing::within;

constexpr auto kLimit = std::chrono::seconds(60);

class GpuPath : public CudaTest {};

std::vector<std::uint8_t> host_bytes(const Tensor& t) {
  const Tensor h = t.cpu();
  const auto* p = static_cast<const std::uint8_t*>(h.data());
  return {p, p + h.nbytes()};
}

LoaderOptions gpu_options(std::size_t batch, bool shuffle, std::uint64_t seed) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.workers = 2;
  o.prefetch = 3;
  o.device = Device::cuda(0);
  return o;
}

// Every batch of epoch `epoch` on the GPU equals the CPU loader's with the same options: the
// same indices, and every field's bytes (read back), lengths included.
void expect_as_on_the_cpu(const std::shared_ptr<const ferry::Dataset>& dataset,
                          const LoaderOptions& o, std::uint64_t epoch) {
  LoaderOptions c = o;
  c.device = Device::cpu();
  Loader gpu(dataset, o);
  Loader cpu(dataset, c);
  ferry::Epoch ge = gpu.epoch(epoch);
  ferry::Epoch ce = cpu.epoch(epoch);
  std::size_t batches = 0;
  for (const Batch* g = ge.next(); g != nullptr; g = ge.next()) {
    const Batch* h = ce.next();
    ASSERT_NE(h, nullptr) << "the GPU loader delivered more batches";
    ++batches;
    ASSERT_EQ(std::vector<std::uint64_t>(g->indices().begin(), g->indices().end()),
              std::vector<std::uint64_t>(h->indices().begin(), h->indices().end()))
        << "batch " << g->number();
    for (const ferry::FieldSpec& f : dataset->fields()) {
      const Tensor& gt = (*g)[f.name];
      EXPECT_EQ(gt.device(), o.device) << f.name;
      const Tensor gh = gt.cpu();
      const Tensor& hh = (*h)[f.name];
      EXPECT_TRUE(same_tensor(hh, gh)) << "batch " << g->number() << ", field " << f.name;
    }
  }
  EXPECT_EQ(ce.next(), nullptr) << "the GPU loader delivered fewer batches";
  EXPECT_GT(batches, 0U);
}

// ---- memory and synchronization -------------------------------------------------------

TEST_F(GpuPath, RepeatedTransfersReuseCachedDeviceMemoryAndNeverFreeIt) {
  const Device gpu = Device::cuda(0);
  const std::vector<std::uint8_t> bytes = pattern(3 << 20, 1);
  const Tensor host = ferry::cuda_testing::byte_tensor(bytes).pin_memory();
  // The first blocks of each size: one u8 block, and two f32 blocks, as `last = ...` makes the
  // new result while the old one is alive. The u8 source of each conversion is given back when
  // its temporary goes, behind the conversion on the GPU, however far ahead the host runs.
  Tensor last;
  for (int i = 0; i < 2; ++i) last = host.to(gpu, true).to(DType::f32);
  const ferry::DeviceCacheStats before = ferry::device_cache_stats(gpu);
  for (int i = 0; i < 20; ++i) last = host.to(gpu, true).to(DType::f32);
  const ferry::DeviceCacheStats after = ferry::device_cache_stats(gpu);
  EXPECT_EQ(after.mallocs, before.mallocs) << "a cudaMalloc per call";
  EXPECT_EQ(after.frees, before.frees) << "a cudaFree per call (it synchronizes the device)";
  EXPECT_GE(after.hits, before.hits + 40);
  const Tensor back = last.cpu();
  for (std::size_t i = 0; i < bytes.size(); i += 4099) {
    ASSERT_EQ(back.data<float>()[i], static_cast<float>(bytes[i])) << "element " << i;
  }
}

TEST_F(GpuPath, NonBlockingTransfersConversionsAndNormalizationNeverMakeTheHostWait) {
  const Device gpu = Device::cuda(0);
  const std::vector<std::uint8_t> bytes = pattern(8 * 32 * 32 * 3, 2);
  const Tensor host = Tensor::from(bytes, {8, 32, 32, 3}).pin_memory();
  (void)ferry::normalize_images(host.to(gpu, true), ferry::Normalize{}).cpu();  // warm the cache
  const std::uint64_t before = ferry::host_sync_count();
  Tensor out;
  for (int i = 0; i < 10; ++i) {
    const Tensor d = host.to(gpu, true);
    out = ferry::normalize_images(d, ferry::Normalize{});
    (void)d.to(DType::i32).clone();
  }
  EXPECT_EQ(ferry::host_sync_count(), before);
  const Tensor expected = ferry::normalize_images(host, ferry::Normalize{});
  EXPECT_TRUE(same_tensor(expected, out.cpu()));
}

// Zeros are written on the GPU: no host wait, and a block the cache hands out again (holding an
// earlier tensor's bytes) reads back as zeros.
TEST_F(GpuPath, ZerosAreWrittenOnTheDeviceWithoutAHostWait) {
  const Device gpu = Device::cuda(0);
  const std::vector<std::uint8_t> bytes = pattern(3 * 4000, 9);
  (void)ferry::cuda_testing::byte_tensor(bytes).to(gpu);  // its block goes back to the cache
  const ferry::DeviceCacheStats before = ferry::device_cache_stats(gpu);
  const std::uint64_t syncs = ferry::host_sync_count_this_thread();
  const Tensor zeros = Tensor::zeros({3, 1000}, DType::f32, gpu);
  EXPECT_EQ(ferry::host_sync_count_this_thread(), syncs);
  EXPECT_EQ(ferry::device_cache_stats(gpu).hits, before.hits + 1) << "the earlier block, reused";
  EXPECT_EQ(zeros.device(), gpu);
  const std::vector<std::uint8_t> back = host_bytes(zeros);
  EXPECT_TRUE(
      same_bytes(std::vector<std::uint8_t>(back.size(), 0).data(), back.data(), back.size()));
}

TEST_F(GpuPath, ACudaFailureIsReportedOnceAndTheNextCallSucceeds) {
  const Device gpu = Device::cuda(0);
  // More than any GPU has: cudaMalloc fails (after the cache is emptied and it tries again).
  EXPECT_THROW((void)ferry::DeviceBuffer::allocate(gpu, std::size_t{1} << 52), ferry::DeviceError);
  // A kernel launch checks for errors right after: a stale error would be reported as its own.
  const std::vector<std::uint8_t> bytes = pattern(2 * 4 * 4 * 3, 3);
  const Tensor images = Tensor::from(bytes, {2, 4, 4, 3});
  Tensor on_gpu;
  ASSERT_NO_THROW(on_gpu = ferry::normalize_images(images.to(gpu), ferry::Normalize{}));
  EXPECT_TRUE(same_tensor(ferry::normalize_images(images, ferry::Normalize{}), on_gpu.cpu()));
}

// ---- the loader's device operations against the CPU loader -------------------------------

TEST_F(GpuPath, NormalizedImagesWithAShortLastBatchAreTheCpuLoadersBits) {
  within(kLimit, [] {
    // 37 samples in batches of 8: the last batch holds 5.
    expect_as_on_the_cpu(std::make_shared<ferry::cuda_testing::SmallImages>(37),
                         gpu_options(8, true, 4), 1);
  });
}

TEST_F(GpuPath, RowsGatheredOnTheDeviceOfEveryWidthAndAlignmentAreTheCpuLoadersBytes) {
  within(kLimit, [] {
    constexpr std::int64_t kRows = 61;
    std::vector<std::pair<std::string, Tensor>> host_fields;
    std::vector<std::pair<std::string, Tensor>> gpu_fields;
    std::uint64_t seed = 20;
    for (const std::int64_t width : {1, 3, 4, 17, 64, 1000}) {
      // One row more than the dataset's, dropped on the device: the slice starts unaligned.
      const std::vector<std::uint8_t> bytes =
          pattern(static_cast<std::size_t>((kRows + 1) * width), ++seed);
      const Tensor all = Tensor::from(bytes, {kRows + 1, width});
      std::string name = "w";
      name += std::to_string(width);
      host_fields.emplace_back(name, all.slice(1, kRows));
      gpu_fields.emplace_back(name, all.to(Device::cuda(0)).slice(1, kRows));
    }
    auto on_host = std::make_shared<ferry::TensorDataset>(host_fields);
    auto on_gpu = std::make_shared<ferry::TensorDataset>(gpu_fields);
    LoaderOptions o = gpu_options(7, true, 9);
    LoaderOptions c = o;
    c.device = Device::cpu();
    Loader gpu(on_gpu, o);
    Loader cpu(on_host, c);
    ferry::Epoch ge = gpu.epoch(2);
    ferry::Epoch ce = cpu.epoch(2);
    for (const Batch* g = ge.next(); g != nullptr; g = ge.next()) {
      const Batch* h = ce.next();
      ASSERT_NE(h, nullptr);
      for (const auto& [name, t] : host_fields) {
        EXPECT_TRUE(same_tensor((*h)[name], (*g)[name].cpu())) << name << ", batch " << g->number();
      }
    }
    EXPECT_EQ(ce.next(), nullptr);
    EXPECT_EQ(gpu.stats().read_seconds, 0.0) << "rows on the GPU are gathered there, not read";
  });
}

TEST_F(GpuPath, SkippedSamplesLeaveTheDevicePathAsTheyLeaveTheCpu) {
  within(kLimit, [] {
    std::set<std::size_t> bad;
    for (std::size_t i = 3; i < 90; i += 7) bad.insert(i);
    auto dataset = std::make_shared<IndexDataset>(90, 1021, bad);
    LoaderOptions o = gpu_options(8, true, 6);
    o.on_error = ferry::ErrorPolicy::skip;
    expect_as_on_the_cpu(dataset, o, 0);
    Loader gpu(dataset, o);
    std::size_t samples = 0;
    for (const Batch& b : gpu.epoch(0)) samples += b.size();
    EXPECT_EQ(samples, 90 - bad.size());
    EXPECT_EQ(gpu.stats().skipped, bad.size());
  });
}

// The copy thread fails before batch 3: batches 0..2 arrive, then next() raises that failure;
// the next epoch delivers everything.
void fail_copy_of_batch_3(ferry::detail::FaultPoint point, std::uint64_t batch) {
  if (point == ferry::detail::FaultPoint::copy && batch == 3) {
    throw std::runtime_error("injected copy-stage failure");
  }
}

TEST_F(GpuPath, ACopyStageFailureReachesNextAfterTheBatchesBeforeIt) {
  within(kLimit, [] {
    auto dataset = std::make_shared<IndexDataset>(64, 1021);
    Loader loader(dataset, gpu_options(8, false, 0));
    const auto previous = ferry::detail::set_fault_hook(&fail_copy_of_batch_3);
    std::size_t delivered = 0;
    std::string error;
    try {
      for (const Batch& b : loader.epoch(0)) {
        EXPECT_TRUE(ferry::testing::holds_its_samples(b, 1021));
        ++delivered;
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    ferry::detail::set_fault_hook(previous);
    EXPECT_EQ(delivered, 3U);
    EXPECT_NE(error.find("injected copy-stage failure"), std::string::npos) << error;
    std::size_t samples = 0;
    for (const Batch& b : loader.epoch(1)) {
      EXPECT_TRUE(ferry::testing::holds_its_samples(b, 1021));
      samples += b.size();
    }
    EXPECT_EQ(samples, 64U);
  });
}

TEST_F(GpuPath, AProcessMayExitWithALoaderMidEpoch) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: CUDA does not survive fork
  EXPECT_EXIT(
      {
        static Loader* loader =
            new Loader(std::make_shared<IndexDataset>(256, 1021), gpu_options(8, true, 1));
        static ferry::Epoch* epoch = new ferry::Epoch(loader->epoch(0));
        for (int i = 0; i < 3; ++i) (void)epoch->next();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---- more than one GPU -------------------------------------------------------------------

TEST_F(GpuPath, ALoaderOnCuda1AndTensorsMovedBetweenGpus) {
  if (ferry::cuda_device_count() < 2) {
    GTEST_SKIP() << "one GPU only (" << ferry::cuda_device_count() << "): cuda:1 cannot be tested";
  }
  within(kLimit, [] {
    LoaderOptions o = gpu_options(8, true, 2);
    o.device = Device::cuda(1);
    expect_as_on_the_cpu(std::make_shared<ferry::cuda_testing::SmallImages>(29), o, 0);
    const std::vector<std::uint8_t> bytes = pattern(1 << 20, 5);
    const Tensor on0 = ferry::cuda_testing::byte_tensor(bytes).to(Device::cuda(0));
    const Tensor on1 = on0.to(Device::cuda(1), true);
    EXPECT_EQ(on1.device(), Device::cuda(1));
    EXPECT_TRUE(same_bytes(bytes.data(), host_bytes(on1).data(), bytes.size()));
  });
}

#if FERRY_HAS_CUDA

// ---- streams: the caller's, the consumer's, the producer's -----------------------------------

struct OwnStream {
  cudaStream_t s = nullptr;
  OwnStream() {
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
      throw std::runtime_error("cudaStreamCreate failed");
    }
  }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  ~OwnStream() { (void)cudaStreamDestroy(s); }
};

// Holds `stream` for `ms` milliseconds: a host function the stream runs, so that work queued
// after it is still pending when the test looks.
void hold(cudaStream_t stream, int ms) {
  static int millis = 0;
  millis = ms;
  ASSERT_EQ(
      cudaLaunchHostFunc(
          stream, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(millis)); },
          nullptr),
      cudaSuccess);
}

// The bytes at device address `data`, copied back on `stream` (after its earlier work).
std::vector<std::uint8_t> read_on(cudaStream_t stream, const void* data, std::size_t n) {
  std::vector<std::uint8_t> out(n);
  EXPECT_EQ(cudaMemcpyAsync(out.data(), data, n, cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return out;
}

TEST_F(GpuPath, ToDlpackOnAStreamMakesThatStreamWaitAndNotTheHost) {
  const OwnStream consumer;
  const std::vector<std::uint8_t> bytes = pattern(32 << 20, 6);
  const Tensor host = ferry::cuda_testing::byte_tensor(bytes).pin_memory();
  const Tensor d = host.to(Device::cuda(0), true);
  const std::uint64_t before = ferry::host_sync_count();
  DLManagedTensor* m = d.to_dlpack(consumer.s);
  EXPECT_EQ(ferry::host_sync_count(), before);
  const std::vector<std::uint8_t> seen = read_on(consumer.s, m->dl_tensor.data, bytes.size());
  EXPECT_TRUE(same_bytes(bytes.data(), seen.data(), bytes.size()));
  m->deleter(m);
}

TEST_F(GpuPath, ACopyOnTheCallersStreamIsOrderedOnIt) {
  const OwnStream caller;
  const std::vector<std::uint8_t> bytes = pattern(8 << 20, 7);
  const Tensor host = ferry::cuda_testing::byte_tensor(bytes).pin_memory();
  hold(caller.s, 100);  // the caller's stream is busy: the copy queued behind must wait
  const std::uint64_t before = ferry::host_sync_count();
  const Tensor d = host.to(Device::cuda(0), true, caller.s);
  EXPECT_EQ(ferry::host_sync_count(), before);
  EXPECT_FALSE(d.ready_event().ready()) << "the copy ran before the caller's earlier work";
  const std::vector<std::uint8_t> seen = read_on(caller.s, d.data(), bytes.size());
  EXPECT_TRUE(same_bytes(bytes.data(), seen.data(), bytes.size()));
}

TEST_F(GpuPath, AnImportedTensorIsReadOnlyOnceItsProducersStreamHasWrittenIt) {
  const OwnStream producer;
  constexpr std::size_t kBytes = 4 << 20;
  void* data = nullptr;
  ASSERT_EQ(cudaMalloc(&data, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMemset(data, 0, kBytes), cudaSuccess);
  // The producer is still writing when ferry takes the tensor: 0x5a arrives after 200 ms.
  hold(producer.s, 200);
  ASSERT_EQ(cudaMemsetAsync(data, 0x5a, kBytes, producer.s), cudaSuccess);
  struct Owner {
    DLManagedTensor managed{};
    std::int64_t shape[1] = {static_cast<std::int64_t>(kBytes)};
  };
  auto* owner = new Owner();
  owner->managed.dl_tensor.data = data;
  owner->managed.dl_tensor.device = {kDLCUDA, 0};
  owner->managed.dl_tensor.ndim = 1;
  owner->managed.dl_tensor.dtype = {kDLUInt, 8, 1};
  owner->managed.dl_tensor.shape = owner->shape;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = [](DLManagedTensor* m) {
    auto* o = static_cast<Owner*>(m->manager_ctx);
    (void)cudaFree(o->managed.dl_tensor.data);
    delete o;
  };
  const Tensor imported = Tensor::from_dlpack(&owner->managed, producer.s);
  const Tensor back = imported.cpu();  // ferry's copy stream waits for the producer's
  const std::vector<std::uint8_t> expected(kBytes, 0x5a);
  EXPECT_TRUE(same_bytes(expected.data(), back.data(), kBytes));
}

// A consumer whose compute takes longer than the copy (its stream held 3 ms per batch): after a
// warm-up epoch, an epoch makes no host synchronization on the consumer's thread, each batch
// handed over on the consumer's stream waits for nothing at all, and its bytes are right.
TEST_F(GpuPath, ASteadyStateEpochMakesNoHostSynchronizationOnTheConsumersThread) {
  within(kLimit, [] {
    const OwnStream consumer;
    auto dataset = std::make_shared<IndexDataset>(160, 1021);
    LoaderOptions o = gpu_options(16, true, 8);
    o.stream = consumer.s;
    Loader loader(dataset, o);
    for (const Batch& b : loader.epoch(0)) (void)b;
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    const ferry::LoaderStats warm = loader.stats();
    std::size_t checked = 0;
    for (const Batch& b : loader.epoch(1)) {
      hold(consumer.s, 3);
      const std::uint64_t before = ferry::host_sync_count_this_thread();
      DLManagedTensor* m = b["x"].to_dlpack(consumer.s);
      EXPECT_EQ(ferry::host_sync_count_this_thread(), before) << "batch " << b.number();
      if (b.number() % 4 == 0) {  // read back on the consumer's stream, behind the hand-off
        const std::vector<std::uint8_t> seen =
            read_on(consumer.s, m->dl_tensor.data, b.size() * 1021);
        for (std::size_t i = 0; i < b.size(); ++i) {
          ASSERT_EQ(seen[i * 1021 + 5], IndexDataset::expected_byte(b.indices()[i], 5));
        }
        ++checked;
      }
      m->deleter(m);
    }
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    const ferry::LoaderStats s = loader.stats();
    EXPECT_EQ(s.host_syncs - warm.host_syncs, 0U);
    EXPECT_EQ(s.batches - warm.batches, 10U);
    EXPECT_EQ(checked, 3U);
    EXPECT_GT(s.copy_seconds, warm.copy_seconds) << "copy time comes from the copy's events";
  });
}

#endif  // FERRY_HAS_CUDA

}  // namespace
