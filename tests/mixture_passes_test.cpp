// ferry::Mixture where an epoch's samples of a source span two of its passes, against a
// brute-force model of the promises: each sample of a source floor or ceil of share / size times
// in every epoch, and a down-sampled source repeating no sample until all were given (checked on
// the stream of the epochs' extra samples from epoch 0, prefix by prefix); nests of mixtures
// costing the same work at every epoch; and the indices a source gives by position or by list
// checked (ConfigError, never an index past the data).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/mixture/mixture_detail.hpp"
#include "datasets/mixture/pass_order.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "ferry/mixture.hpp"
#include "loader_test_util.hpp"
#include "pipeline/sampler.hpp"

namespace {

using ferry::Batch;
using ferry::ConfigError;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::Mixture;
using ferry::MixtureOptions;
using ferry::MixtureSource;
using ferry::testing::expect_error;
using ferry::testing::IndexDataset;
using Flat = std::vector<std::uint64_t>;

constexpr std::int64_t kWidth = 5;

MixtureOptions epochs(std::size_t epoch_size, std::size_t stratified = 0) {
  MixtureOptions o;
  o.epoch_size = epoch_size;
  o.stratified = stratified;
  return o;
}

LoaderOptions options(std::size_t batch, std::uint64_t seed) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = true;
  o.seed = seed;
  o.device = ferry::Device::cpu();
  o.workers = 2;
  return o;
}

