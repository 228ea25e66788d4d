// What only a model of the GPU can show without one (built in the cudasim preset only): first,
// that cudasim itself holds work back until its stream gets there, keeps device memory away from
// the host and makes faults sticky, so that the GPU tests run on it can fail; then ferry under
// CUDA failures injected where they happen on a GPU: a copy that fails mid-epoch, a good call
// after a failed one, a batch whose release event cannot be recorded, a device that faults
// under a running loader; and that a loader on cuda:1 never makes a context on cuda:0.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
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
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_bytes;
using ferry::testing::IndexDataset;
using ferry::testing::within;

constexpr auto kLimit = std::chrono::seconds(60);
constexpr std::int64_t kWidth = 1021;

// A host function that holds a stream until open() is called.
class Gate {
 public:
  void hold(cudaStream_t stream) {
    ASSERT_EQ(cudaLaunchHostFunc(stream, &Gate::wait, this), cudaSuccess);
  }
  void open() {
    const std::lock_guard lock(mutex_);
    open_ = true;
    opened_.notify_all();
  }

 private:
  static void wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    std::unique_lock lock(g->mutex_);
    g->opened_.wait(lock, [g] { return g->open_; });
  }
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

struct OwnStream {
  cudaStream_t s = nullptr;
  OwnStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  ~OwnStream() { (void)cudaStreamDestroy(s); }
};

LoaderOptions gpu_options(std::size_t batch, int prefetch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = false;
  o.workers = 2;
  o.prefetch = prefetch;
  o.device = Device::cuda(0);
  return o;
}

// ---- the model ------------------------------------------------------------------------------

TEST(Cudasim, WorkWaitsForItsStreamAndItsBytesAppearOnlyWhenItRuns) {
  const OwnStream stream;
  void* device = nullptr;
  void* pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&device, 4096), cudaSuccess);
  ASSERT_EQ(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault), cudaSuccess);
  const std::vector<std::uint8_t> bytes = pattern(4096, 1);
  std::vector<std::uint8_t> source = bytes;  // pageable: this copy blocks the host
  ASSERT_EQ(cudaMemcpy(device, source.data(), 4096, cudaMemcpyHostToDevice), cudaSuccess);
  std::memset(pinned, 0, 4096);

  Gate gate;
  gate.hold(stream.s);
  ASSERT_EQ(cudaMemcpyAsync(pinned, device, 4096, cudaMemcpyDeviceToHost, stream.s), cudaSuccess);
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, stream.s), cudaSuccess);
  const OwnStream other;
  ASSERT_EQ(cudaStreamWaitEvent(other.s, done, 0), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(other.s), cudaErrorNotReady) << "a wait on an unfinished event";
  EXPECT_EQ(static_cast<const std::uint8_t*>(pinned)[0], 0) << "the copy ran before its turn";
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(other.s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  EXPECT_TRUE(same_bytes(bytes.data(), pinned, 4096));
  EXPECT_EQ(cudaMemcpyAsync(device, pinned, 4096, cudaMemcpyDeviceToHost, stream.s),
            cudaErrorInvalidValue)
      << "a copy whose kind does not match its memory";
  (void)cudaGetLastError();
  (void)cudaEventDestroy(done);
  (void)cudaFreeHost(pinned);
  (void)cudaFree(device);
}

TEST(CudasimDeathTest, TheHostCannotTouchDeviceMemory) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* device = nullptr;
        if (cudaMalloc(&device, 64) != cudaSuccess) std::exit(0);  // would not die: fails
        *static_cast<volatile std::uint8_t*>(device) = 1;
      },
      "");
}

TEST(CudasimDeathTest, WorkOnFreedMemoryMakesTheDevicesErrorSticky) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        void* device = nullptr;
        void* pinned = nullptr;
        cudaStream_t s = nullptr;
        (void)cudaMalloc(&device, 64);
        (void)cudaHostAlloc(&pinned, 64, cudaHostAllocDefault);
        (void)cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        Gate gate;
        gate.hold(s);
        (void)cudaMemcpyAsync(device, pinned, 64, cudaMemcpyHostToDevice, s);
        (void)cudaFreeHost(pinned);  // while the copy from it is still queued
        gate.open();
        const bool sticky = cudaStreamSynchronize(s) == cudaErrorIllegalAddress &&
                            cudaMalloc(&device, 64) == cudaErrorIllegalAddress &&
                            cudaGetLastError() == cudaErrorIllegalAddress &&
                            cudaGetLastError() == cudaErrorIllegalAddress;
        std::exit(sticky ? 7 : 1);
      },
      ::testing::ExitedWithCode(7), "");
}

// ---- ferry under CUDA's failures ----------------------------------------------------------

