// Data-parallel ranks: every rank of a job gets the same number of batches every epoch, for
// uneven dataset sizes, with failing samples skipped, and with dynamic batches (max_tokens), so
// that no rank runs out of batches while the others wait in an all-reduce. And the ranks' shards
// are disjoint and together the dataset (end-of-epoch padding aside).

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::ErrorPolicy;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::testing::cpu_options;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

// Sample i: "tokens" i32 [L_i] with L_i in [1, 60], token j = i + j; "id" i64 [] = i.
class Texts : public ferry::Dataset {
 public:
  explicit Texts(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return len(index);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < len(index); ++j) {
      t[j] = static_cast<std::int32_t>(index) + static_cast<std::int32_t>(j);
    }
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
  static std::int64_t len(std::size_t i) {
    return 1 + static_cast<std::int64_t>((i * 2654435761ULL) % 60);
  }

 private:
  std::size_t n_;
};

// One rank's epoch: its batches' indices; checks Epoch::size() and batches_per_epoch().
Order rank_epoch(const std::shared_ptr<const ferry::Dataset>& ds, LoaderOptions o, int rank,
                 int world, std::uint64_t epoch) {
  o.rank = rank;
  o.world_size = world;
  Loader loader(ds, o);
  Order out;
  ferry::Epoch ep = loader.epoch(epoch);
  const std::size_t size = ep.size();
  for (const Batch& b : ep) out.emplace_back(b.indices().begin(), b.indices().end());
  EXPECT_EQ(out.size(), size);
  EXPECT_EQ(out.size(), loader.batches_per_epoch());
  return out;
}

TEST(LoaderDistributed, EveryRankGetsAsManyBatchesForUnevenSizes) {
  within(60s, [] {
    for (const std::size_t n : {7U, 13U, 100U, 101U, 257U}) {
      auto ds = std::make_shared<IndexDataset>(n);
      for (const int world : {2, 3, 5}) {
        for (const bool drop_last : {false, true}) {
          LoaderOptions o = cpu_options(4, true, 11);
          o.drop_last = drop_last;
          o.workers = 1;
          std::multiset<std::uint64_t> all;
          std::size_t batches = 0;
          for (int r = 0; r < world; ++r) {
            const Order mine = rank_epoch(ds, o, r, world, 2);
            if (r == 0) batches = mine.size();
            ASSERT_EQ(mine.size(), batches) << "n " << n << " world " << world << " rank " << r;
            for (const auto& b : mine) all.insert(b.begin(), b.end());
          }
          const std::set<std::uint64_t> distinct(all.begin(), all.end());
          if (drop_last) {
            EXPECT_EQ(distinct.size(), all.size()) << "disjoint, n " << n << " world " << world;
          } else {
            EXPECT_EQ(distinct.size(), n) << "complete, n " << n << " world " << world;
            EXPECT_LT(all.size() - n, static_cast<std::size_t>(world)) << "padding";
          }
        }
      }
    }
  });
}

TEST(LoaderDistributed, ASkippedSampleShortensItsBatchButNeverRemovesIt) {
  // Unshuffled, 2 ranks of batches of 4: rank 0's batch 1 holds positions 8, 10, 12, 14,
  // all failing, and rank 1's batch 0 holds 1, 3, 5, 7, of which 3 fails.
  const std::set<std::size_t> bad = {3, 8, 10, 12, 14};
  auto ds = std::make_shared<IndexDataset>(37, 13, bad);
  LoaderOptions o = cpu_options(4);
  o.on_error = ErrorPolicy::skip;
  o.world_size = 2;
  within(60s, [&] {
    std::vector<std::size_t> counts;
    std::uint64_t skipped = 0;
    for (int r = 0; r < 2; ++r) {
      o.rank = r;
      Loader loader(ds, o);
      std::vector<std::size_t> sizes;
      for (const Batch& b : loader.epoch(0)) {
        EXPECT_TRUE(holds_its_samples(b));
        EXPECT_EQ(b.number(), sizes.size());
        for (const std::uint64_t i : b.indices()) EXPECT_EQ(bad.count(i), 0U) << i;
        sizes.push_back(b.size());
      }
      counts.push_back(sizes.size());
      skipped += loader.stats().skipped;
      if (r == 0) {
        ASSERT_GE(sizes.size(), 2U);
        EXPECT_EQ(sizes[1], 0U);  // every sample failed: delivered empty, not dropped
        EXPECT_EQ(sizes[0], 4U);
      } else {
        EXPECT_EQ(sizes[0], 3U);
      }
    }
    EXPECT_EQ(counts[0], counts[1]);
    EXPECT_EQ(counts[0], 5U);  // 19 samples per rank (one padded), batches of 4
    EXPECT_EQ(skipped, 5U);
  });
}

TEST(LoaderDistributed, DynamicBatchesComeInEqualCountsToEveryRank) {
  auto ds = std::make_shared<Texts>(211);
  within(60s, [&] {
    for (const bool drop_last : {false, true}) {
      for (const std::size_t window : {0U, 64U}) {
        LoaderOptions o = cpu_options(16, true, 3);
        o.ragged = RaggedBatch::pack;
        o.max_tokens = 200;
        o.bucket_window = window;
        o.drop_last = drop_last;
        o.workers = 1;
        for (const std::uint64_t epoch : {0U, 1U}) {
          for (const int world : {2, 3, 4}) {
            std::map<std::uint64_t, int> seen;
            std::size_t batches = 0;
            for (int r = 0; r < world; ++r) {
              const Order mine = rank_epoch(ds, o, r, world, epoch);
              if (r == 0) batches = mine.size();
              ASSERT_EQ(mine.size(), batches) << "world " << world << " rank " << r;
              for (const auto& b : mine) {
                for (const std::uint64_t i : b) ++seen[i];
              }
            }
            EXPECT_GT(batches, 0U);
            if (!drop_last) {
              EXPECT_EQ(seen.size(), 211U) << "world " << world;  // every sample, once or more
            } else {
              for (const auto& [i, times] : seen) EXPECT_EQ(times, 1) << i;  // disjoint
            }
          }
        }
      }
    }
  });
}

}  // namespace
