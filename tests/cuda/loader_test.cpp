// The Loader on a GPU (Device::cuda(0)): every index of the epoch arrives once, in the planned
// order, with its own bytes, exactly as the same loader gives them on the CPU, for every ring of
// staging slots and device buffers; batch tensors live on the GPU and carry CUDA events; the
// consumer's own CUDA stream is waited for before a buffer is reused; a kept batch keeps its
// bytes; leaving an epoch early is prompt; pinned and pageable staging agree. Every wait is
// bounded (ferry::testing::within): a hang fails the program instead of stalling the device run.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

#if FERRY_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace {

using ferry::Batch;
using ferry::Device;
using ferry::DType;
using ferry::Epoch;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::Tensor;
using ferry::cuda_testing::CudaParamTest;
using ferry::cuda_testing::CudaTest;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::within;

using Clock = std::chrono::steady_clock;

/// Bytes of "x" per sample: odd, so that "y" and "z" start at offsets the layout must align.
constexpr std::int64_t kWidth = 1021;
/// The bound on every test's body; each one takes well under a second on a GPU.
constexpr auto kLimit = std::chrono::seconds(30);

/// What one batch delivered: its number, its indices and every field's bytes, read back to the
/// host.
struct Delivered {
  std::size_t number = 0;
  std::vector<std::uint64_t> indices;
  std::vector<std::vector<std::uint8_t>> fields;  // x, y, z
};

std::vector<std::uint8_t> host_bytes(const Tensor& t) {
  const Tensor h = t.cpu();
  const auto* p = static_cast<const std::uint8_t*>(h.data());
  return {p, p + h.nbytes()};
}

Delivered record(const Batch& b) {
  Delivered d;
  d.number = b.number();
  d.indices.assign(b.indices().begin(), b.indices().end());
  for (const char* f : {"x", "y", "z"}) d.fields.push_back(host_bytes(b[f]));
  return d;
}

/// The batch's tensors are on cuda:0 with the dataset's dtypes and shapes, and the batch is
/// marked by a CUDA event.
::testing::AssertionResult on_the_gpu(const Batch& b) {
  const auto n = static_cast<std::int64_t>(b.size());
  const struct {
    const char* name;
    DType dtype;
    std::vector<std::int64_t> shape;
  } expected[] = {{"x", DType::u8, {n, kWidth}}, {"y", DType::i64, {n}}, {"z", DType::f32, {n, 2}}};
  for (const auto& e : expected) {
    const Tensor& t = b[e.name];
    if (t.device() != Device::cuda(0)) {
      return ::testing::AssertionFailure()
             << "batch " << b.number() << ": \"" << e.name << "\" is on " << t.device();
    }
    if (t.dtype() != e.dtype || t.shape() != e.shape) {
      return ::testing::AssertionFailure()
             << "batch " << b.number() << ": \"" << e.name << "\" is "
             << ferry::dtype_name(t.dtype()) << " " << ::testing::PrintToString(t.shape());
    }
    if (t.ready_event().native_handle() == nullptr) {
      return ::testing::AssertionFailure()
             << "batch " << b.number() << ": \"" << e.name << "\" has no CUDA ready event";
    }
  }
  if (b.ready_event().native_handle() == nullptr) {
    return ::testing::AssertionFailure()
           << "batch " << b.number() << ": ready_event() is not a CUDA event";
  }
  return ::testing::AssertionSuccess();
}

/// Iterates one whole epoch, checking every batch's bytes (and that it is on the GPU when
/// `gpu`), and returns what it delivered.
std::vector<Delivered> run_epoch(Loader& loader, std::uint64_t epoch, bool gpu) {
  std::vector<Delivered> out;
  for (const Batch& b : loader.epoch(epoch)) {
    EXPECT_TRUE(holds_its_samples(b, kWidth));
    if (gpu) {
      EXPECT_TRUE(on_the_gpu(b));
    }
    out.push_back(record(b));
  }
  return out;
}

