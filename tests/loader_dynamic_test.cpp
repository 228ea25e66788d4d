// Dynamic batches (LoaderOptions::max_tokens) and length bucketing (bucket_window): each batch
// within its token budget and as full as the order allows, every sample once per epoch, the
// same batches whatever the workers or copy stage, resumable at any batch, dealt evenly to the
// ranks, and bucketing cutting the padding.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::testing::cpu_options;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

// Sample i: "tokens" i32 [L_i], L_i from 1 to 120 spread unevenly, token j = i + j;
// "id" i64 [] = i.
class Documents : public ferry::Dataset {
 public:
  explicit Documents(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return len(index);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < len(index); ++j)
      t[j] = static_cast<std::int32_t>(index) + static_cast<std::int32_t>(j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
  static std::int64_t len(std::size_t i) {
    const std::uint64_t h = (i * 2654435761ULL) % 1000;
    return h < 700 ? 1 + static_cast<std::int64_t>(h % 20)
                   : 20 + static_cast<std::int64_t>(h % 101);
  }

 private:
  std::size_t n_;
};

std::uint64_t tokens_of(const std::vector<std::uint64_t>& batch, const LoaderOptions& o) {
  std::int64_t longest = 0;
  std::uint64_t sum = 0;
  for (const std::uint64_t i : batch) {
    longest = std::max(longest, Documents::len(i));
    sum += static_cast<std::uint64_t>(Documents::len(i));
  }
  if (o.ragged == RaggedBatch::pack) return sum;
  const std::int64_t m = o.pad_multiple;
  return batch.size() * static_cast<std::uint64_t>((longest + m - 1) / m * m);
}

Order run(const std::shared_ptr<Documents>& ds, const LoaderOptions& o, std::uint64_t epoch,
          bool copy_stage = false, std::size_t start = 0) {
  Loader loader = make_loader(ds, o, copy_stage);
  Order out;
  ferry::Epoch ep = loader.epoch(epoch, start);
  const std::size_t size = ep.size();
  for (const Batch& b : ep) {
    const ferry::Tensor ids = b["id"].cpu();
    const ferry::Tensor lengths = b.lengths("tokens").cpu();
    for (std::size_t s = 0; s < b.size(); ++s) {
      EXPECT_EQ(ids.data<std::int64_t>()[s], static_cast<std::int64_t>(b.indices()[s]));
      EXPECT_EQ(lengths.data<std::int64_t>()[s], Documents::len(b.indices()[s]));
    }
    out.emplace_back(b.indices().begin(), b.indices().end());
  }
  EXPECT_EQ(out.size(), size);
  if (start == 0) {
    EXPECT_EQ(loader.batches_per_epoch(), size);
  }
  return out;
}

TEST(LoaderDynamic, BatchesFillTheirBudgetInTheEpochsOrder) {
  auto ds = std::make_shared<Documents>(500);
  for (const RaggedBatch mode : {RaggedBatch::pack, RaggedBatch::pad}) {
    LoaderOptions o = cpu_options(64, true, 21);
    o.ragged = mode;
    o.pad_multiple = mode == RaggedBatch::pad ? 8 : 1;
    o.max_tokens = 600;
    // The order itself: the same loader without a budget, one sample a batch.
    LoaderOptions single = cpu_options(1, true, 21);
    std::vector<std::uint64_t> order;
    for (const auto& b : run(ds, single, 3)) order.push_back(b[0]);
    within(60s, [&] {
      const Order batches = run(ds, o, 3);
      std::vector<std::uint64_t> flat;
      for (std::size_t k = 0; k < batches.size(); ++k) {
        const auto& b = batches[k];
        ASSERT_FALSE(b.empty());
        EXPECT_LE(b.size(), 64U);
        if (b.size() > 1) {
          EXPECT_LE(tokens_of(b, o), 600U) << "batch " << k;
        }
        flat.insert(flat.end(), b.begin(), b.end());
        if (k + 1 < batches.size() && b.size() < 64) {
          // Full: the next sample in order would have broken the budget.
          std::vector<std::uint64_t> more = b;
          more.push_back(batches[k + 1][0]);
          EXPECT_GT(tokens_of(more, o), 600U) << "batch " << k << " could take one more";
        }
      }
      EXPECT_EQ(flat, order);  // every sample once, in the epoch's order
      // The same batches through the copy stage, and resumed from batch 5.
      EXPECT_EQ(run(ds, o, 3, true), batches);
      EXPECT_EQ(run(ds, o, 3, false, 5), Order(batches.begin() + 5, batches.end()));
      EXPECT_NE(run(ds, o, 4), batches);  // another epoch, another order
    });
  }
}

TEST(LoaderDynamic, ASampleOverTheBudgetIsABatchOfOne) {
  auto ds = std::make_shared<Documents>(200);
  LoaderOptions o = cpu_options(32);
  o.ragged = RaggedBatch::pack;
  o.max_tokens = 50;  // below the longest documents (up to 120 tokens)
  const Order batches = run(ds, o, 0);
  std::size_t alone = 0;
  std::size_t samples = 0;
  for (const auto& b : batches) {
    samples += b.size();
    if (tokens_of(b, o) > 50) {
      EXPECT_EQ(b.size(), 1U);
      ++alone;
    }
  }
  EXPECT_GT(alone, 10U);
  EXPECT_EQ(samples, 200U);
}

TEST(LoaderDynamic, RanksGetAsManyBatchesAndTogetherEveryOne) {
  auto ds = std::make_shared<Documents>(301);
  for (const bool drop_last : {false, true}) {
    LoaderOptions o = cpu_options(16, true, 5);
    o.ragged = RaggedBatch::pack;
    o.max_tokens = 256;
    o.drop_last = drop_last;
    const Order whole = run(ds, o, 1);
    std::map<std::vector<std::uint64_t>, int> seen;
    o.world_size = 3;
    std::size_t per_rank = 0;
    for (int r = 0; r < 3; ++r) {
      o.rank = r;
      const Order mine = run(ds, o, 1);
      if (r == 0) per_rank = mine.size();
      EXPECT_EQ(mine.size(), per_rank);
      for (std::size_t k = 0; k < mine.size(); ++k) {
        EXPECT_EQ(mine[k], whole[(static_cast<std::size_t>(r) + 3 * k) % whole.size()]);
        ++seen[mine[k]];
      }
    }
    EXPECT_EQ(per_rank, drop_last ? whole.size() / 3 : (whole.size() + 2) / 3);
    if (!drop_last) {
      EXPECT_EQ(seen.size(), whole.size());
    }
  }
}

TEST(LoaderDynamic, BucketingCutsPaddingAndKeepsEverySampleOnce) {
  auto ds = std::make_shared<Documents>(2000);
  LoaderOptions o = cpu_options(32, true, 77);
  o.ragged = RaggedBatch::pad;
  o.max_tokens = 2048;
  const auto waste = [&](const Order& batches) {
    std::uint64_t padded = 0;
    std::uint64_t real = 0;
    for (const auto& b : batches) {
      padded += tokens_of(b, o);
      for (const std::uint64_t i : b) real += static_cast<std::uint64_t>(Documents::len(i));
    }
    return static_cast<double>(padded - real) / static_cast<double>(padded);
  };
  within(60s, [&] {
    const Order plain = run(ds, o, 2);
    o.bucket_window = 256;
    const Order bucketed = run(ds, o, 2);
    EXPECT_EQ(run(ds, o, 2, true), bucketed);  // deterministic, whatever the path
    std::vector<std::uint64_t> all;
    for (const auto& b : bucketed) all.insert(all.end(), b.begin(), b.end());
    std::sort(all.begin(), all.end());
    std::vector<std::uint64_t> want(2000);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(all, want);
    std::cout << "padding waste: " << waste(plain) * 100 << "% plain, " << waste(bucketed) * 100
              << "% bucketed (window 256), " << plain.size() << " vs " << bucketed.size()
              << " batches\n";
    EXPECT_LT(waste(bucketed), waste(plain) * 0.5);
    EXPECT_LT(bucketed.size(), plain.size());
  });
}

TEST(LoaderDynamic, BudgetsNeedARaggedField) {
  auto fixed = std::make_shared<ferry::testing::IndexDataset>(10);
  LoaderOptions o = cpu_options(4);
  o.max_tokens = 100;
  EXPECT_THROW(Loader(fixed, o), ferry::ConfigError);
  o.max_tokens = 0;
  o.bucket_window = 8;
  EXPECT_THROW(Loader(fixed, o), ferry::ConfigError);
}

}  // namespace
