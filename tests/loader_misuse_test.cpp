// The loader under ordinary misuse and hostile sizes: the natural epoch loop, batch sizes beyond
// the data, fields too large to exist, and failures on the planner, fill and copy threads.
// Each must give a ferry::Error from the call that meets it (background failures from next(),
// in batch order), never a crash, a hang or a huge allocation, and leave the loader usable.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "pipeline/fault.hpp"

namespace {

using ferry::Batch;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::detail::FaultPoint;
using ferry::testing::collect;
using ferry::testing::cpu_options;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

TEST(LoaderMisuse, TheNaturalEpochLoopReassignsTheEpoch) {
  auto ds = std::make_shared<IndexDataset>(50);
  for (const bool copy_stage : {false, true}) {
    LoaderOptions o = cpu_options(8, true, 5);
    Loader loader = make_loader(ds, o, copy_stage);
    const Order expected1 = collect(loader, 1);
    within(30s, [&] {
      ferry::Epoch ep = loader.epoch(0);
      std::size_t batches = 0;
      while (ep.next() != nullptr) ++batches;
      EXPECT_EQ(batches, 7U);
      ep = loader.epoch(1);  // the finished epoch still exists while the next one starts
      Order got;
      for (const Batch* b = ep.next(); b != nullptr; b = ep.next()) {
        EXPECT_TRUE(holds_its_samples(*b));
        got.emplace_back(b->indices().begin(), b->indices().end());
      }
      EXPECT_EQ(got, expected1);
      // And with range-for, keeping the Epoch object across iterations.
      for (std::uint64_t e = 2; e < 5; ++e) {
        ep = loader.epoch(e);
        std::size_t n = 0;
        for (const Batch& b : ep) n += b.size();
        EXPECT_EQ(n, 50U);
      }
    });
  }
}

TEST(LoaderMisuse, ABatchSizeBeyondTheDataStagesOnlyTheData) {
  auto ds = std::make_shared<IndexDataset>(10);
  for (const std::size_t batch :
       {std::size_t{11}, std::size_t{1} << 40, std::numeric_limits<std::size_t>::max()}) {
    for (const bool copy_stage : {false, true}) {
      LoaderOptions o = cpu_options(batch, true, 3);
      Loader loader =
          make_loader(ds, o, copy_stage);  // 2^40 samples of 29 bytes would be 29 TB per slot
      EXPECT_EQ(loader.batches_per_epoch(), 1U);
      const Order order = collect(loader, 0);
      ASSERT_EQ(order.size(), 1U);
      EXPECT_EQ(order[0].size(), 10U);
    }
  }
  // Per rank: 10 samples over 4 ranks are 3 each (padded), so a slot holds 3.
  LoaderOptions o = cpu_options(1000);
  o.world_size = 4;
  o.rank = 3;
  Loader loader(ds, o);
  const Order order = collect(loader, 0);
  EXPECT_EQ(order, (Order{{3, 7, 1}}));
}

// A dataset whose field claims a size no machine has.
class HugeFieldDataset : public ferry::Dataset {
 public:
  explicit HugeFieldDataset(std::vector<int64_t> shape) : shape_(std::move(shape)) {}
  std::size_t size() const override { return 4; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"huge", ferry::DType::f32, shape_}};
  }
  void read(std::size_t /*index*/, ferry::SampleRef /*out*/) const override {
    ADD_FAILURE() << "read() of an impossible field";
  }

 private:
  std::vector<int64_t> shape_;
};