/// The same batches, in the same order, with the same indices and bytes.
::testing::AssertionResult same_epoch(const std::vector<Delivered>& expected,
                                      const std::vector<Delivered>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure()
           << expected.size() << " batches expected, " << actual.size() << " delivered";
  }
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (actual[k].number != k) {
      return ::testing::AssertionFailure()
             << "batch " << k << " came numbered " << actual[k].number;
    }
    if (expected[k].indices != actual[k].indices) {
      return ::testing::AssertionFailure()
             << "batch " << k << ": indices " << ::testing::PrintToString(actual[k].indices)
             << ", expected " << ::testing::PrintToString(expected[k].indices);
    }
    for (std::size_t f = 0; f < expected[k].fields.size(); ++f) {
      if (expected[k].fields[f] != actual[k].fields[f]) {
        return ::testing::AssertionFailure() << "batch " << k << ": field " << f << " differs";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

/// Every index in [0, n) exactly once over the epoch, in batches of `batch` but the last.
::testing::AssertionResult each_index_once(const std::vector<Delivered>& epoch, std::size_t n,
                                           std::size_t batch) {
  std::vector<std::uint64_t> all;
  for (std::size_t k = 0; k < epoch.size(); ++k) {
    const std::size_t size = epoch[k].indices.size();
    if (size != batch && !(k + 1 == epoch.size() && size > 0 && size < batch)) {
      return ::testing::AssertionFailure()
             << "batch " << k << " of " << epoch.size() << " holds " << size << " samples";
    }
    all.insert(all.end(), epoch[k].indices.begin(), epoch[k].indices.end());
  }
  std::sort(all.begin(), all.end());
  std::vector<std::uint64_t> expected(n);
  std::iota(expected.begin(), expected.end(), std::uint64_t{0});
  if (all != expected) {
    const auto dup = std::adjacent_find(all.begin(), all.end());
    return ::testing::AssertionFailure()
           << all.size() << " samples delivered for " << n << " indices"
           << (dup != all.end() ? "; " + std::to_string(*dup) + " more than once" : "");
  }
  return ::testing::AssertionSuccess();
}

LoaderOptions gpu_options(std::size_t batch, bool shuffle, std::uint64_t seed,
                          int device_buffers = 2, int prefetch = 4) {
  LoaderOptions o = ferry::testing::cpu_options(batch, shuffle, seed);
  o.device = Device::cuda(0);
  o.workers = 3;
  o.device_buffers = device_buffers;
  o.prefetch = prefetch;
  o.autotune = false;  // the ring these tests ask for, its sizes fixed (autotune: autotune_test)
  return o;
}

/// The reference: the same dataset and seed on the CPU, with another worker count.
std::vector<Delivered> cpu_epoch(std::size_t n, std::size_t batch, bool shuffle, std::uint64_t seed,
                                 std::uint64_t epoch, bool drop_last = false) {
  LoaderOptions o = ferry::testing::cpu_options(batch, shuffle, seed);
  o.workers = 1;
  o.drop_last = drop_last;
  Loader cpu(std::make_shared<IndexDataset>(n, kWidth), o);
  return run_epoch(cpu, epoch, /*gpu=*/false);
}

// ---- every ring: device_buffers 2 and 3, prefetch 2 and 4 ------------------------------------

struct Ring {
  int device_buffers;
  int prefetch;
};

void PrintTo(const Ring& r, std::ostream* os) {
  *os << r.device_buffers << " device buffers, prefetch " << r.prefetch;
}

std::string ring_name(const ::testing::TestParamInfo<Ring>& info) {
  return std::to_string(info.param.device_buffers) + "_buffers_prefetch_" +
         std::to_string(info.param.prefetch);
}

class GpuLoaderRing : public CudaParamTest<Ring> {};

TEST_P(GpuLoaderRing, DeliversEveryIndexOnceInThePlannedOrderLikeTheCpu) {
  const Ring r = GetParam();
  // 1000 samples in batches of 32: 31 full batches and a last one of 8.
  constexpr std::size_t kSamples = 1000;
  constexpr std::size_t kBatch = 32;
  constexpr std::uint64_t kSeed = 20261129;
  within(kLimit, [&] {
    Loader gpu(std::make_shared<IndexDataset>(kSamples, kWidth),
               gpu_options(kBatch, /*shuffle=*/true, kSeed, r.device_buffers, r.prefetch));
    EXPECT_EQ(gpu.batches_per_epoch(), 32U);
    for (const std::uint64_t e : {0U, 1U}) {
      const std::vector<Delivered> got = run_epoch(gpu, e, /*gpu=*/true);
      EXPECT_TRUE(each_index_once(got, kSamples, kBatch)) << "epoch " << e;
      EXPECT_TRUE(same_epoch(cpu_epoch(kSamples, kBatch, true, kSeed, e), got)) << "epoch " << e;
    }
    const ferry::LoaderStats s = gpu.stats();
    EXPECT_EQ(s.batches, 64U);
    EXPECT_EQ(s.samples, 2 * kSamples);
    // The ring is made once: no buffer or slot more than asked for, whatever the epochs.
    EXPECT_EQ(s.device_allocations, static_cast<std::uint64_t>(r.device_buffers));
    EXPECT_EQ(s.staging_allocations, static_cast<std::uint64_t>(r.prefetch));
  });
}

TEST_P(GpuLoaderRing, WithoutShuffleTheOrderIsTheDatasetsOwn) {
  const Ring r = GetParam();
  within(kLimit, [&] {
    LoaderOptions o = gpu_options(48, /*shuffle=*/false, 0, r.device_buffers, r.prefetch);
    o.drop_last = true;  // 1000 samples: 20 batches of 48, the last 40 samples dropped
    Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), o);
    const std::vector<Delivered> got = run_epoch(gpu, 0, /*gpu=*/true);
    ASSERT_EQ(got.size(), 20U);
    std::uint64_t next = 0;
    for (const Delivered& d : got) {
      ASSERT_EQ(d.indices.size(), 48U);
      for (const std::uint64_t i : d.indices) ASSERT_EQ(i, next++) << "batch " << d.number;
    }
    EXPECT_TRUE(same_epoch(cpu_epoch(1000, 48, false, 0, 0, /*drop_last=*/true), got));
  });
}

