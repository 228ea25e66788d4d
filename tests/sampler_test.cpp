#include "pipeline/sampler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

namespace {

using ferry::detail::Permutation;
using ferry::detail::Sampler;

std::vector<std::uint64_t> all_of(const Permutation& p, std::uint64_t n) {
  std::vector<std::uint64_t> out(n);
  for (std::uint64_t i = 0; i < n; ++i) out[i] = p(i);
  return out;
}

TEST(Permutation, IsABijectionOnEveryDomainSize) {
  for (const std::uint64_t n :
       {1ULL, 2ULL, 3ULL, 4ULL, 5ULL, 17ULL, 100ULL, 1000ULL, 4096ULL, 4097ULL, 60000ULL}) {
    const auto values = all_of(Permutation(n, 42), n);
    std::vector<std::uint64_t> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::uint64_t> expected(n);
    std::iota(expected.begin(), expected.end(), 0);
    ASSERT_EQ(sorted, expected) << "n = " << n;
  }
}

TEST(Permutation, DependsOnTheKeyOnly) {
  EXPECT_EQ(all_of(Permutation(1000, 7), 1000), all_of(Permutation(1000, 7), 1000));
  EXPECT_NE(all_of(Permutation(1000, 7), 1000), all_of(Permutation(1000, 8), 1000));
  // A shuffle, not a near-identity: few fixed points.
  const auto v = all_of(Permutation(1000, 7), 1000);
  int fixed = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) fixed += v[i] == i ? 1 : 0;
  EXPECT_LT(fixed, 20);
}

std::vector<std::uint64_t> epoch_order(const Sampler& s, std::uint64_t epoch) {
  std::vector<std::uint64_t> all;
  std::vector<std::uint64_t> batch;
  for (std::size_t k = 0; k < s.batches(); ++k) {
    s.batch(epoch, k, batch);
    EXPECT_EQ(batch.size(), s.batch_size(k));
    all.insert(all.end(), batch.begin(), batch.end());
  }
  return all;
}

TEST(Sampler, SequentialCoversTheDatasetInOrder) {
  const Sampler s(10, {.batch_size = 4});
  EXPECT_EQ(s.batches(), 3U);
  EXPECT_EQ(s.batch_size(2), 2U);
  const auto order = epoch_order(s, 0);
  EXPECT_EQ(order, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const Sampler dropping(10, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.batches(), 2U);
  EXPECT_EQ(epoch_order(dropping, 0).size(), 8U);
}

TEST(Sampler, ShuffleIsAPermutationPerEpoch) {
  const Sampler s(1000, {.batch_size = 64, .shuffle = true, .seed = 3});
  const auto e0 = epoch_order(s, 0);
  const auto e1 = epoch_order(s, 1);
  EXPECT_EQ(std::set<std::uint64_t>(e0.begin(), e0.end()).size(), 1000U);
  EXPECT_EQ(std::set<std::uint64_t>(e1.begin(), e1.end()).size(), 1000U);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(e0, epoch_order(Sampler(1000, {.batch_size = 64, .shuffle = true, .seed = 3}), 0));
  EXPECT_NE(e0, epoch_order(Sampler(1000, {.batch_size = 64, .shuffle = true, .seed = 4}), 0));
}

TEST(Sampler, ShardsAreDisjointEqualAndCoverTheDatasetByWrapping) {
  for (const bool drop_last : {false, true}) {
    std::multiset<std::uint64_t> all;
    std::size_t batches = 0;
    for (std::size_t rank = 0; rank < 3; ++rank) {
      const Sampler s(1000, {.batch_size = 32,
                             .shuffle = true,
                             .seed = 9,
                             .drop_last = drop_last,
                             .rank = rank,
                             .world_size = 3});
      if (rank == 0) batches = s.batches();
      EXPECT_EQ(s.batches(), batches) << "rank " << rank;
      EXPECT_EQ(s.samples_per_rank(), drop_last ? 333U : 334U);
      const auto order = epoch_order(s, 5);
      all.insert(order.begin(), order.end());
    }
    const std::set<std::uint64_t> distinct(all.begin(), all.end());
    if (drop_last) {
      EXPECT_EQ(all.size(), 3U * 320U);        // 333 per rank, cut to 10 whole batches of 32
      EXPECT_EQ(distinct.size(), all.size());  // disjoint
    } else {
      EXPECT_EQ(all.size(), 1002U);       // two padded by wrapping
      EXPECT_EQ(distinct.size(), 1000U);  // the union is the dataset
    }
  }
}

TEST(Sampler, SampleSeedsDependOnSeedEpochAndIndex) {
  using ferry::detail::sample_seed;
  EXPECT_EQ(sample_seed(1, 2, 3), sample_seed(1, 2, 3));
  EXPECT_NE(sample_seed(1, 2, 3), sample_seed(1, 2, 4));
  EXPECT_NE(sample_seed(1, 2, 3), sample_seed(1, 3, 3));
  EXPECT_NE(sample_seed(1, 2, 3), sample_seed(2, 2, 3));
}

}  // namespace