TEST(LoaderMisuse, FieldsWhoseSizeOverflowsAreRefusedByName) {
  const std::vector<std::vector<int64_t>> shapes = {
      {int64_t{1} << 32, int64_t{1} << 32},    // 2^64 elements
      {int64_t{1} << 62},                      // 2^64 bytes of f32
      {-2, 3},                                 // negative (-1 would be ragged)
      {int64_t{1} << 40, int64_t{1} << 30, 0}  // empty after all, but 2^70 on the way
  };
  for (std::size_t i = 0; i < 3; ++i) {
    auto ds = std::make_shared<HugeFieldDataset>(shapes[i]);
    try {
      Loader loader(ds, cpu_options(2));
      ADD_FAILURE() << "shape " << i << " accepted";
    } catch (const ferry::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("\"huge\""), std::string::npos) << e.what();
    }
  }
  // A field of 2^63 bytes fits size_t, but not a batch of 4 of them.
  auto big = std::make_shared<HugeFieldDataset>(std::vector<int64_t>{int64_t{1} << 61});
  EXPECT_THROW(Loader(big, cpu_options(4)), ferry::ConfigError);
  // The empty field is fine: zero bytes whatever the other dimensions.
  auto empty = std::make_shared<HugeFieldDataset>(shapes[3]);
  EXPECT_EQ(ferry::FieldSpec({"e", ferry::DType::f32, shapes[3]}).sample_bytes(), 0U);
  EXPECT_EQ(ferry::FieldSpec({"h", ferry::DType::f32, shapes[0]}).sample_bytes(),
            std::numeric_limits<std::size_t>::max());
  static_cast<void>(empty);
}

TEST(LoaderMisuse, OptionsBeyondAnyMachineAreRefused) {
  auto ds = std::make_shared<IndexDataset>(10);
  auto bad = [&](auto change) {
    LoaderOptions o = cpu_options(4);
    change(o);
    EXPECT_THROW(Loader(ds, o), ferry::ConfigError);
  };
  bad([](LoaderOptions& o) { o.workers = 1 << 20; });
  bad([](LoaderOptions& o) { o.prefetch = 1 << 30; });
  bad([](LoaderOptions& o) { o.device_buffers = 1 << 30; });
  bad([](LoaderOptions& o) { o.world_size = -1; });
  bad([](LoaderOptions& o) { o.rank = -1; });
}

TEST(LoaderMisuse, EveryErrorOfABatchIsAFerryError) {
  auto ds = std::make_shared<IndexDataset>(10);
  Loader loader(ds, cpu_options(4));
  ferry::Epoch epoch = loader.epoch(0);
  const Batch* b = epoch.next();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->at(1).shape(), (std::vector<int64_t>{4}));
  EXPECT_THROW((void)b->at(3), ferry::ConfigError);
  EXPECT_THROW((void)b->at(std::numeric_limits<std::size_t>::max()), ferry::ConfigError);
  EXPECT_THROW((void)Batch().at(0), ferry::ConfigError);
  EXPECT_THROW((void)Batch()["x"], ferry::ConfigError);
}

// Copies made from a batch's tensors are the user's own: they must not hold the batch's buffer,
// or keeping them (a list of predictions, a validation set) stalls the ring.
TEST(LoaderMisuse, TensorsDerivedFromABatchDoNotHoldItsBuffer) {
  auto ds = std::make_shared<IndexDataset>(200);
  for (const bool copy_stage : {false, true}) {
    SCOPED_TRACE(copy_stage ? "copy stage" : "cpu path");
    LoaderOptions o = cpu_options(10, true, 2);
    o.prefetch = 2;
    Loader loader = make_loader(ds, o, copy_stage);
    std::vector<ferry::Tensor> kept;
    std::vector<std::uint64_t> indices;
    within(30s, [&] {
      for (const Batch& b : loader.epoch(0)) {  // 20 batches through 2 slots
        kept.push_back(b["x"].clone());
        kept.push_back(b["z"].to(ferry::DType::f16));
        kept.push_back(b["y"].to(ferry::Device::cpu(), ferry::DType::f64, true));
        indices.insert(indices.end(), b.indices().begin(), b.indices().end());
      }
    });
    ASSERT_EQ(kept.size(), 60U);
    for (std::size_t k = 0; k < 20; ++k) {
      for (std::int64_t i = 0; i < 10; ++i) {
        const std::uint64_t index = indices[k * 10 + static_cast<std::size_t>(i)];
        EXPECT_EQ(kept[3 * k].data<std::uint8_t>()[i * 13 + 5],
                  IndexDataset::expected_byte(index, 5));
        EXPECT_EQ(kept[3 * k + 2].data<double>()[i], static_cast<double>(index));
      }
      EXPECT_EQ(kept[3 * k + 1].dtype(), ferry::DType::f16);
    }
  }
}