INSTANTIATE_TEST_SUITE_P(Rings, GpuLoaderRing,
                         ::testing::Values(Ring{2, 2}, Ring{2, 4}, Ring{3, 2}, Ring{3, 4}),
                         ring_name);

// ---- the batches themselves -------------------------------------------------------------------

class GpuLoader : public CudaTest {};

TEST_F(GpuLoader, BatchTensorsLiveOnTheGpuAndCarryACudaEvent) {
  within(kLimit, [&] {
    Loader gpu(std::make_shared<IndexDataset>(100, kWidth), gpu_options(16, true, 5));
    std::size_t count = 0;
    for (const Batch& b : gpu.epoch(0)) {
      EXPECT_TRUE(on_the_gpu(b));
      EXPECT_FALSE(b["x"].is_pinned()) << "device memory is not pinned host memory";
      b.ready_event().synchronize();
      EXPECT_TRUE(b.ready_event().ready());
      EXPECT_TRUE(b["y"].ready_event().ready()) << "the tensors are written by the same copy";
      EXPECT_TRUE(holds_its_samples(b, kWidth));
      ++count;
    }
    EXPECT_EQ(count, 7U);  // 6 batches of 16 and one of 4
  });
}

TEST_F(GpuLoader, NullStreamIsTheDefaultStreamAndGivesTheRightBytes) {
  within(kLimit, [&] {
    LoaderOptions o = gpu_options(32, true, 11);
    o.stream = nullptr;
    Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), o);
    const std::vector<Delivered> got = run_epoch(gpu, 3, /*gpu=*/true);
    EXPECT_TRUE(each_index_once(got, 1000, 32));
    EXPECT_TRUE(same_epoch(cpu_epoch(1000, 32, true, 11, 3), got));
  });
}

#if FERRY_HAS_CUDA

::testing::AssertionResult cuda_ok(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << cudaGetErrorString(status);
}

/// A non-blocking CUDA stream of the test's own: nothing orders it after the legacy default
/// stream, so only the events the loader records and waits for can.
struct UserStream {
  cudaStream_t stream = nullptr;
  UserStream() {
    EXPECT_TRUE(cuda_ok(cudaSetDevice(0), "cudaSetDevice"));
    EXPECT_TRUE(cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                        "cudaStreamCreateWithFlags"));
  }
  UserStream(const UserStream&) = delete;
  UserStream& operator=(const UserStream&) = delete;
  ~UserStream() {
    if (stream != nullptr) {
      (void)cudaStreamSynchronize(stream);
      (void)cudaStreamDestroy(stream);
    }
  }
};

/// Page-locked host memory from cudaMallocHost, so that copies into it stay asynchronous.
struct PinnedHost {
  std::uint8_t* data = nullptr;
  explicit PinnedHost(std::size_t n) {
    void* p = nullptr;
    EXPECT_TRUE(cuda_ok(cudaMallocHost(&p, n), "cudaMallocHost"));
    data = static_cast<std::uint8_t*>(p);
  }
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  ~PinnedHost() {
    if (data != nullptr) (void)cudaFreeHost(data);
  }
};