TEST(CudasimFaults, AFailedCopyIsReportedOnceAndTheNextCallsSucceed) {
  const std::vector<std::uint8_t> bytes = pattern(2 * 4 * 4 * 3, 3);
  const Tensor images = Tensor::from(bytes, {2, 4, 4, 3}).pin_memory();
  ferry_cudasim::fail_next("cudaMemcpyAsync", cudaErrorLaunchFailure, 1, true);
  try {
    (void)images.to(Device::cuda(0), true);
    ADD_FAILURE() << "the injected failure went unreported";
  } catch (const ferry::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaErrorLaunchFailure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the error outlived its call";
  // A kernel launch checks for errors right after: a stale one would be reported as its own.
  Tensor normalized;
  ASSERT_NO_THROW(normalized =
                      ferry::normalize_images(images.to(Device::cuda(0)), ferry::Normalize{}));
  const Tensor expected = ferry::normalize_images(images, ferry::Normalize{});
  EXPECT_TRUE(ferry::cuda_testing::same_tensor(expected, normalized.cpu()));
}

TEST(CudasimFaults, ACopyFailingMidEpochReachesNextAfterTheBatchesBeforeItAndTheNextEpochRuns) {
  within(kLimit, [] {
    auto dataset = std::make_shared<IndexDataset>(96, kWidth);
    Loader loader(dataset, gpu_options(8, 2));
    std::size_t delivered = 0;
    std::string error;
    try {
      ferry::Epoch epoch = loader.epoch(0);
      for (const Batch* b = epoch.next(); b != nullptr; b = epoch.next()) {
        EXPECT_EQ(b->number(), delivered);
        EXPECT_TRUE(ferry::testing::holds_its_samples(*b, kWidth)) << "batch " << b->number();
        if (++delivered == 3) {
          ferry_cudasim::fail_next("cudaMemcpyAsync", cudaErrorLaunchFailure);
        }
      }
    } catch (const ferry::DeviceError& e) {
      error = e.what();
    }
    EXPECT_GE(delivered, 3U);
    EXPECT_LT(delivered, 12U) << "the failed copy's batch was delivered";
    EXPECT_NE(error.find("cudaErrorLaunchFailure"), std::string::npos) << error;
    std::size_t samples = 0;
    for (const Batch& b : loader.epoch(1)) {
      EXPECT_TRUE(ferry::testing::holds_its_samples(b, kWidth));
      samples += b.size();
    }
    EXPECT_EQ(samples, 96U);
  });
}

// The consumer's stream reads batch 0 after 150 ms of other work, and recording batch 0's release
// event fails: the host must then wait for the consumer's stream before the buffer can be
// refilled, or the read would see a later batch's bytes.
TEST(CudasimFaults, ABatchWhoseReleaseCannotBeRecordedWaitsForTheConsumersStream) {
  within(kLimit, [] {
    const OwnStream consumer;
    auto dataset = std::make_shared<IndexDataset>(64, kWidth);
    LoaderOptions o = gpu_options(4, 1);
    o.stream = consumer.s;
    Loader loader(dataset, o);
    ferry::Epoch epoch = loader.epoch(0);
    const Batch* first = epoch.next();
    ASSERT_NE(first, nullptr);
    const std::size_t n = first->size() * kWidth;
    void* seen = nullptr;
    ASSERT_EQ(cudaHostAlloc(&seen, n, cudaHostAllocDefault), cudaSuccess);
    ASSERT_EQ(
        cudaLaunchHostFunc(
            consumer.s, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(150)); },
            nullptr),
        cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(seen, (*first)["x"].data(), n, cudaMemcpyDeviceToHost, consumer.s),
              cudaSuccess);
    const std::vector<std::uint64_t> indices(first->indices().begin(), first->indices().end());
    ferry_cudasim::fail_next("cudaEventRecord", cudaErrorLaunchFailure, 1, true);
    std::size_t rest = 0;
    for (const Batch* b = epoch.next(); b != nullptr; b = epoch.next()) ++rest;
    ferry_cudasim::clear_failures();
    EXPECT_EQ(rest, 15U);
    ASSERT_EQ(cudaStreamSynchronize(consumer.s), cudaSuccess);
    const auto* bytes = static_cast<const std::uint8_t*>(seen);
    for (std::size_t i = 0; i < indices.size(); ++i) {
      for (std::int64_t j = 0; j < kWidth; j += 97) {
        ASSERT_EQ(bytes[i * kWidth + static_cast<std::size_t>(j)],
                  IndexDataset::expected_byte(indices[i], j))
            << "sample " << i << ", byte " << j << ": batch 0's buffer was refilled under a read";
      }
    }
    (void)cudaFreeHost(seen);
  });
}

TEST(CudasimFaultsDeathTest, ADeviceThatFaultsUnderALoaderEndsTheEpochWithItsErrorNotAHang) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the fault is sticky: a process of its own
  EXPECT_EXIT(
      {
        std::string error;
        {
          Loader loader(std::make_shared<IndexDataset>(256, kWidth), gpu_options(8, 2));
          try {
            std::size_t delivered = 0;
            for (const Batch& b : loader.epoch(0)) {
              (void)b;
              if (++delivered == 2) ferry_cudasim::fault(0);
            }
          } catch (const ferry::DeviceError& e) {
            error = e.what();
          }
        }  // the loader goes without hanging
        std::exit(error.find("cudaErrorIllegalAddress") != std::string::npos ? 7 : 1);
      },
      ::testing::ExitedWithCode(7), "");
}

TEST(CudasimFaultsDeathTest, ALoaderOnCuda1NeverMakesAContextOnCuda0) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: no context yet
  EXPECT_EXIT(
      {
        LoaderOptions o = gpu_options(8, 2);
        o.device = Device::cuda(1);
        Loader loader(std::make_shared<IndexDataset>(40, kWidth), o);
        std::size_t samples = 0;
        bool right = true;
        for (const Batch& b : loader.epoch(0)) {
          right = right && ferry::testing::holds_its_samples(b, kWidth);
          samples += b.size();
        }
        const Tensor pinned = ferry::cuda_testing::byte_tensor(pattern(4096, 2)).pin_memory();
        const Tensor back = pinned.to(Device::cuda(1), true).to(DType::f32).cpu();
        right = right && samples == 40 && back.data<float>()[1] == pattern(4096, 2)[1];
        std::exit(!right ? 1 : ferry_cudasim::has_context(0) ? 2 : 7);
      },
      ::testing::ExitedWithCode(7), "");
}

}  // namespace
