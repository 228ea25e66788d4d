// Autotune on the GPU path (Device::cuda(0), a copy stage and device buffers) within a
// memory_budget: after every batch the loader's memory (staging slots + device buffers + the
// workers' scratch) is within the budget, the device buffers counted in it, while autotune first
// deepens (slow reads, a consumer that never waits) and then gives slots back (fast reads, a
// consumer that spins); every sample arrives once per epoch with its own bytes, in the order a
// fixed setting gives. Every wait is bounded (ferry::testing::within).

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::Device;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::cuda_testing::CudaTest;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::within;

constexpr std::int64_t kWidth = 4093;

// IndexDataset whose reads sleep `delay` microseconds, as I/O waits; the delay may change while
// the loader runs.
class SlowDataset : public IndexDataset {
 public:
  SlowDataset(std::size_t n, int delay_us) : IndexDataset(n, kWidth), delay_us_(delay_us) {}
  void read(std::size_t index, ferry::SampleRef out) const override {
    const int d = delay_us_.load(std::memory_order_relaxed);
    if (d > 0) std::this_thread::sleep_for(std::chrono::microseconds(d));
    IndexDataset::read(index, out);
  }
  void set_delay(int us) const { delay_us_.store(us); }

 private:
  mutable std::atomic<int> delay_us_;
};

// The number after `key` in `text` ("needs 123 bytes", "staging slot of 456").
std::uint64_t number_after(const std::string& text, const std::string& key) {
  const auto at = text.find(key);
  EXPECT_NE(at, std::string::npos) << key << " not in: " << text;
  return at == std::string::npos ? 0 : std::stoull(text.substr(at + key.size()));
}

class Autotune : public CudaTest {};

TEST_F(Autotune, TheBudgetHoldsOnTheGpuPathAndEverySampleArrivesOnce) {
  within(std::chrono::seconds(240), [] {
    auto ds = std::make_shared<SlowDataset>(600, 300);
    LoaderOptions o;
    o.batch_size = 8;
    o.shuffle = true;
    o.seed = 11;
    o.device = Device::cuda(0);
    o.autotune = true;
    o.workers = 1;
    o.prefetch = 2;
    // The smallest pipeline, as the ConfigError spells it: one slot, the device buffers, one
    // worker's scratch.
    std::string what;
    o.memory_budget = 1;
    try {
      static_cast<void>(Loader(ds, o));
    } catch (const ferry::ConfigError& e) {
      what = e.what();
    }
    const std::uint64_t least = number_after(what, "needs ");
    const std::uint64_t slot = number_after(what, "staging slot of ");
    const std::uint64_t devices = number_after(what.substr(what.find("staging slot of ")), ", ");
    const std::uint64_t device_bytes = number_after(what, "device buffers of ");
    ASSERT_GT(slot, 0U) << what;
    ASSERT_GT(devices, 0U) << what;
    // Room for three slots more than the smallest pipeline: autotune would take more (the
    // reads are slow), so the budget is what stops it.
    o.memory_budget = least + 3 * slot;
    Loader loader(ds, o);

    LoaderOptions fixed = o;
    fixed.autotune = false;
    fixed.memory_budget = 0;
    fixed.device = Device::cpu();
    Loader reference(ds, fixed);

    std::uint64_t peak = 0;
    int most_prefetch = 0;
    for (std::uint64_t e = 0; e < 4; ++e) {
      // Epochs 0 and 1: slow reads, a consumer that takes no time (input-bound); epochs 2 and
      // 3: fast reads, a consumer that spins (compute-bound): slots are given back.
      const bool compute = e >= 2;
      ds->set_delay(compute ? 0 : 300);
      std::vector<std::vector<std::uint64_t>> order;
      std::vector<std::uint64_t> seen;
      for (const Batch& b : loader.epoch(e)) {
        EXPECT_TRUE(b["x"].device().is_cuda());
        EXPECT_TRUE(holds_its_samples(b, kWidth));
        order.emplace_back(b.indices().begin(), b.indices().end());
        seen.insert(seen.end(), b.indices().begin(), b.indices().end());
        if (compute) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(3);
          while (std::chrono::steady_clock::now() < until) {
          }
        }
        const ferry::LoaderStats s = loader.stats();
        ASSERT_LE(s.memory_bytes, o.memory_budget) << "batch " << b.number() << " of epoch " << e;
        // The device buffers are part of it, and so is every slot in use.
        ASSERT_GE(s.memory_bytes, devices * device_bytes + slot);
        ASSERT_LE(static_cast<std::uint64_t>(s.prefetch) * slot + devices * device_bytes,
                  o.memory_budget);
        peak = std::max(peak, s.memory_bytes);
        most_prefetch = std::max(most_prefetch, s.prefetch);
      }
      std::sort(seen.begin(), seen.end());
      ASSERT_EQ(seen.size(), ds->size()) << "epoch " << e;
      for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i) << "epoch " << e;
      std::vector<std::vector<std::uint64_t>> expected;
      for (const Batch& b : reference.epoch(e)) {
        expected.emplace_back(b.indices().begin(), b.indices().end());
      }
      EXPECT_EQ(order, expected) << "epoch " << e;
    }
    const ferry::LoaderStats s = loader.stats();
    EXPECT_LE(peak, o.memory_budget);
    EXPECT_GT(most_prefetch, 1) << s.summary();  // it did tune, up to the budget
    EXPECT_EQ(s.device_allocations, static_cast<std::uint64_t>(devices));
  });
}

}  // namespace