/// Where each batch's fields were copied to on the consumer's stream.
struct Queued {
  std::vector<std::uint64_t> indices;
  std::size_t offsets[3] = {0, 0, 0};  // x, y, z in the pinned buffer
};

/// The expected bytes of `indices`' samples, field by field (IndexDataset's encoding).
::testing::AssertionResult queued_copy_holds_its_samples(const Queued& q, std::size_t number,
                                                         const std::uint8_t* host) {
  const std::size_t n = q.indices.size();
  const std::uint8_t* x = host + q.offsets[0];
  std::vector<std::int64_t> y(n);
  std::vector<float> z(2 * n);
  std::memcpy(y.data(), host + q.offsets[1], n * sizeof(std::int64_t));
  std::memcpy(z.data(), host + q.offsets[2], 2 * n * sizeof(float));
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t index = q.indices[i];
    for (std::int64_t j = 0; j < kWidth; ++j) {
      if (x[i * static_cast<std::size_t>(kWidth) + static_cast<std::size_t>(j)] !=
          IndexDataset::expected_byte(index, j)) {
        return ::testing::AssertionFailure()
               << "batch " << number << " sample " << index << " byte " << j
               << " differs in the copy queued on the consumer's stream";
      }
    }
    if (y[i] != static_cast<std::int64_t>(index) || z[2 * i] != static_cast<float>(index) ||
        z[2 * i + 1] != -static_cast<float>(index)) {
      return ::testing::AssertionFailure()
             << "batch " << number << " sample " << index
             << ": y or z differs in the copy queued on the consumer's stream";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Iterates an epoch of a loader whose consumer stream is `stream`: for every batch, queues
/// on that stream (no host wait) a device-to-host copy of each field into `host`, as a training
/// step reading the batch would. Checks the copies once the stream has finished.
void queue_copies_on_the_stream(Loader& loader, cudaStream_t stream, std::size_t samples,
                                bool also_cpu) {
  PinnedHost host(samples * (static_cast<std::size_t>(kWidth) + 8 + 8));
  ASSERT_NE(host.data, nullptr);
  std::vector<Queued> queued;
  std::size_t at = 0;
  for (const Batch& b : loader.epoch(0)) {
    EXPECT_TRUE(on_the_gpu(b));
    // The ready event is a CUDA event that user code can wait on too.
    const auto ready = static_cast<cudaEvent_t>(b.ready_event().native_handle());
    EXPECT_TRUE(cuda_ok(cudaStreamWaitEvent(stream, ready, 0), "cudaStreamWaitEvent"));
    Queued q;
    q.indices.assign(b.indices().begin(), b.indices().end());
    std::size_t f = 0;
    for (const char* name : {"x", "y", "z"}) {
      const Tensor& t = b[name];
      q.offsets[f++] = at;
      EXPECT_TRUE(cuda_ok(
          cudaMemcpyAsync(host.data + at, t.data(), t.nbytes(), cudaMemcpyDeviceToHost, stream),
          "cudaMemcpyAsync"));
      at += t.nbytes();
    }
    queued.push_back(std::move(q));
    if (also_cpu) {
      EXPECT_TRUE(holds_its_samples(b, kWidth));
    }
  }
  ASSERT_TRUE(cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize"));
  EXPECT_EQ(at, samples * (static_cast<std::size_t>(kWidth) + 16));
  for (std::size_t k = 0; k < queued.size(); ++k) {
    EXPECT_TRUE(queued_copy_holds_its_samples(queued[k], k, host.data));
  }
  std::vector<Delivered> order;
  for (const Queued& q : queued) order.push_back(Delivered{0, q.indices, {}});
  EXPECT_TRUE(each_index_once(order, samples, loader.options().batch_size));
}

TEST_F(GpuLoader, UserStreamSeesEveryBatchsBytes) {
  within(kLimit, [&] {
    UserStream user;
    ASSERT_NE(user.stream, nullptr);
    LoaderOptions o = gpu_options(32, true, 17);
    o.stream = user.stream;
    Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), o);
    queue_copies_on_the_stream(gpu, user.stream, 1000, /*also_cpu=*/true);
    // The same batches as with the default stream.
    LoaderOptions d = gpu_options(32, true, 17);
    Loader other(std::make_shared<IndexDataset>(1000, kWidth), d);
    EXPECT_TRUE(same_epoch(run_epoch(other, 1, true), run_epoch(gpu, 1, true)));
  });
}

int hold_ms = 300;

void CUDART_CB hold_the_stream(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms)));
}

