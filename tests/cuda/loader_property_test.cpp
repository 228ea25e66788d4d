// The GPU loader against the CPU loader over random configurations: ragged rows (pad or pack,
// pad_multiple, empty samples), a u8 image field normalized on the device (f32, f16 or bf16), token
// budgets, bucketing, ranks of a world, drop_last, skipped bad samples, workers, prefetch, device
// buffers, pinned or pageable staging, the default stream or a consumer's own, and a resume from
// a state taken mid-epoch. For each: every batch of the GPU loader has the CPU loader's number,
// indices, and every field's shape, dtype and bytes, lengths and offsets included. Skips without
// a GPU; runs on cudasim in CI.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
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
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::Tensor;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::same_tensor;
using ferry::testing::within;

// Sample i: "seq" i32 [L_i] (token j = i * 31 + j), "img" u8 [4, 3, 3] normalized to `dtype`,
// "id" i64 = i. Samples in `bad` fail to read.
class Mixed : public ferry::Dataset {
 public:
  Mixed(std::size_t n, std::uint64_t seed, std::int64_t longest, DType dtype,
        std::set<std::size_t> bad)
      : lengths_(n), dtype_(dtype), bad_(std::move(bad)) {
    std::mt19937_64 rng(seed);
    for (auto& l : lengths_) {
      l = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(longest + 1));
    }
  }
  std::size_t size() const override { return lengths_.size(); }
  std::vector<FieldSpec> fields() const override {
    FieldSpec img{"img", DType::u8, {4, 3, 3}};
    ferry::Normalize norm;
    norm.mean = {0.45f, 0.5f, 0.55f};
    norm.std = {0.2f, 0.3f, 0.25f};
    norm.dtype = dtype_;
    img.normalize = norm;
    return {{"seq", DType::i32, {ferry::ragged}}, img, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return lengths_[index];
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (bad_.count(index) != 0) {
      throw ferry::DataError("Mixed: sample " + std::to_string(index) + " is corrupt");
    }
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < lengths_[index]; ++j) {
      t[j] = static_cast<std::int32_t>(index * 31 + static_cast<std::size_t>(j));
    }
    auto* px = out.as<std::uint8_t>(1);
    for (std::size_t k = 0; k < 36; ++k)
      px[k] = static_cast<std::uint8_t>((index * 13 + k * 7) % 256);
    *out.as<std::int64_t>(2) = static_cast<std::int64_t>(index);
  }

 private:
  std::vector<std::int64_t> lengths_;
  DType dtype_;
  std::set<std::size_t> bad_;
};

// The GPU batch equals the CPU batch: number, indices, every field, lengths and offsets.
::testing::AssertionResult same_batch(const Batch& cpu, const Batch& gpu, RaggedBatch mode) {
  if (cpu.number() != gpu.number()) {
    return ::testing::AssertionFailure() << "batch " << gpu.number() << " for " << cpu.number();
  }
  const std::vector<std::uint64_t> ci(cpu.indices().begin(), cpu.indices().end());
  const std::vector<std::uint64_t> gi(gpu.indices().begin(), gpu.indices().end());
  if (ci != gi) return ::testing::AssertionFailure() << "batch " << cpu.number() << ": indices";
  for (const char* field : {"seq", "img", "id"}) {
    if (gpu[field].device() != Device::cuda(0)) {
      return ::testing::AssertionFailure() << field << " is on " << gpu[field].device();
    }
    auto same = same_tensor(cpu[field], gpu[field].cpu());
    if (!same) return same << " (batch " << cpu.number() << ", field " << field << ")";
  }
  auto same = same_tensor(cpu.lengths("seq"), gpu.lengths("seq").cpu());
  if (!same) return same << " (batch " << cpu.number() << ", lengths)";
  if (mode == RaggedBatch::pack) {
    same = same_tensor(cpu.offsets("seq"), gpu.offsets("seq").cpu());
    if (!same) return same << " (batch " << cpu.number() << ", offsets)";
  }
  return ::testing::AssertionSuccess();
}

class GpuLoaderProperty : public CudaTest {};