// The brute-force model's check of source k's part of epochs [0, epochs): in every epoch each
// sample floor or ceil of s / n times; the extra samples (after the q whole copies, in list
// order) over the epochs one after another, at every prefix, no sample a second time before
// every sample was given (the counts differ by at most one).
::testing::AssertionResult even_over_epochs(const Mixture& m, std::size_t k,
                                            const std::vector<Flat>& lists) {
  const std::size_t n = m.source(k).dataset->size();
  const std::size_t s = m.shares()[k];
  const std::size_t q = s / n;
  std::size_t start = 0;
  for (std::size_t j = 0; j < k; ++j) start += m.shares()[j];
  std::vector<std::size_t> stream(n, 0);
  std::size_t given = 0;  // samples of the stream so far
  for (std::size_t e = 0; e < lists.size(); ++e) {
    std::vector<std::size_t> count(n, 0);
    for (std::size_t p = 0; p < s; ++p) {
      const std::uint64_t i = lists[e][start + p] - m.offset(k);
      if (i >= n) return ::testing::AssertionFailure() << "epoch " << e << ": index past source";
      ++count[i];
      if (p < q * n) continue;
      ++stream[i];
      ++given;
      // After `given` samples of the stream, each was given floor or ceil of given / n times.
      if (stream[i] > (given + n - 1) / n) {
        return ::testing::AssertionFailure()
               << "source " << k << " sample " << i << " given a " << stream[i] << "th time after "
               << given << " extra samples of " << n << " (epoch " << e << ")";
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (count[i] != s / n && count[i] != (s + n - 1) / n) {
        return ::testing::AssertionFailure()
               << "source " << k << " (" << n << " samples, share " << s << ") sample " << i
               << " given " << count[i] << " times in epoch " << e;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(MixturePasses, EachEpochIsEvenAndNothingRepeatsAcrossPassBoundaries) {
  std::mt19937_64 rng(71);
  std::size_t cases = 0;
  for (int t = 0; t < 400; ++t) {
    const std::size_t sources = 1 + rng() % 4;
    std::vector<MixtureSource> src;
    std::vector<std::size_t> sizes;
    std::ostringstream what;
    what << "sizes";
    for (std::size_t k = 0; k < sources; ++k) {
      sizes.push_back(1 + rng() % 30);
      src.push_back({std::make_shared<IndexDataset>(sizes.back(), kWidth),
                     static_cast<double>(1 + rng() % 9)});
      what << " " << sizes.back() << " (weight " << src.back().weight << ")";
    }
    // An epoch size that is a multiple of no source's size.
    std::size_t e = 0;
    for (int tries = 0; tries < 20 && e == 0; ++tries) {
      e = 2 + rng() % 90;
      for (const std::size_t n : sizes) e = (n > 1 && e % n == 0) ? 0 : e;
    }
    if (e == 0) continue;
    what << " epoch_size " << e;
    const auto m = Mixture::open(src, epochs(e));
    const std::uint64_t seed = rng();
    const std::size_t count = 2 + rng() % 30;  // consecutive epochs from 0
    std::vector<Flat> lists;
    for (std::size_t ep = 0; ep < count; ++ep) lists.push_back(m->epoch_indices(seed, ep));
    for (std::size_t k = 0; k < sources; ++k) {
      ASSERT_TRUE(even_over_epochs(*m, k, lists)) << what.str() << " seed " << seed;
    }
    // Far into the stream: each epoch alone is still even (a window of the model's lists).
    const std::uint64_t far = (std::uint64_t{1} << 40) + rng() % 1000;
    for (std::uint64_t ep = far; ep < far + 4; ++ep) {
      const Flat list = m->epoch_indices(seed, ep);
      ASSERT_TRUE(even_over_epochs(*m, 0, {list})) << what.str() << " epoch " << ep;
      for (std::size_t p = 0; p < list.size(); p += 7) {
        ASSERT_EQ(m->epoch_index(seed, ep, p), list[p]) << what.str() << " epoch " << ep;
      }
    }
    ++cases;
  }
  EXPECT_GT(cases, 300u);
}

TEST(MixturePasses, ThroughALoaderEachEpochOfADownSampledSourceHoldsNoSampleTwice) {
  // 30 samples asked for 17 an epoch: epoch 1 takes places 17..33, across the first pass's end.
  const auto m = Mixture::open({{std::make_shared<IndexDataset>(30, kWidth), 1},
                                {std::make_shared<IndexDataset>(7, kWidth), 1}},
                               epochs(34));
  ASSERT_EQ(m->shares(), (std::vector<std::size_t>{17, 17}));
  for (std::uint64_t e = 0; e < 6; ++e) {
    Loader loader(m, options(5, 3));
    std::vector<std::size_t> count(37, 0);
    for (const Batch& b : loader.epoch(e)) {
      for (const std::uint64_t i : b.indices()) ++count[i];
    }
    for (std::size_t i = 0; i < 30; ++i)
      EXPECT_LE(count[i], 1u) << "epoch " << e << " sample " << i;
    // 17 of 7: each 2 or 3 times.
    for (std::size_t i = 30; i < 37; ++i) {
      EXPECT_TRUE(count[i] == 2 || count[i] == 3) << "epoch " << e << " sample " << i;
    }
  }
}

// Level d: the level below and 5 samples, 1:1, in epochs of their sum: the inner mixture gives
// about half of its epoch, so each outer epoch spans one or two of its passes.
std::shared_ptr<Mixture> nest(std::size_t depth, std::size_t stratified) {
  std::shared_ptr<const ferry::Dataset> inner = std::make_shared<IndexDataset>(7, kWidth);
  std::size_t e = 7;
  for (std::size_t d = 0; d < depth; ++d) {
    e += 5;
    inner = Mixture::open({{inner, 1}, {std::make_shared<IndexDataset>(5, kWidth), 1}},
                          epochs(e, stratified));
  }
  return std::const_pointer_cast<Mixture>(std::static_pointer_cast<const Mixture>(inner));
}

TEST(MixturePasses, ANestOfSixtyMixturesCostsTheSameAtEveryEpoch) {
  for (const std::size_t stratified : {std::size_t{0}, std::size_t{4}}) {
    const auto top = nest(60, stratified);
    std::vector<std::uint64_t> work;
    for (std::uint64_t e = 0; e < 10; ++e) {
      const std::uint64_t before = ferry::detail::mixture_lists.load();
      const Flat list = top->epoch_indices(8, e);
      work.push_back(ferry::detail::mixture_lists.load() - before);
      ASSERT_EQ(list.size(), top->epoch_size());
      for (const std::uint64_t i : list) ASSERT_LT(i, top->size());
    }
    // Lists worked out per epoch: the top's alone where every level gives its epochs by
    // position; one per level at most where they are kept (stratified). Never more than at the
    // first epoch (with slack), where lists of every touched pass once grew into thousands.
    EXPECT_LE(work[0], stratified == 0 ? 1U : 61U);
    for (std::uint64_t e = 1; e < 10; ++e) {
      EXPECT_LE(work[e], 2 * work[0]) << "stratified " << stratified << ": epoch " << e
                                      << " worked out " << work[e] << " lists, epoch 0 " << work[0];
    }
    // Through a loader, 10 epochs, each sample of the epoch delivered once.
    Loader loader(top, options(16, 2));
    for (std::uint64_t e = 0; e < 10; ++e) {
      std::size_t got = 0;
      for (const Batch& b : loader.epoch(e)) got += b.size();
      EXPECT_EQ(got, top->epoch_size());
    }
  }
}

// A dataset that chooses its epochs (selection_key() != 0) and gives them by position, but
// gives index `bad` at position `at` (and, listed, `short_by` indices too few).
class LyingSelector : public IndexDataset {
 public:
  LyingSelector(std::size_t n, std::size_t at, std::uint64_t bad, std::size_t short_by = 0)
      : IndexDataset(n, kWidth), n_(n), at_(at), bad_(bad), short_by_(short_by) {}
  std::uint64_t selection_key() const noexcept override { return 77; }
  std::size_t epoch_size() const override { return n_; }
  bool indexes_epoch() const noexcept override { return true; }
  std::vector<std::uint64_t> epoch_indices(std::uint64_t, std::uint64_t) const override {
    Flat all(n_ - short_by_);
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = i == at_ ? bad_ : i;
    return all;
  }
  std::uint64_t epoch_index(std::uint64_t, std::uint64_t, std::uint64_t p) const override {
    return p == at_ ? bad_ : p;
  }

 private:
  std::size_t n_, at_;
  std::uint64_t bad_;
  std::size_t short_by_;
};

struct ByPosition {  // loaders ask every epoch by position while this lives
  std::size_t limit = ferry::detail::listed_epoch_limit.exchange(0);
  ~ByPosition() { ferry::detail::listed_epoch_limit = limit; }
};

void play(const std::shared_ptr<const ferry::Dataset>& d) {
  LoaderOptions o = options(4, 1);
  o.shuffle = false;
  Loader loader(d, o);
  for (const Batch& b : loader.epoch(0)) static_cast<void>(b);
}

TEST(MixturePasses, AnIndexPastTheDataGivenByPositionIsAConfigError) {
  const ByPosition by_position;
  const auto lying = std::make_shared<LyingSelector>(20, 6, 1'000'000);
  expect_error<ConfigError>([&] { play(lying); },
                            {"epoch_index", "position 6", "1000000", "past its 20 samples"});
  // Through a mixture, which asks its source by position.
  const auto m =
      Mixture::open({{lying, 1}, {std::make_shared<IndexDataset>(4, kWidth), 1}}, epochs(31));
  ASSERT_TRUE(m->indexes_epoch());
  expect_error<ConfigError>([&] { play(m); }, {"source 0", "1000000", "past its 20 samples"});
  // Listed: the mixture's own list.
  expect_error<ConfigError>([&] { static_cast<void>(m->epoch_indices(0, 0)); },
                            {"source 0", "1000000", "past its 20 samples"});
  // A list too short is refused too, never read past.
  const auto short_list = std::make_shared<LyingSelector>(20, 0, 0, 3);
  struct Listed : LyingSelector {
    using LyingSelector::LyingSelector;
    bool indexes_epoch() const noexcept override { return false; }
  };
  const auto listed = std::make_shared<Listed>(20, 0, 0, 3);
  const auto m2 =
      Mixture::open({{listed, 1}, {std::make_shared<IndexDataset>(4, kWidth), 1}}, epochs(31));
  expect_error<ConfigError>([&] { static_cast<void>(m2->epoch_indices(0, 1)); },
                            {"source 0", "gave 17 indices", "epoch_size() is 20"});
  static_cast<void>(short_list);
}

}  // namespace

TEST(MixturePassOrder, ApplyGivesWhatEachPositionGives) {
  // PassOrder::apply() works out many positions at once (round trips side by side, the values
  // past n walked on together): each must be operator()'s value of its position, for sizes on
  // both sides of the powers of two (long walks) and runs that start anywhere.
  using ferry::mixture_detail::PassOrder;
  for (const std::uint64_t n : {1ULL, 2ULL, 3ULL, 5ULL, 63ULL, 64ULL, 65ULL, 1000ULL, 4097ULL,
                                40000ULL, 65536ULL, 65537ULL}) {
    for (const std::uint64_t key : {1ULL, 0x9e3779b97f4a7c15ULL}) {
      const PassOrder order(n, key);
      for (const std::uint64_t first : {std::uint64_t{0}, n / 3, n - 1}) {
        Flat got(n - first);
        for (std::uint64_t t = 0; t < got.size(); ++t) got[t] = first + t;
        order.apply(got.data(), got.size());
        std::size_t differ = 0;
        for (std::uint64_t t = 0; t < got.size(); ++t)
          differ += got[t] != order(first + t) ? 1U : 0U;
        EXPECT_EQ(differ, 0U) << "n " << n << " key " << key << " from " << first;
      }
    }
  }
}