TEST_F(GpuLoader, BuffersWaitForWorkStillQueuedOnTheUserStream) {
  // The consumer's stream is held for 300 ms before any of its copies run, while the loop runs
  // ahead: with 2 device buffers and 32 batches, a buffer reused before the release event
  // recorded on this stream would be overwritten under the copies still queued there.
  within(kLimit, [&] {
    UserStream user;
    ASSERT_NE(user.stream, nullptr);
    LoaderOptions o = gpu_options(32, true, 23, /*device_buffers=*/2, /*prefetch=*/2);
    o.stream = user.stream;
    Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), o);
    ASSERT_TRUE(
        cuda_ok(cudaLaunchHostFunc(user.stream, hold_the_stream, &hold_ms), "cudaLaunchHostFunc"));
    queue_copies_on_the_stream(gpu, user.stream, 1000, /*also_cpu=*/false);
  });
}

#endif  // FERRY_HAS_CUDA

// ---- batches kept past their iteration ------------------------------------------------------

TEST_F(GpuLoader, KeptBatchKeepsItsBytesWhileLaterBatchesArrive) {
  for (const int buffers : {2, 3}) {
    SCOPED_TRACE(std::to_string(buffers) + " device buffers");
    within(kLimit, [&] {
      Loader gpu(std::make_shared<IndexDataset>(1000, kWidth),
                 gpu_options(32, true, 29, buffers, 3));
      const std::vector<Delivered> reference = cpu_epoch(1000, 32, true, 29, 0);
      std::optional<Batch> kept;  // batch 0, the whole batch
      Tensor kept_z;              // batch 1's "z" alone (3 buffers: one still circulates)
      std::vector<std::uint64_t> kept_z_indices;
      std::size_t count = 0;
      auto z_intact = [&] {
        const Tensor z = kept_z.cpu();
        for (std::size_t i = 0; i < kept_z_indices.size(); ++i) {
          const auto index = static_cast<float>(kept_z_indices[i]);
          if (z.data<float>()[2 * i] != index || z.data<float>()[2 * i + 1] != -index) {
            return ::testing::AssertionFailure() << "kept \"z\" of batch 1 changed at row " << i;
          }
        }
        return ::testing::AssertionSuccess();
      };
      for (const Batch& b : gpu.epoch(0)) {
        EXPECT_TRUE(holds_its_samples(b, kWidth));
        if (b.number() == 0) kept = b;
        if (buffers == 3 && b.number() == 1) {
          kept_z = b["z"];
          kept_z_indices.assign(b.indices().begin(), b.indices().end());
        }
        // Checked while later batches are copied into the other buffers.
        if (b.number() > 0) {
          EXPECT_TRUE(holds_its_samples(*kept, kWidth)) << "at batch " << b.number();
        }
        if (b.number() > 1 && kept_z.defined()) {
          EXPECT_TRUE(z_intact()) << "at batch " << b.number();
        }
        ++count;
      }
      EXPECT_EQ(count, 32U);
      ASSERT_TRUE(kept.has_value());
      EXPECT_EQ(kept->number(), 0U);
      EXPECT_EQ(kept->indices().size(), 32U);
      EXPECT_TRUE(std::equal(kept->indices().begin(), kept->indices().end(),
                             reference.front().indices.begin(), reference.front().indices.end()));
      EXPECT_TRUE(holds_its_samples(*kept, kWidth)) << "after the epoch";
      EXPECT_TRUE(on_the_gpu(*kept));
      if (kept_z.defined()) {
        EXPECT_TRUE(z_intact()) << "after the epoch";
      }
      // Let go: the buffers return, and the next epoch has the whole ring again.
      kept.reset();
      kept_z = Tensor();
      const std::vector<Delivered> next = run_epoch(gpu, 1, true);
      EXPECT_TRUE(each_index_once(next, 1000, 32));
      EXPECT_TRUE(same_epoch(cpu_epoch(1000, 32, true, 29, 1), next));
      EXPECT_EQ(gpu.stats().device_allocations, static_cast<std::uint64_t>(buffers));
    });
  }
}