TEST_F(GpuLoaderProperty, EveryBatchIsTheCpuLoadersOverRandomConfigurations) {
  within(std::chrono::seconds(240), [] {
#if FERRY_HAS_CUDA
    cudaStream_t own = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
#endif
    std::mt19937_64 rng(20261130);
    const auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
      return lo + rng() % (hi - lo + 1);
    };
    constexpr int kConfigurations = 48;
    std::size_t compared = 0;  // batches, over every configuration
    for (int config = 0; config < kConfigurations; ++config) {
      const std::size_t n = pick(1, 90);
      const DType dtype = std::vector<DType>{DType::f32, DType::f16, DType::bf16}[pick(0, 2)];
      LoaderOptions o;
      o.batch_size = pick(1, 16);
      o.shuffle = pick(0, 3) != 0;
      o.seed = rng();
      o.drop_last = pick(0, 3) == 0;
      o.world_size = static_cast<int>(pick(1, std::min<std::uint64_t>(n, 3)));
      o.rank = static_cast<int>(pick(0, static_cast<std::uint64_t>(o.world_size) - 1));
      o.ragged = pick(0, 1) == 0 ? RaggedBatch::pad : RaggedBatch::pack;
      o.pad_multiple = static_cast<std::int64_t>(pick(1, 8));
      o.pad_value = -7;
      o.max_tokens = pick(0, 2) == 0 ? pick(1, 300) : 0;
      o.bucket_window = pick(0, 2) == 0 ? pick(1, 40) : 0;
      std::set<std::size_t> bad;
      if (pick(0, 2) == 0) {
        o.on_error = ferry::ErrorPolicy::skip;
        for (std::size_t k = pick(1, 4); k > 0; --k) bad.insert(pick(0, n - 1));
      }
      const std::uint64_t epoch = pick(0, 3);
      const auto dataset =
          std::make_shared<Mixed>(n, rng(), static_cast<std::int64_t>(pick(0, 24)), dtype, bad);
      std::ostringstream where;
      where << "configuration " << config << ": n " << n << ", batch " << o.batch_size
            << (o.shuffle ? ", shuffled" : "") << (o.drop_last ? ", drop_last" : "") << ", rank "
            << o.rank << " of " << o.world_size
            << (o.ragged == RaggedBatch::pad ? ", pad " : ", pack ") << o.pad_multiple
            << ", max_tokens " << o.max_tokens << ", bucket_window " << o.bucket_window << ", "
            << bad.size() << " bad, " << ferry::dtype_name(dtype) << ", epoch " << epoch;
      SCOPED_TRACE(where.str());

      LoaderOptions c = o;
      c.device = Device::cpu();
      c.workers = 1;
      LoaderOptions g = o;
      g.device = Device::cuda(0);
      g.workers = static_cast<int>(pick(1, 3));
      g.prefetch = static_cast<int>(pick(1, 4));
      g.device_buffers = static_cast<int>(pick(2, 3));
      g.pin_memory = pick(0, 3) != 0;
#if FERRY_HAS_CUDA
      if (pick(0, 1) == 0) g.stream = own;
#endif
      Loader cpu(dataset, c);
      Loader gpu(dataset, g);
      std::vector<std::vector<std::uint64_t>> cpu_order;
      std::size_t resume_at = 0;
      {
        ferry::Epoch ce = cpu.epoch(epoch);
        ferry::Epoch ge = gpu.epoch(epoch);
        resume_at = static_cast<std::size_t>(pick(0, ce.size()));
        for (const Batch* h = ce.next(); h != nullptr; h = ce.next()) {
          const Batch* d = ge.next();
          ASSERT_NE(d, nullptr) << "the GPU loader delivered fewer batches";
          ASSERT_TRUE(same_batch(*h, *d, o.ragged));
          cpu_order.emplace_back(h->indices().begin(), h->indices().end());
          ++compared;
        }
        EXPECT_EQ(ge.next(), nullptr) << "the GPU loader delivered more batches";
      }
      EXPECT_EQ(gpu.stats().skipped, cpu.stats().skipped);

      // A state taken after `resume_at` batches, resumed by a fresh GPU loader.
      Loader first(dataset, g);
      ferry::Epoch fe = first.epoch(epoch);
      for (std::size_t k = 0; k < resume_at; ++k) ASSERT_NE(fe.next(), nullptr);
      const ferry::LoaderState state = first.state();
      Loader again(dataset, g);
      ferry::Epoch re = again.resume(state);
      ferry::Epoch ce = cpu.epoch(epoch, resume_at);
      std::size_t rest = 0;
      for (const Batch* h = ce.next(); h != nullptr; h = ce.next(), ++rest) {
        const Batch* d = re.next();
        ASSERT_NE(d, nullptr) << "the resumed GPU loader delivered fewer batches";
        ASSERT_TRUE(same_batch(*h, *d, o.ragged)) << "resumed at " << resume_at;
        ++compared;
      }
      EXPECT_EQ(re.next(), nullptr) << "the resumed GPU loader delivered more batches";
      EXPECT_EQ(rest, cpu_order.size() - resume_at);
    }
    EXPECT_GT(compared, 400U) << "too few batches to say much";
    std::printf("compared %zu batches\n", compared);
#if FERRY_HAS_CUDA
    (void)cudaStreamSynchronize(own);
    (void)cudaStreamDestroy(own);
#endif
  });
}

}  // namespace