// ---- failures on the pipeline's own threads, injected through the fault hook

std::atomic<int> fail_point{-1};
std::atomic<std::uint64_t> fail_batch{0};
std::atomic<int> fail_kind{0};  // 0: bad_alloc, 1: system_error, 2: DataError

void throwing_hook(FaultPoint point, std::uint64_t batch) {
  if (static_cast<int>(point) != fail_point.load() || batch != fail_batch.load()) return;
  switch (fail_kind.load()) {
    case 0:
      throw std::bad_alloc();
    case 1:
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                              "thread");
    default:
      throw ferry::DataError("injected at batch " + std::to_string(batch));
  }
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override { ferry::detail::set_fault_hook(&throwing_hook); }
  void TearDown() override {
    fail_point.store(-1);
    ferry::detail::set_fault_hook(nullptr);
  }
  static void arm(FaultPoint point, std::uint64_t batch, int kind) {
    fail_batch.store(batch);
    fail_kind.store(kind);
    fail_point.store(static_cast<int>(point));
  }
  static void disarm() { fail_point.store(-1); }
};

// The batches before the failure arrive intact, then next() rethrows the failure as it was;
// afterwards the loader runs whole epochs again on the same ring.
TEST_F(FaultTest, ABackgroundFailureReachesNextInOrderAndTheLoaderRecovers) {
  auto ds = std::make_shared<IndexDataset>(100);
  struct Case {
    FaultPoint point;
    bool copy_stage;
  };
  for (const Case c : {Case{FaultPoint::planner, false}, Case{FaultPoint::planner, true},
                       Case{FaultPoint::fill, false}, Case{FaultPoint::fill, true},
                       Case{FaultPoint::copy, true}}) {
    for (const int kind : {0, 2}) {
      SCOPED_TRACE("point " + std::to_string(static_cast<int>(c.point)) + " copy stage " +
                   std::to_string(c.copy_stage) + " kind " + std::to_string(kind));
      LoaderOptions o = cpu_options(10, true, 8);
      o.prefetch = 3;
      o.autotune = false;  // three slots, allocated once
      Loader loader = make_loader(ds, o, c.copy_stage);
      const Order expected = collect(loader, 4);
      within(30s, [&] {
        arm(c.point, 6, kind);
        Order got;
        bool threw = false;
        try {
          for (const Batch& b : loader.epoch(4)) {
            EXPECT_TRUE(holds_its_samples(b));
            got.emplace_back(b.indices().begin(), b.indices().end());
          }
        } catch (const std::bad_alloc&) {
          threw = kind == 0;
        } catch (const ferry::DataError& e) {
          threw = kind == 2 && std::string(e.what()) == "injected at batch 6";
        }
        disarm();
        EXPECT_TRUE(threw);
        EXPECT_EQ(got, Order(expected.begin(), expected.begin() + 6));
        EXPECT_EQ(collect(loader, 4), expected);
        EXPECT_EQ(loader.stats().staging_allocations, 3U);
      });
    }
  }
}

/// IndexDataset whose samples [slow_begin, slow_end) take a while to read; it records how many
/// times each index is read.
class SlowReadsDataset : public IndexDataset {
 public:
  SlowReadsDataset(std::size_t n, std::size_t slow_begin, std::size_t slow_end)
      : IndexDataset(n), reads_(n), slow_begin_(slow_begin), slow_end_(slow_end) {}
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (index >= slow_begin_ && index < slow_end_) std::this_thread::sleep_for(20ms);
    IndexDataset::read(index, out);
    reads_[index].fetch_add(1);
  }
  int reads(std::size_t index) const { return reads_[index].load(); }

 private:
  mutable std::vector<std::atomic<int>> reads_;
  std::size_t slow_begin_;
  std::size_t slow_end_;
};