TEST_F(GpuLoader, KeepingEveryBufferIsAConfigErrorNotAHang) {
  within(kLimit, [&] {
    Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), gpu_options(32, true, 31, 2, 3));
    std::optional<Batch> first;
    std::optional<Batch> second;
    {
      Epoch epoch = gpu.epoch(0);
      const Batch* b = epoch.next();
      ASSERT_NE(b, nullptr);
      first = *b;
      b = epoch.next();
      ASSERT_NE(b, nullptr);
      second = *b;
      EXPECT_THROW(epoch.next(), ferry::ConfigError);
      EXPECT_TRUE(holds_its_samples(*first, kWidth));
      EXPECT_TRUE(holds_its_samples(*second, kWidth));
    }
    first.reset();
    second.reset();
    const std::vector<Delivered> got = run_epoch(gpu, 0, true);
    EXPECT_TRUE(each_index_once(got, 1000, 32));
    EXPECT_TRUE(same_epoch(cpu_epoch(1000, 32, true, 31, 0), got));
  });
}

// ---- leaving early ------------------------------------------------------------------------

TEST_F(GpuLoader, EarlyExitReturnsPromptlyAndTheNextEpochDeliversEverything) {
  // 20000 samples of about 1 KiB in batches of 64: 313 batches, so that leaving after a few
  // leaves most of the epoch planned, filling or being copied.
  constexpr std::size_t kSamples = 20000;
  constexpr std::size_t kBatch = 64;
  within(kLimit, [&] {
    Loader gpu(std::make_shared<IndexDataset>(kSamples, kWidth),
               gpu_options(kBatch, true, 37, 2, 4));
    ASSERT_EQ(gpu.batches_per_epoch(), 313U);
    for (const std::size_t stop_after : {2U, 1U, 7U}) {
      Clock::time_point left;
      {
        Epoch epoch = gpu.epoch(0);
        std::size_t seen = 0;
        for (const Batch& b : epoch) {
          EXPECT_TRUE(holds_its_samples(b, kWidth));
          if (++seen == stop_after) break;
        }
        EXPECT_EQ(seen, stop_after);
        left = Clock::now();
      }  // the epoch is destroyed here, mid-flight
      const auto took = std::chrono::duration<double>(Clock::now() - left).count();
      EXPECT_LT(took, 2.0) << "destroying the epoch after " << stop_after << " batches took "
                           << took << " s";
    }
    const std::vector<Delivered> got = run_epoch(gpu, 0, true);
    EXPECT_TRUE(each_index_once(got, kSamples, kBatch));
    EXPECT_TRUE(same_epoch(cpu_epoch(kSamples, kBatch, true, 37, 0), got));
    EXPECT_EQ(gpu.stats().device_allocations, 2U);
    EXPECT_EQ(gpu.stats().staging_allocations, 4U);
  });
}

// ---- pinned and pageable staging ------------------------------------------------------------

TEST_F(GpuLoader, PinnedAndPageableStagingDeliverTheSameBytes) {
  within(kLimit, [&] {
    std::vector<std::vector<Delivered>> runs;
    for (const bool pin : {true, false}) {
      LoaderOptions o = gpu_options(32, true, 41, 2, 3);
      o.pin_memory = pin;
      Loader gpu(std::make_shared<IndexDataset>(1000, kWidth), o);
      for (const std::uint64_t e : {0U, 1U}) {
        runs.push_back(run_epoch(gpu, e, true));
        EXPECT_TRUE(each_index_once(runs.back(), 1000, 32))
            << (pin ? "pinned" : "pageable") << ", epoch " << e;
      }
    }
    ASSERT_EQ(runs.size(), 4U);
    EXPECT_TRUE(same_epoch(runs[0], runs[2])) << "epoch 0: pinned vs pageable";
    EXPECT_TRUE(same_epoch(runs[1], runs[3])) << "epoch 1: pinned vs pageable";
    EXPECT_TRUE(same_epoch(cpu_epoch(1000, 32, true, 41, 0), runs[2])) << "pageable vs the cpu";
  });
}

