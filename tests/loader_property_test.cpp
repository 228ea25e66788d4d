// Properties of the loader over random configurations: dataset size, batch size, world size,
// drop_last, shuffle, failing samples under ErrorPolicy::skip, workers, prefetch, the copy stage,
// and resume points. For each: every sample of the epoch is delivered exactly once across the
// ranks (end-of-epoch padding aside), the order is the same whatever the workers, prefetch or
// copy stage, skipping removes exactly the failing samples and nothing else, and resuming at
// any batch gives the rest of the uninterrupted run.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "test_util.hpp"

namespace {

using ferry::Batch;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

struct Case {
  std::size_t n = 0;
  std::size_t batch = 1;
  int world = 1;
  bool drop_last = false;
  bool shuffle = false;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::set<std::size_t> bad;  // samples whose read() throws

  std::string str() const {
    std::ostringstream s;
    s << "n=" << n << " batch=" << batch << " world=" << world << " drop_last=" << drop_last
      << " shuffle=" << shuffle << " seed=" << seed << " epoch=" << epoch << " bad=" << bad.size();
    return s.str();
  }
};

struct RunOptions {
  int workers = 1;
  int prefetch = 4;
  bool copy_stage = false;
  bool skip = false;
  std::size_t start = 0;
};

Order run(const Case& c, int rank, const RunOptions& r, std::uint64_t* skipped = nullptr) {
  auto ds = std::make_shared<IndexDataset>(c.n, 13, r.skip ? c.bad : std::set<std::size_t>{});
  LoaderOptions o;
  o.batch_size = c.batch;
  o.shuffle = c.shuffle;
  o.seed = c.seed;
  o.drop_last = c.drop_last;
  o.device = ferry::Device::cpu();
  o.rank = rank;
  o.world_size = c.world;
  o.workers = r.workers;
  o.prefetch = r.prefetch;
  o.on_error = r.skip ? ferry::ErrorPolicy::skip : ferry::ErrorPolicy::raise;
  Loader loader = make_loader(ds, o, r.copy_stage);
  Order out;
  for (const Batch& b : loader.epoch(c.epoch, r.start)) {
    EXPECT_TRUE(holds_its_samples(b));
    out.emplace_back(b.indices().begin(), b.indices().end());
  }
  if (skipped != nullptr) *skipped = loader.stats().skipped;
  EXPECT_EQ(out.size(), loader.batches_per_epoch() - std::min(r.start, out.size() + r.start))
      << "start " << r.start;
  return out;
}

Case random_case(std::mt19937_64& rng) {
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  Case c;
  c.n = pick(0, 5) == 0 ? pick(0, 3) : pick(1, 400);
  c.batch = pick(0, 6) == 0 ? pick(c.n + 1, c.n + 50) : pick(1, 64);  // sometimes beyond n
  c.world = static_cast<int>(c.n == 0 ? 1 : pick(1, std::min<std::uint64_t>(c.n, 5)));
  c.drop_last = pick(0, 1) == 1;
  c.shuffle = pick(0, 3) != 0;
  c.seed = rng();
  c.epoch = pick(0, 1000);
  const std::size_t bad = c.n == 0 ? 0 : pick(0, std::min<std::uint64_t>(c.n, 12));
  for (std::size_t i = 0; i < bad; ++i) c.bad.insert(pick(0, c.n - 1));
  return c;
}

TEST(LoaderProperty, ExactlyOnceSameOrderSkipAndResumeOverRandomConfigurations) {
  constexpr int kCases =
      ferry::testing::scaled_for_asan(ferry::testing::scaled_for_tsan(200, 3), 2);
  std::mt19937_64 rng(20261130);
  std::uint64_t total_skipped = 0;  // the random cases do exercise skipping
  within(120s, [&] {
    // 66 cases under TSan, 100 under ASan (test_util.hpp), 200 in release.
    for (int i = 0; i < kCases; ++i) {
      const Case c = random_case(rng);
      SCOPED_TRACE("case " + std::to_string(i) + ": " + c.str());
      const auto w = static_cast<std::size_t>(c.world);

      // The reference: one worker, one slot, no copy stage, nothing failing.
      std::vector<Order> reference;
      std::map<std::uint64_t, std::size_t> seen;
      std::size_t delivered = 0;
      for (int rank = 0; rank < c.world; ++rank) {
        reference.push_back(run(c, rank, RunOptions{1, 1, false, false, 0}));
        for (const auto& batch : reference.back()) {
          EXPECT_LE(batch.size(), c.batch);
          EXPECT_FALSE(batch.empty());
          for (const std::uint64_t index : batch) {
            EXPECT_LT(index, c.n);
            ++seen[index];
            ++delivered;
          }
        }
      }
      // Every rank the same number of batches (a distributed step needs that).
      for (const Order& o : reference) EXPECT_EQ(o.size(), reference[0].size());
      if (!c.drop_last) {
        // Every sample at least once; the only repeats are the padding that evens out the ranks.
        EXPECT_EQ(seen.size(), c.n);
        const std::size_t per_rank = (c.n + w - 1) / w;
        EXPECT_EQ(delivered, per_rank * w);
        for (const auto& [index, count] : seen) EXPECT_LE(count, 2U) << "sample " << index;
      } else {
        // Nothing twice; the dropped are the shard remainder and the last partial batches.
        const std::size_t per_rank = c.n / w / c.batch * c.batch;
        EXPECT_EQ(delivered, per_rank * w);
        for (const auto& [index, count] : seen) EXPECT_EQ(count, 1U) << "sample " << index;
      }
      if (!c.shuffle) {
        // Without shuffling, rank r's j-th sample is position r + j * W (wrapping to pad).
        for (std::size_t rank = 0; rank < w; ++rank) {
          std::size_t j = 0;
          for (const auto& batch : reference[rank]) {
            for (const std::uint64_t index : batch) {
              EXPECT_EQ(index, (rank + j * w) % c.n);
              ++j;
            }
          }
        }
      }

      // Any workers, prefetch, copy stage, failures skipped, resume point: the same order,
      // less exactly the failing samples.
      for (int rank = 0; rank < c.world; ++rank) {
        const Order& ref = reference[static_cast<std::size_t>(rank)];
        RunOptions r;
        r.workers = static_cast<int>(1 + rng() % 3);
        r.prefetch = static_cast<int>(1 + rng() % 4);
        r.copy_stage = rng() % 2 == 1;
        r.skip = true;
        r.start = ref.empty() ? 0 : rng() % (ref.size() + 1);
        Order expected;
        std::uint64_t expected_skips = 0;
        for (std::size_t k = r.start; k < ref.size(); ++k) {
          std::vector<std::uint64_t> kept;
          for (const std::uint64_t index : ref[k]) {
            if (c.bad.count(index) != 0) {
              ++expected_skips;
            } else {
              kept.push_back(index);
            }
          }
          expected.push_back(std::move(kept));
        }
        std::uint64_t skipped = 0;
        EXPECT_EQ(run(c, rank, r, &skipped), expected)
            << "rank " << rank << " workers " << r.workers << " prefetch " << r.prefetch << " copy "
            << r.copy_stage << " start " << r.start;
        EXPECT_EQ(skipped, expected_skips);
        total_skipped += skipped;
      }
    }
  });
  EXPECT_GT(total_skipped, static_cast<std::uint64_t>(kCases) / 2);
}

}  // namespace