// The copy thread fails at a batch whose samples are still being read: the slot must not go
// back to the planner (which goes on planning) under those reads, or the next batch planned
// into it would change the indices the workers read. Each sample of the failed batch is read
// once, and nothing else twice.
TEST_F(FaultTest, ACopyFailureLeavesTheSlotToItsFillUntilTheFillEnds) {
  auto ds = std::make_shared<SlowReadsDataset>(100, 60, 70);
  LoaderOptions o = cpu_options(10);
  o.prefetch = 3;
  Loader loader = make_loader(ds, o, true);
  within(60s, [&] {
    arm(FaultPoint::copy, 6, 2);
    std::size_t batches = 0;
    try {
      for (const Batch& b : loader.epoch(0)) {
        EXPECT_TRUE(holds_its_samples(b));
        ++batches;
        if (b.number() != 5) continue;
        // Batch 6's reads (200 ms on two workers) end before the epoch stops them.
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        const auto read_all = [&] {
          for (std::size_t i = 60; i < 70; ++i) {
            if (ds->reads(i) == 0) return false;
          }
          return true;
        };
        while (!read_all() && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(5ms);
        }
      }
      ADD_FAILURE() << "the epoch did not fail";
    } catch (const ferry::DataError& e) {
      EXPECT_STREQ(e.what(), "injected at batch 6");
    }
    disarm();
    EXPECT_EQ(batches, 6U);
    for (std::size_t i = 0; i < 100; ++i) {
      EXPECT_LE(ds->reads(i), 1) << "sample " << i;
      if (i >= 60 && i < 70) {
        EXPECT_EQ(ds->reads(i), 1) << "sample " << i;
      }
    }
    EXPECT_EQ(collect(loader, 1).size(), 10U);
  });
}

TEST_F(FaultTest, AThreadThatCannotStartIsAFerryErrorAndLeavesTheLoaderUsable) {
  auto ds = std::make_shared<IndexDataset>(30);
  LoaderOptions o = cpu_options(10);
  Loader loader =
      make_loader(ds, o, true);  // two threads: the planner starts, the copy thread fails
  within(30s, [&] {
    arm(FaultPoint::thread_start, 0, 1);
    try {
      (void)loader.epoch(0);
      ADD_FAILURE() << "epoch() started";
    } catch (const ferry::Error& e) {
      EXPECT_NE(std::string(e.what()).find("cannot start epoch 0"), std::string::npos) << e.what();
    }
    disarm();
    EXPECT_EQ(collect(loader, 0), (Order{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                                         {10, 11, 12, 13, 14, 15, 16, 17, 18, 19},
                                         {20, 21, 22, 23, 24, 25, 26, 27, 28, 29}}));
  });
}

}  // namespace

/// Sample reads block while `gate` is closed (from batch 1 on), so that the consumer waits in
/// next().
class GatedDataset : public IndexDataset {
 public:
  explicit GatedDataset(std::size_t n) : IndexDataset(n) {}
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (index >= 4) {
      // Gated until open. Until the first batch is taken, a read gives up waiting after 100 ms:
      // oneTBB runs enqueued fills in about FIFO order, not strictly, so both workers may be in
      // later batches' reads while the first batch's task still waits for one of them.
      const auto start = std::chrono::steady_clock::now();
      while (!open.load()) {
        if (!first_taken.load() && std::chrono::steady_clock::now() - start > 100ms) break;
        std::this_thread::sleep_for(1ms);
      }
    }
    IndexDataset::read(index, out);
  }
  mutable std::atomic<bool> open{false};
  mutable std::atomic<bool> first_taken{false};
};