/// IndexDataset whose reads other processes do (Dataset::shares_staging): counts the samples
/// whose every field lies in a SharedBuffer, and those whose first field CUDA reads as page-locked
/// host memory.
class SharedIndex : public IndexDataset {
 public:
  using IndexDataset::IndexDataset;
  bool shares_staging() const noexcept override { return true; }
  void read(std::size_t index, ferry::SampleRef out) const override {
    ferry::SharedRegion r;
    bool shared = true;
    for (std::size_t f = 0; f < 3; ++f) {
      shared = shared && ferry::shared_region(out.data(f), out.nbytes(f), r);
    }
    if (shared) shared_.fetch_add(1);
#if FERRY_HAS_CUDA
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, out.data(0)) == cudaSuccess && a.type == cudaMemoryTypeHost) {
      pinned_.fetch_add(1);
    }
    static_cast<void>(cudaGetLastError());
#endif
    IndexDataset::read(index, out);
  }
  int shared() const { return shared_.load(); }
  int pinned() const { return pinned_.load(); }

 private:
  mutable std::atomic<int> shared_{0};
  mutable std::atomic<int> pinned_{0};
};

TEST_F(GpuLoader, SharedStagingIsRegisteredWithCudaAndDeliversTheSameBytes) {
  within(kLimit, [&] {
    LoaderOptions o = gpu_options(32, true, 41, 2, 3);
    o.pin_memory = true;
    auto ds = std::make_shared<SharedIndex>(1000, kWidth);
    Loader gpu(ds, o);
    const std::vector<Delivered> got = run_epoch(gpu, 1, true);
    EXPECT_TRUE(each_index_once(got, 1000, 32));
    EXPECT_TRUE(same_epoch(cpu_epoch(1000, 32, true, 41, 1), got));
    EXPECT_EQ(ds->shared(), 1000);
#if FERRY_HAS_CUDA
    EXPECT_EQ(ds->pinned(), 1000) << "the shared slots are registered (cudaHostRegister)";
#endif
  });
}

}  // namespace

// ---- ragged fields: packed over the bus, padded on the GPU ------------------------------------

namespace {

// Sample i: "seq" u8 rows of 3 bytes, L_i = (i * 5) % 17, byte k of row j = i + j + k.
class RaggedRows : public ferry::Dataset {
 public:
  std::size_t size() const override { return 90; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"seq", DType::u8, {ferry::ragged, 3}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return static_cast<std::int64_t>((index * 5) % 17);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* p = out.as<std::uint8_t>(0);
    for (std::int64_t j = 0; j < length(index, 0); ++j) {
      for (std::int64_t k = 0; k < 3; ++k) {
        p[j * 3 + k] = static_cast<std::uint8_t>(static_cast<std::int64_t>(index) + j + k);
      }
    }
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
};

}  // namespace

TEST_F(GpuLoader, RaggedFieldsArriveAsTheCpuLoaderGivesThemPaddedAndPacked) {
  within(kLimit, [&] {
    auto ds = std::make_shared<RaggedRows>();
    for (const ferry::RaggedBatch mode : {ferry::RaggedBatch::pad, ferry::RaggedBatch::pack}) {
      LoaderOptions o = gpu_options(8, true, 3);
      o.ragged = mode;
      o.pad_value = 200;
      o.pad_multiple = 4;
      LoaderOptions c = o;
      c.device = Device::cpu();
      Loader gpu(ds, o);
      Loader cpu(ds, c);
      ferry::Epoch ge = gpu.epoch(2);
      ferry::Epoch ce = cpu.epoch(2);
      for (const Batch* g = ge.next(); g != nullptr; g = ge.next()) {
        const Batch* h = ce.next();
        ASSERT_NE(h, nullptr);
        EXPECT_EQ((*g)["seq"].device(), Device::cuda(0));
        EXPECT_EQ((*g)["id"].device(), Device::cuda(0));
        const Tensor gs = (*g)["seq"].cpu();
        const Tensor hs = (*h)["seq"];
        ASSERT_EQ(gs.shape(), hs.shape());
        EXPECT_EQ(std::memcmp(gs.data(), hs.data(), gs.nbytes()), 0) << "batch " << g->number();
        const Tensor gl = g->lengths("seq").cpu();
        EXPECT_EQ(std::memcmp(gl.data(), h->lengths("seq").data(), gl.nbytes()), 0);
        if (mode == ferry::RaggedBatch::pack) {
          const Tensor go = g->offsets("seq").cpu();
          EXPECT_EQ(std::memcmp(go.data(), h->offsets("seq").data(), go.nbytes()), 0);
        }
      }
      EXPECT_EQ(ce.next(), nullptr);
    }
  });
}