TEST(LoaderMisuse, CancelFromAnotherThreadWakesAWaitingNextAndTheLoaderGoesOn) {
  // Cancelled while next() waits (50 ms), and before the gated reads have begun (0 ms: the fill
  // tasks then skip their samples, and the slot they leave must not be delivered).
  for (const auto delay : {50ms, 0ms})
    for (const bool copy_stage : {false, true}) {
      SCOPED_TRACE(copy_stage ? "copy stage" : "no copy stage");
      auto data = std::make_shared<GatedDataset>(40);
      LoaderOptions o = cpu_options(4);
      o.workers = 2;
      Loader loader = make_loader(data, o, copy_stage);
      within(20s, [&] {
        ferry::Epoch epoch = loader.epoch(0);
        const Batch* first = epoch.next();  // samples 0..3: not gated
        ASSERT_NE(first, nullptr);
        const Batch kept = *first;
        data->first_taken = true;  // reads of samples from 4 on wait for the gate from now on
        std::thread canceller([&] {
          std::this_thread::sleep_for(delay);
          epoch.cancel();
        });
        const auto start = std::chrono::steady_clock::now();
        try {
          // Batches whose reads ended before the gate closed for good come whole and in order;
          // then next() waits for gated samples until cancelled.
          std::uint64_t from = 4;
          for (;;) {
            const Batch* b = epoch.next();
            if (b == nullptr) {
              ADD_FAILURE() << "next() returned nullptr instead of throwing";
              break;
            }
            EXPECT_TRUE(holds_its_samples(*b));
            ASSERT_EQ(b->indices()[0], from) << "batch " << b->number();
            from += b->size();
            ASSERT_LT(from, 40U) << "the epoch ended: the gate never held";
          }
        } catch (const ferry::Error& e) {
          EXPECT_STREQ(e.what(), "Loader: the epoch was cancelled");
        }
        canceller.join();
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
        EXPECT_THROW(static_cast<void>(epoch.next()), ferry::Error);  // stays cancelled
        EXPECT_TRUE(holds_its_samples(kept));                         // delivered stays valid
        EXPECT_EQ(kept.indices()[0], 0U);
        data->open.store(true);
      });
      // The loader is whole again: the next epoch delivers every sample, in order.
      const Order order = collect(loader, 1);
      std::uint64_t expected = 0;
      for (const auto& b : order) {
        for (const std::uint64_t i : b) EXPECT_EQ(i, expected++);
      }
      EXPECT_EQ(expected, 40U);
    }
}

/// Reads of samples from 4 on take 30 ms each: the consumer waits for every batch after the first.
class SlowDataset : public IndexDataset {
 public:
  explicit SlowDataset(std::size_t n) : IndexDataset(n) {}
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (index >= 4) std::this_thread::sleep_for(30ms);
    IndexDataset::read(index, out);
  }
};

TEST(LoaderMisuse, TryNextWaitsInSlicesAndLosesNothing) {
  // A caller that waits in short slices (a binding running signal handlers between them) gets
  // every batch once, whole and in order, whichever stage delivers it, and sees the slices end.
  for (const bool copy_stage : {false, true}) {
    SCOPED_TRACE(copy_stage ? "copy stage" : "no copy stage");
    auto data = std::make_shared<SlowDataset>(40);
    LoaderOptions o = cpu_options(4);
    o.workers = 2;
    Loader loader = make_loader(data, o, copy_stage);
    within(30s, [&] {
      ferry::Epoch epoch = loader.epoch(0);
      std::uint64_t expected = 0;
      std::size_t timeouts = 0;
      for (;;) {
        const Batch* b = nullptr;
        if (!epoch.try_next(2ms, b)) {
          ++timeouts;
          continue;
        }
        if (b == nullptr) break;
        EXPECT_TRUE(holds_its_samples(*b));
        for (const std::uint64_t i : b->indices()) EXPECT_EQ(i, expected++);
      }
      EXPECT_EQ(expected, 40U);
      EXPECT_GT(timeouts, 0U);  // reads of 30 ms: some 2 ms slices end before their batch
      const Batch* after = nullptr;
      EXPECT_TRUE(epoch.try_next(0ms, after));
      EXPECT_EQ(after, nullptr);
    });
    // A slice that ends, then a cancel: the epoch throws, gives its buffers back, and the
    // loader goes on.
    within(30s, [&] {
      ferry::Epoch epoch = loader.epoch(1);
      const Batch* b = nullptr;
      while (!epoch.try_next(1ms, b)) {
      }
      ASSERT_NE(b, nullptr);
      EXPECT_FALSE(epoch.try_next(1ms, b));  // batch 1's reads take 120 ms
      epoch.cancel();
      EXPECT_THROW(static_cast<void>(epoch.try_next(1s, b)), ferry::Error);
    });
    const Order order = collect(loader, 2);
    std::uint64_t expected = 0;
    for (const auto& batch : order) {
      for (const std::uint64_t i : batch) EXPECT_EQ(i, expected++);
    }
    EXPECT_EQ(expected, 40U);
  }
}
