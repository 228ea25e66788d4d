// ferry::Mixture against a brute-force model of it, over random sources, weights, epoch sizes,
// world sizes, batch sizes and resume points: every epoch holds exactly each source's share
// (largest remainders), every sample of a source within one of its fair count over any number
// of epochs (so a down-sampled source repeats nothing until all of it was given), the same
// batches whatever the workers or the copy stage, elastic resume giving each sample of the
// epoch once, per-source counts in the stats, the source field, mixtures of mixtures, ragged
// fields under max_tokens, and the ConfigErrors.

#include "ferry/mixture.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::ConfigError;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::LoaderState;
using ferry::Mixture;
using ferry::MixtureOptions;
using ferry::MixtureSource;
using ferry::testing::expect_error;
using ferry::testing::IndexDataset;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Flat = std::vector<std::uint64_t>;

constexpr std::int64_t kWidth = 13;

// Checks that every sample of `b` holds its source's sample (IndexDataset's bytes, y the index
// within the source).
::testing::AssertionResult holds_mixed(const Mixture& m, const Batch& b) {
  const ferry::Tensor x = b["x"].cpu();
  const ferry::Tensor y = b["y"].cpu();
  for (std::size_t i = 0; i < b.size(); ++i) {
    const std::uint64_t index = b.indices()[i];
    const std::size_t k = m.source_of(index);
    const std::uint64_t local = index - m.offset(k);
    if (y.data<std::int64_t>()[i] != static_cast<std::int64_t>(local)) {
      return ::testing::AssertionFailure()
             << "index " << index << ": y " << y.data<std::int64_t>()[i] << ", expected " << local
             << " of source " << k;
    }
    for (std::int64_t j = 0; j < kWidth; ++j) {
      if (x.data<std::uint8_t>()[static_cast<std::int64_t>(i) * kWidth + j] !=
          IndexDataset::expected_byte(local, j)) {
        return ::testing::AssertionFailure() << "index " << index << " byte " << j << " differs";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

MixtureOptions epochs(std::size_t epoch_size, std::string source_field = {}) {
  MixtureOptions o;
  o.epoch_size = epoch_size;
  o.source_field = std::move(source_field);
  return o;
}

// The model: shares by largest remainders of integer weights, exactly.
std::vector<std::size_t> model_shares(std::size_t epoch, const std::vector<std::uint64_t>& w) {
  std::uint64_t total = 0;
  for (const std::uint64_t x : w) total += x;
  std::vector<std::size_t> share(w.size());
  std::vector<std::uint64_t> rem(w.size());
  std::size_t given = 0;
  for (std::size_t k = 0; k < w.size(); ++k) {
    share[k] = static_cast<std::size_t>(epoch * w[k] / total);
    rem[k] = epoch * w[k] % total;
    given += share[k];
  }
  while (given < epoch) {  // the largest remainder, the earliest source on a tie
    std::size_t best = 0;
    for (std::size_t k = 1; k < w.size(); ++k) {
      if (rem[k] > rem[best]) best = k;
    }
    ++share[best];
    rem[best] = 0;
    ++given;
  }
  return share;
}

struct Mix {
  std::vector<std::size_t> sizes;
  std::vector<std::uint64_t> weights;
  std::size_t epoch_size = 0;  // as given (0: the sum)
  std::shared_ptr<Mixture> mixture;

  std::string str() const {
    std::ostringstream s;
    s << "sizes";
    for (const auto n : sizes) s << " " << n;
    s << " weights";
    for (const auto w : weights) s << " " << w;
    s << " epoch_size " << epoch_size;
    return s.str();
  }
};

Mix random_mix(std::mt19937_64& rng) {
  Mix m;
  const std::size_t sources = 1 + rng() % 4;
  std::vector<MixtureSource> src;
  for (std::size_t k = 0; k < sources; ++k) {
    m.sizes.push_back(1 + rng() % 40);
    m.weights.push_back(1 + rng() % 9);
    src.push_back({std::make_shared<IndexDataset>(m.sizes.back(), kWidth),
                   static_cast<double>(m.weights.back())});
  }
  m.epoch_size = rng() % 3 == 0 ? 0 : 1 + rng() % 120;
  m.mixture = Mixture::open(src, epochs(m.epoch_size));
  return m;
}

LoaderOptions options(std::size_t batch, bool shuffle, std::uint64_t seed, int rank = 0,
                      int world = 1) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.device = ferry::Device::cpu();
  o.workers = 2;
  o.rank = rank;
  o.world_size = world;
  return o;
}

// Every sample of epoch `e` of a one-rank loader, in order, checking the bytes.
Flat one_epoch(const Mixture& m, const std::shared_ptr<const ferry::Dataset>& ds,
               const LoaderOptions& o, std::uint64_t e, bool copy_stage = false) {
  Loader loader = make_loader(ds, o, copy_stage);
  Flat out;
  for (const Batch& b : loader.epoch(e)) {
    EXPECT_TRUE(holds_mixed(m, b));
    out.insert(out.end(), b.indices().begin(), b.indices().end());
  }
  return out;
}

std::map<std::uint64_t, std::size_t> multiset(const Flat& f) {
  std::map<std::uint64_t, std::size_t> c;
  for (const std::uint64_t i : f) ++c[i];
  return c;
}

TEST(Mixture, SharesAreLargestRemaindersTiesToTheEarlierSource) {
  auto d = [](std::size_t n) { return std::make_shared<IndexDataset>(n, kWidth); };
  // 10 x (1, 1, 1) / 3: 3.33 each, the spare one to source 0.
  EXPECT_EQ(Mixture::open({{d(5), 1}, {d(5), 1}, {d(5), 1}}, epochs(10))->shares(),
            (std::vector<std::size_t>{4, 3, 3}));
  // 0: the sum of the sizes; weights 1, 3 of 8 + 4 = 12 give 3, 9.
  const auto m = Mixture::open({{d(8), 1}, {d(4), 3}});
  EXPECT_EQ(m->epoch_size(), 12u);
  EXPECT_EQ(m->shares(), (std::vector<std::size_t>{3, 9}));
  EXPECT_EQ(m->size(), 12u);
  EXPECT_EQ(m->source_of(7), 0u);
  EXPECT_EQ(m->source_of(8), 1u);
  EXPECT_EQ(m->num_sources(), 2u);
  // Non-integer weights: 7 x (0.1, 0.2, 0.7) = 0.7, 1.4, 4.9 -> 1, 1, 5.
  EXPECT_EQ(Mixture::open({{d(3), 0.1}, {d(3), 0.2}, {d(3), 0.7}}, epochs(7))->shares(),
            (std::vector<std::size_t>{1, 1, 5}));
  std::mt19937_64 rng(11);
  for (int t = 0; t < 300; ++t) {
    const Mix m2 = random_mix(rng);
    std::size_t all = 0;
    for (const auto n : m2.sizes) all += n;
    const std::size_t e = m2.epoch_size == 0 ? all : m2.epoch_size;
    EXPECT_EQ(m2.mixture->shares(), model_shares(e, m2.weights)) << m2.str();
  }
}

TEST(Mixture, EpochIndicesGiveEverySampleItsFairCountOverAnyNumberOfEpochs) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 60; ++t) {
    const Mix m = random_mix(rng);
    const std::uint64_t seed = rng();
    const std::size_t epochs = 1 + rng() % 12;
    std::vector<std::size_t> seen(m.mixture->size(), 0);
    for (std::size_t e = 0; e < epochs; ++e) {
      const Flat list = m.mixture->epoch_indices(seed, e);
      ASSERT_EQ(list.size(), m.mixture->epoch_size()) << m.str();
      std::vector<std::size_t> per_source(m.sizes.size(), 0);
      for (const std::uint64_t i : list) {
        ASSERT_LT(i, m.mixture->size());
        ++seen[i];
        ++per_source[m.mixture->source_of(i)];
      }
      EXPECT_EQ(per_source, m.mixture->shares()) << m.str() << " epoch " << e;
      EXPECT_EQ(list, m.mixture->epoch_indices(seed, e)) << "not a function of (seed, epoch)";
      // After e + 1 epochs, sample i of source k (n samples, share s) was given floor or ceil of
      // (e + 1) x s / n times: up-sampled, each epoch is even; down-sampled, no sample comes
      // again before every sample of its source came.
      for (std::size_t k = 0; k < m.sizes.size(); ++k) {
        const std::size_t n = m.sizes[k];
        const std::size_t total = (e + 1) * m.mixture->shares()[k];
        for (std::size_t i = 0; i < n; ++i) {
          const std::size_t c = seen[m.mixture->offset(k) + i];
          EXPECT_TRUE(c == total / n || c == (total + n - 1) / n)
              << m.str() << ": source " << k << " sample " << i << " given " << c << " times in "
              << e + 1 << " epochs of share " << m.mixture->shares()[k];
        }
      }
    }
  }
}

TEST(Mixture, DownSampledSourceGivesOtherSamplesEachEpochAndOtherSeedsOtherOnes) {
  const auto m = Mixture::open({{std::make_shared<IndexDataset>(100, kWidth), 1},
                                {std::make_shared<IndexDataset>(5, kWidth), 1}},
                               epochs(20));
  ASSERT_EQ(m->shares(), (std::vector<std::size_t>{10, 10}));
  std::vector<Flat> firsts;
  for (std::uint64_t e = 0; e < 10; ++e) {
    Flat list = m->epoch_indices(3, e);
    Flat first(list.begin(), list.begin() + 10);
    for (const auto i : first) EXPECT_LT(i, 100u);
    for (const auto& f : firsts) EXPECT_NE(f, first);
    firsts.push_back(first);
  }
  EXPECT_NE(m->epoch_indices(3, 0), m->epoch_indices(4, 0));
  // The up-sampled source: each of its 5 samples exactly twice.
  const Flat list = m->epoch_indices(3, 0);
  const auto c = multiset(Flat(list.begin() + 10, list.end()));
  for (std::uint64_t i = 100; i < 105; ++i) EXPECT_EQ(c.at(i), 2u);
}

TEST(Mixture, LoaderDeliversExactMultiplicitiesTheSameWhateverTheWorkersAndCopyStage) {
  within(120s, [] {
    std::mt19937_64 rng(7);
    for (int t = 0; t < 25; ++t) {
      const Mix m = random_mix(rng);
      const std::uint64_t seed = rng() % 1000;
      const std::uint64_t e = rng() % 5;
      const std::size_t batch = 1 + rng() % 9;
      const bool shuffle = rng() % 4 != 0;
      LoaderOptions o = options(batch, shuffle, seed);
      const Flat order = one_epoch(*m.mixture, m.mixture, o, e);
      EXPECT_EQ(multiset(order), multiset(m.mixture->epoch_indices(seed, e))) << m.str();
      o.workers = 3;
      o.prefetch = 2;
      EXPECT_EQ(one_epoch(*m.mixture, m.mixture, o, e, true), order) << m.str();
      o.workers = 1;
      EXPECT_EQ(one_epoch(*m.mixture, m.mixture, o, e), order) << m.str();
      // Unshuffled, the order is the mixture's list itself.
      if (!shuffle) {
        EXPECT_EQ(order, m.mixture->epoch_indices(seed, e));
      }
      // Starting at batch k skips exactly the first k batches.
      {
        const std::size_t batches = (order.size() + batch - 1) / batch;
        const std::size_t k = rng() % (batches + 1);
        Loader loader(m.mixture, options(batch, shuffle, seed));
        Flat rest;
        for (const Batch& b : loader.epoch(e, k)) {
          EXPECT_TRUE(holds_mixed(*m.mixture, b));
          rest.insert(rest.end(), b.indices().begin(), b.indices().end());
        }
        EXPECT_EQ(rest, Flat(order.begin() +
                                 static_cast<std::ptrdiff_t>(std::min(k * batch, order.size())),
                             order.end()))
            << m.str() << " from batch " << k;
      }

      // W ranks: together the epoch, plus the padding (the epoch's first positions again).
      const std::size_t epoch = m.mixture->epoch_size();
      const int world = 1 + static_cast<int>(rng() % std::min<std::size_t>(4, epoch));
      std::map<std::uint64_t, std::size_t> all;
      std::vector<std::uint64_t> sources(m.sizes.size(), 0);
      for (int r = 0; r < world; ++r) {
        Loader loader(m.mixture, options(batch, shuffle, seed, r, world));
        for (const Batch& b : loader.epoch(e)) {
          EXPECT_TRUE(holds_mixed(*m.mixture, b));
          for (const auto i : b.indices()) ++all[i];
        }
        const auto stats = loader.stats();
        ASSERT_EQ(stats.source_samples.size(), m.sizes.size());
        for (std::size_t k = 0; k < sources.size(); ++k) sources[k] += stats.source_samples[k];
      }
      const std::size_t per_rank =
          (epoch + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
      const std::size_t pad = per_rank * static_cast<std::size_t>(world) - epoch;
      Flat expected = order;
      expected.insert(expected.end(), order.begin(),
                      order.begin() + static_cast<std::ptrdiff_t>(pad));
      EXPECT_EQ(all, multiset(expected)) << m.str() << " world " << world;
      std::vector<std::uint64_t> want(m.sizes.size(), 0);
      for (const auto i : expected) ++want[m.mixture->source_of(i)];
      EXPECT_EQ(sources, want) << m.str();
    }
  });
}

TEST(Mixture, ElasticResumeGivesEachSampleOfTheEpochOnce) {
  within(120s, [] {
    std::mt19937_64 rng(13);
    for (int t = 0; t < 25; ++t) {
      const Mix m = random_mix(rng);
      const std::uint64_t seed = rng() % 100;
      const std::uint64_t e = rng() % 4;
      const std::size_t epoch = m.mixture->epoch_size();
      const int world = 1 + static_cast<int>(rng() % std::min<std::size_t>(3, epoch));
      const std::size_t batch = 1 + rng() % 6;
      const std::size_t per_rank =
          (epoch + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
      const std::size_t batches = (per_rank + batch - 1) / batch;
      const std::size_t steps = rng() % (batches + 1);
      // The first job: `steps` steps on each rank; their states agree.
      std::map<std::uint64_t, std::size_t> got;
      std::string state;
      for (int r = 0; r < world; ++r) {
        Loader loader(m.mixture, options(batch, true, seed, r, world));
        ferry::Epoch ep = loader.epoch(e);
        for (std::size_t k = 0; k < steps; ++k) {
          const Batch* b = ep.next();
          ASSERT_NE(b, nullptr);
          for (const auto i : b->indices()) ++got[i];
        }
        const std::string s = loader.state().str();
        if (r == 0) state = s;
        EXPECT_EQ(s, state) << "ranks disagree";
      }
      const LoaderState st = LoaderState::parse(state);
      EXPECT_EQ(st.samples, epoch);
      EXPECT_EQ(st.selection, m.mixture->selection_key());
      // The rest on W' ranks with another batch size.
      const int world2 = 1 + static_cast<int>(rng() % std::min<std::size_t>(4, epoch));
      const std::size_t batch2 = 1 + rng() % 7;
      for (int r = 0; r < world2; ++r) {
        Loader loader(m.mixture, options(batch2, true, seed, r, world2));
        for (const Batch& b : loader.resume(st)) {
          EXPECT_TRUE(holds_mixed(*m.mixture, b));
          for (const auto i : b.indices()) ++got[i];
        }
      }
      // Each sample as often as the epoch holds it; the resumed run's padding (fewer than W'
      // samples) aside.
      const auto want = multiset(m.mixture->epoch_indices(seed, e));
      std::size_t extra = 0;
      for (const auto& [i, c] : want) {
        EXPECT_GE(got[i], c) << m.str() << " sample " << i;
        if (got[i] > c) extra += got[i] - c;
      }
      std::size_t total = 0;
      for (const auto& [i, c] : got) total += c;
      EXPECT_EQ(total, epoch + extra);
      EXPECT_LT(extra, static_cast<std::size_t>(world2)) << m.str();
    }
  });
}

TEST(Mixture, AStateOfOtherWeightsOrEpochSizeIsRefused) {
  auto d = [](std::size_t n) { return std::make_shared<IndexDataset>(n, kWidth); };
  const auto a = d(30);
  const auto b = d(20);
  const auto mix = [&](double wa, double wb, std::size_t e) {
    return Mixture::open({{a, wa}, {b, wb}}, epochs(e));
  };
  Loader loader(mix(1, 2, 24), options(4, true, 1));
  {
    ferry::Epoch ep = loader.epoch(2);
    (void)ep.next();
  }
  const LoaderState s = loader.state();
  EXPECT_NE(s.selection, 0u);
  EXPECT_EQ(s.samples, 24u);
  EXPECT_EQ(LoaderState::parse(s.str()), s);
  // The same mixture made again resumes it.
  Loader same(mix(1, 2, 24), options(6, true, 1));
  EXPECT_NO_THROW((void)same.resume(s));
  // Weights that give the same shares give the same epochs.
  Loader scaled(mix(2, 4, 24), options(4, true, 1));
  EXPECT_NO_THROW((void)scaled.resume(s));
  Loader weights(mix(2, 1, 24), options(4, true, 1));
  expect_error<ConfigError>([&] { (void)weights.resume(s); }, {"selection", "weights"});
  Loader size(mix(1, 2, 30), options(4, true, 1));
  expect_error<ConfigError>([&] { (void)size.resume(s); }, {"epochs of", "24", "30"});
  // A plain dataset of as many samples: its state has no selection.
  Loader plain(d(24), options(4, true, 1));
  expect_error<ConfigError>([&] { (void)plain.resume(s); }, {"selection"});
  expect_error<ConfigError>([&] { (void)weights.resume(plain.state()); }, {"selection", "none"});
}

TEST(Mixture, StateTextWithSelectionParsesExactly) {
  const std::string old =
      "ferry-state v2 seed=1 epoch=2 next_batch=3 samples=40 shuffle=1 position=5 plan=6";
  const LoaderState s = LoaderState::parse(old);
  EXPECT_EQ(s.selection, 0u);
  EXPECT_EQ(s.str(), old);
  const std::string with = old + " selection=77";
  EXPECT_EQ(LoaderState::parse(with).selection, 77u);
  EXPECT_EQ(LoaderState::parse(with).str(), with);
  for (const std::string& bad : {old + " selection=0", old + " selection=", old + " selection=07",
                                 old + " selection=7 ", old + " select=7", old + " "}) {
    EXPECT_THROW((void)LoaderState::parse(bad), ConfigError) << bad;
  }
}

// "x" of another width, "y" of another dtype, another name, another count of fields.
class Other : public ferry::Dataset {
 public:
  explicit Other(std::vector<FieldSpec> f) : f_(std::move(f)) {}
  std::size_t size() const override { return 4; }
  std::vector<FieldSpec> fields() const override { return f_; }
  void read(std::size_t, ferry::SampleRef) const override {}

 private:
  std::vector<FieldSpec> f_;
};

TEST(Mixture, RefusesWhatCannotMix) {
  const auto a = std::make_shared<IndexDataset>(10, kWidth);
  auto fields = a->fields();
  auto with = [&](auto change) {
    auto f = fields;
    change(f);
    return std::make_shared<Other>(f);
  };
  expect_error<ConfigError>([] { (void)Mixture::open({}); }, {"no sources"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {nullptr, 1}});
      },
      {"source 1", "no dataset"});
  for (const double w : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity()}) {
    expect_error<ConfigError>(
        [&] {
          (void)Mixture::open({{a, 1}, {a, w}});
        },
        {"source 1", "weight", "positive and finite"});
  }
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {with([](auto& f) { f[0].shape = {12}; }), 1}});
      },
      {"source 1", "\"x\"", "shape [12]", "[13]"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {a, 2}, {with([](auto& f) { f[1].dtype = DType::i32; }), 1}});
      },
      {"source 2", "\"y\"", "dtype i32", "i64"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {with([](auto& f) { f[2].name = "w"; }), 1}});
      },
      {"source 1", "name \"w\"", "\"z\""});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {with([](auto& f) { f.pop_back(); }), 1}});
      },
      {"source 1", "2 fields", "3"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open(
            {{a, 1}, {with([](auto& f) { f[0].normalize = ferry::Normalize{}; }), 1}});
      },
      {"source 1", "\"x\"", "normalize"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}, {std::make_shared<IndexDataset>(0, kWidth), 1}});
      },
      {"source 1", "no samples"});
  expect_error<ConfigError>(
      [&] {
        (void)Mixture::open({{a, 1}}, epochs(0, "y"));
      },
      {"source_field", "\"y\""});
}

TEST(Mixture, SourceFieldNamesEachSamplesSource) {
  const auto m = Mixture::open({{std::make_shared<IndexDataset>(7, kWidth), 1},
                                {std::make_shared<IndexDataset>(3, kWidth), 2},
                                {std::make_shared<IndexDataset>(5, kWidth), 1}},
                               epochs(40, "source"));
  ASSERT_EQ(m->fields().back(), (FieldSpec{"source", DType::i64, {}}));
  for (const bool copy : {false, true}) {
    Loader loader = make_loader(m, options(6, true, 9), copy);
    std::size_t n = 0;
    for (const Batch& b : loader.epoch(1)) {
      EXPECT_TRUE(holds_mixed(*m, b));
      const ferry::Tensor s = b["source"].cpu();
      ASSERT_EQ(s.shape(), (std::vector<std::int64_t>{static_cast<std::int64_t>(b.size())}));
      for (std::size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(s.data<std::int64_t>()[i],
                  static_cast<std::int64_t>(m->source_of(b.indices()[i])));
      }
      n += b.size();
    }
    EXPECT_EQ(n, 40u);
    const auto stats = loader.stats();
    EXPECT_EQ(stats.source_samples, (std::vector<std::uint64_t>{10, 20, 10}));
  }
  // A plain dataset has no sources.
  Loader plain(std::make_shared<IndexDataset>(5, kWidth), options(2, false, 0));
  for (const Batch& b : plain.epoch(0)) static_cast<void>(b);
  EXPECT_TRUE(plain.stats().source_samples.empty());
}

TEST(Mixture, SkippedSamplesLeaveEveryOccurrenceOut) {
  // Source 1's sample 2 fails; up-sampled 4 times, it is skipped 4 times, nothing else.
  const auto m =
      Mixture::open({{std::make_shared<IndexDataset>(10, kWidth), 1},
                     {std::make_shared<IndexDataset>(5, kWidth, std::set<std::size_t>{2}), 2}},
                    epochs(30));
  ASSERT_EQ(m->shares(), (std::vector<std::size_t>{10, 20}));
  LoaderOptions o = options(4, true, 2);
  o.on_error = ferry::ErrorPolicy::skip;
  Loader loader(m, o);
  Flat got;
  for (const Batch& b : loader.epoch(0)) {
    EXPECT_TRUE(holds_mixed(*m, b));
    got.insert(got.end(), b.indices().begin(), b.indices().end());
  }
  Flat want = m->epoch_indices(2, 0);
  std::erase(want, std::uint64_t{12});
  EXPECT_EQ(multiset(got), multiset(want));
  EXPECT_EQ(loader.stats().skipped, 4u);
  EXPECT_EQ(loader.stats().source_samples, (std::vector<std::uint64_t>{10, 16}));
}

TEST(Mixture, MixtureOfMixtures) {
  auto d = [](std::size_t n) { return std::make_shared<IndexDataset>(n, kWidth); };
  // Inner: 10 and 30 samples weighted 3:1 in epochs of 20: shares 15 and 5.
  const auto inner = Mixture::open({{d(10), 3}, {d(30), 1}}, epochs(20));
  ASSERT_EQ(inner->shares(), (std::vector<std::size_t>{15, 5}));
  // Outer: the inner mixture and 8 samples, 2:1 in epochs of 60: the inner one gives 40, two of
  // its epochs, so exactly 30 and 10 of its sources; the plain one 20.
  const auto outer = Mixture::open({{inner, 2}, {d(8), 1}}, epochs(60));
  ASSERT_EQ(outer->shares(), (std::vector<std::size_t>{40, 20}));
  EXPECT_EQ(outer->size(), 48u);
  for (std::uint64_t e = 0; e < 6; ++e) {
    const Flat list = outer->epoch_indices(5, e);
    ASSERT_EQ(list.size(), 60u);
    std::vector<std::size_t> parts(3, 0);
    for (const auto i : list) {
      ASSERT_LT(i, 48u);
      ++parts[i < 10 ? 0 : i < 40 ? 1 : 2];
    }
    EXPECT_EQ(parts, (std::vector<std::size_t>{30, 10, 20})) << "epoch " << e;
  }
  // An outer share that is not a whole number of inner epochs still gives the inner share.
  const auto odd = Mixture::open({{inner, 1}, {d(8), 1}}, epochs(25));
  const Flat list = odd->epoch_indices(1, 3);
  std::size_t from_inner = 0;
  for (const auto i : list) from_inner += i < 40 ? 1 : 0;
  EXPECT_EQ(from_inner, odd->shares()[0]);
  // Through a loader, with two ranks.
  std::map<std::uint64_t, std::size_t> got;
  for (int r = 0; r < 2; ++r) {
    Loader loader(outer, options(7, true, 5, r, 2));
    for (const Batch& b : loader.epoch(2)) {
      // y is the index within the innermost source.
      const ferry::Tensor y = b["y"].cpu();
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::uint64_t index = b.indices()[i];
        const std::uint64_t local = index < 10 ? index : index < 40 ? index - 10 : index - 40;
        EXPECT_EQ(y.data<std::int64_t>()[i], static_cast<std::int64_t>(local));
        ++got[index];
      }
    }
    EXPECT_EQ(loader.stats().source_samples.size(), 2u);
  }
  EXPECT_EQ(got, multiset(outer->epoch_indices(5, 2)));
}

TEST(Mixture, ALongEpochsListWorkedOutInPiecesIsTheListByPosition) {
  // Shares 70,000, 5,000 and 25,000: remainders of 20,000 and 25,000 samples, whose places are
  // worked out in pieces on several threads, and must be what epoch_index() gives position by
  // position.
  const auto m = Mixture::open({{std::make_shared<IndexDataset>(50'000, kWidth), 14},
                                {std::make_shared<IndexDataset>(30'000, kWidth), 1},
                                {std::make_shared<IndexDataset>(40'000, kWidth), 5}},
                               epochs(100'000));
  for (const std::uint64_t epoch : {std::uint64_t{0}, std::uint64_t{3}}) {
    const std::vector<std::uint64_t> list = m->epoch_indices(6, epoch);
    ASSERT_EQ(list.size(), 100'000U);
    std::size_t differ = 0;
    for (std::uint64_t p = 0; p < list.size(); ++p)
      differ += list[p] != m->epoch_index(6, epoch, p);
    EXPECT_EQ(differ, 0U) << "epoch " << epoch;
    // Epoch 0 is the first 25,000 of the third source's first pass, epoch 3 the last 5,000 of
    // pass 1 and 20,000 of pass 2: no sample twice in either.
    const std::set<std::uint64_t> third(list.begin() + 75'000, list.end());
    EXPECT_EQ(third.size(), 25'000U) << "epoch " << epoch;
    EXPECT_GE(*third.begin(), 80'000U);
  }
}

TEST(Mixture, EpochIndexGivesEachPositionOfTheListDirectly) {
  std::mt19937_64 rng(29);
  auto d = [](std::size_t n) { return std::make_shared<IndexDataset>(n, kWidth); };
  std::vector<std::shared_ptr<Mixture>> mixes;
  for (int t = 0; t < 30; ++t) mixes.push_back(random_mix(rng).mixture);
  // Nested: the inner mixture gives its epochs by position too.
  const auto inner = Mixture::open({{d(10), 3}, {d(30), 1}}, epochs(20));
  mixes.push_back(Mixture::open({{inner, 2}, {d(8), 1}}, epochs(60)));
  mixes.push_back(Mixture::open({{inner, 1}, {d(8), 1}}, epochs(25)));
  for (const auto& m : mixes) {
    ASSERT_TRUE(m->indexes_epoch());
    for (const std::uint64_t seed : {0u, 9u}) {
      for (std::uint64_t e = 0; e < 7; ++e) {
        const Flat list = m->epoch_indices(seed, e);
        for (std::size_t p = 0; p < list.size(); ++p) {
          ASSERT_EQ(m->epoch_index(seed, e, p), list[p]) << "epoch " << e << " position " << p;
        }
      }
    }
  }
  // A stratified mixture keeps its list (and its epoch_index() reads it); so does one over it.
  MixtureOptions mo = epochs(30);
  mo.stratified = 8;
  const auto stratified = Mixture::open({{d(10), 1}, {d(20), 2}}, mo);
  EXPECT_FALSE(stratified->indexes_epoch());
  EXPECT_FALSE(Mixture::open({{stratified, 1}, {d(5), 1}})->indexes_epoch());
  const Flat list = stratified->epoch_indices(4, 2);
  for (std::size_t p = 0; p < list.size(); ++p)
    EXPECT_EQ(stratified->epoch_index(4, 2, p), list[p]);
}

TEST(Mixture, StratifiedBatchesHoldEachSourcesShareToWithinOne) {
  within(120s, [] {
    std::mt19937_64 rng(17);
    for (int t = 0; t < 40; ++t) {
      std::vector<MixtureSource> src;
      const std::size_t sources = 1 + rng() % 4;
      for (std::size_t k = 0; k < sources; ++k) {
        src.push_back({std::make_shared<IndexDataset>(1 + rng() % 30, kWidth),
                       static_cast<double>(1 + rng() % 9)});
      }
      const std::size_t epoch = 1 + rng() % 150;
      const int world = 1 + static_cast<int>(rng() % std::min<std::size_t>(3, epoch));
      const std::size_t batch = 1 + rng() % 12;
      MixtureOptions mo = epochs(epoch);
      mo.stratified = batch * static_cast<std::size_t>(world);
      const auto m = Mixture::open(src, mo);
      const auto plain = Mixture::open(src, epochs(epoch));
      EXPECT_TRUE(m->orders_epoch());
      EXPECT_NE(m->selection_key(), plain->selection_key());
      const std::uint64_t seed = rng() % 100;
      const std::uint64_t e = rng() % 5;
      // The same samples as unstratified, and the loader deals the list as it is.
      const Flat list = m->epoch_indices(seed, e);
      EXPECT_EQ(multiset(list), multiset(plain->epoch_indices(seed, e)));
      const std::size_t per_rank =
          (epoch + static_cast<std::size_t>(world) - 1) / static_cast<std::size_t>(world);
      std::map<std::uint64_t, std::size_t> got;
      for (int r = 0; r < world; ++r) {
        Loader loader(m, options(batch, true, seed, r, world));
        std::size_t k = 0;
        for (const Batch& b : loader.epoch(e)) {
          EXPECT_TRUE(holds_mixed(*m, b));
          for (std::size_t i = 0; i < b.size(); ++i) {
            // Position (k x batch + i) x world + r of the epoch, wrapping for the padding.
            const std::size_t p =
                ((k * batch + i) * static_cast<std::size_t>(world) + static_cast<std::size_t>(r)) %
                epoch;
            EXPECT_EQ(b.indices()[i], list[p]);
            ++got[b.indices()[i]];
          }
          // A full batch of the epoch (not the last, which padding may fill): each source's share
          // of it to within one.
          if ((k + 1) * batch * static_cast<std::size_t>(world) <= epoch) {
            std::vector<std::size_t> c(sources, 0);
            for (const auto i : b.indices()) ++c[m->source_of(i)];
            for (std::size_t s = 0; s < sources; ++s) {
              const double share = static_cast<double>(batch) *
                                   static_cast<double>(m->shares()[s]) / static_cast<double>(epoch);
              EXPECT_LE(std::abs(static_cast<double>(c[s]) - share), 1.0 + 1e-9)
                  << "source " << s << " batch " << k << " rank " << r << " of " << world << ": "
                  << c[s] << " for a share of " << share;
            }
          }
          ++k;
        }
        EXPECT_EQ(k, (per_rank + batch - 1) / batch);
      }
      // Over the epoch: exactly the shares (the padding aside).
      const std::size_t pad = per_rank * static_cast<std::size_t>(world) - epoch;
      Flat expected = list;
      expected.insert(expected.end(), list.begin(),
                      list.begin() + static_cast<std::ptrdiff_t>(pad));
      EXPECT_EQ(got, multiset(expected));
    }
  });
}

// Sample i: "tokens" i32 [L_i] with L_i in [1, 30], each token i; "y" i64 [] = i.
class Texts : public ferry::Dataset {
 public:
  explicit Texts(std::size_t n, std::int64_t salt) : n_(n), salt_(salt) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"y", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t) const override {
    return 1 + static_cast<std::int64_t>(
                   (index * 2654435761ULL + static_cast<std::uint64_t>(salt_)) % 30);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < length(index, 0); ++j) t[j] = static_cast<std::int32_t>(index);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }

 private:
  std::size_t n_;
  std::int64_t salt_;
};

// Texts that know their longest sample (Dataset::max_length), as a WebDataset does.
class DeclaredTexts : public Texts {
 public:
  DeclaredTexts(std::size_t n, std::int64_t salt, std::int64_t longest)
      : Texts(n, salt), longest_(longest) {}
  std::int64_t max_length(std::size_t /*field*/) const override { return longest_; }

 private:
  std::int64_t longest_;
};

// Writes the SampleRef's seed ("seed") and 1 to 3 tokens of its index ("tokens", ragged).
class Seeds : public ferry::Dataset {
 public:
  explicit Seeds(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"seed", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t) const override {
    return 1 + static_cast<std::int64_t>(index % 3);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    std::fill(t, t + length(index, 0), static_cast<std::int32_t>(index));
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(out.seed());
  }

 private:
  std::size_t n_;
};

TEST(Mixture, EachCopyOfARepeatedSampleHasItsOwnSeedWhateverTheBatchingRanksOrWorkers) {
  // 18 of the epoch's 24 samples from a source of 4 (each given 4 or 5 times), 6 of 10 from
  // the other.
  const auto m = Mixture::open({{std::make_shared<Seeds>(4), 3}, {std::make_shared<Seeds>(10), 1}},
                               epochs(24));
  using Pairs = std::multiset<std::pair<std::uint64_t, std::int64_t>>;
  const auto run = [&](LoaderOptions o) {
    Pairs got;
    Loader loader(m, o);
    for (const Batch& b : loader.epoch(3)) {
      const ferry::Tensor seed = b["seed"].cpu();
      for (std::size_t i = 0; i < b.size(); ++i) {
        got.emplace(b.indices()[i], seed.data<std::int64_t>()[i]);
      }
    }
    return got;
  };
  within(60s, [&] {
    LoaderOptions one = options(5, true, 9);
    one.workers = 1;
    const Pairs want = run(one);
    ASSERT_EQ(want.size(), 24U);
    // Each copy its own seed: as many seeds of a sample as it has copies.
    std::map<std::uint64_t, std::set<std::int64_t>> seeds;
    std::map<std::uint64_t, std::size_t> copies;
    for (const auto& [index, seed] : want) {
      seeds[index].insert(seed);
      ++copies[index];
    }
    for (const auto& [index, n] : copies) {
      EXPECT_EQ(seeds[index].size(), n) << "sample " << index << ": copies share a seed";
    }
    EXPECT_GE(copies[0], 4U);
    // Two ranks of batch 3, and dynamic batches under a token budget: the same seeds.
    Pairs ranks;
    for (int rank = 0; rank < 2; ++rank) {
      const Pairs part = run(options(3, true, 9, rank, 2));
      ranks.insert(part.begin(), part.end());
    }
    EXPECT_EQ(ranks, want);
    LoaderOptions budget = options(8, true, 9);
    budget.max_tokens = 6;
    budget.ragged = ferry::RaggedBatch::pack;
    EXPECT_EQ(run(budget), want);
  });
}

TEST(Mixture, MaxLengthIsTheSourcesLongestOrUnknownWhenASourceDoesNotKnowIt) {
  const auto known = Mixture::open({{std::make_shared<DeclaredTexts>(40, 0, 30), 1},
                                    {std::make_shared<DeclaredTexts>(9, 5, 44), 3}},
                                   epochs(64));
  EXPECT_EQ(known->max_length(0), 44);
  const auto nested =
      Mixture::open({{known, 1}, {std::make_shared<DeclaredTexts>(5, 1, 50), 1}}, epochs(20));
  EXPECT_EQ(nested->max_length(0), 50);
  const auto partly = Mixture::open(
      {{std::make_shared<DeclaredTexts>(40, 0, 30), 1}, {std::make_shared<Texts>(9, 5), 3}},
      epochs(64));
  EXPECT_EQ(partly->max_length(0), -1);
  // A loader over the declared mixture (no length asked when it is made) gives the batches, byte
  // for byte, of one over the same sources undeclared.
  const auto plain = Mixture::open(
      {{std::make_shared<Texts>(40, 0), 1}, {std::make_shared<Texts>(9, 5), 3}}, epochs(64));
  within(60s, [&] {
    std::vector<std::string> got[2];
    for (int k = 0; k < 2; ++k) {
      LoaderOptions o = options(16, true, 4);
      o.max_tokens = 120;
      o.ragged = ferry::RaggedBatch::pack;
      Loader loader(k == 0 ? known : plain, o);
      for (const Batch& b : loader.epoch(1)) {
        const ferry::Tensor t = b["tokens"].cpu();
        got[k].emplace_back(static_cast<const char*>(t.data()), t.nbytes());
        got[k].back() += std::to_string(b.size());
      }
    }
    EXPECT_GT(got[0].size(), 4U);
    EXPECT_EQ(got[0], got[1]);
  });
}

TEST(Mixture, RaggedFieldsUnderMaxTokens) {
  within(60s, [] {
    const auto m = Mixture::open(
        {{std::make_shared<Texts>(40, 0), 1}, {std::make_shared<Texts>(9, 5), 3}}, epochs(64));
    for (const auto mode : {ferry::RaggedBatch::pack, ferry::RaggedBatch::pad}) {
      LoaderOptions o = options(16, true, 4);
      o.max_tokens = 120;
      o.ragged = mode;
      Loader loader(m, o);
      std::map<std::uint64_t, std::size_t> got;
      for (const Batch& b : loader.epoch(1)) {
        const ferry::Tensor lengths = b.lengths("tokens").cpu();
        std::int64_t sum = 0, longest = 0;
        for (std::size_t i = 0; i < b.size(); ++i) {
          const std::uint64_t index = b.indices()[i];
          EXPECT_EQ(lengths.data<std::int64_t>()[i], m->length(index, 0));
          sum += lengths.data<std::int64_t>()[i];
          longest = std::max(longest, lengths.data<std::int64_t>()[i]);
          ++got[index];
        }
        const std::int64_t cost =
            mode == ferry::RaggedBatch::pack ? sum : static_cast<std::int64_t>(b.size()) * longest;
        EXPECT_TRUE(cost <= 120 || b.size() == 1);
      }
      EXPECT_EQ(got, multiset(m->epoch_indices(4, 1)));
      // Resumed elsewhere in the epoch with another budget.
      Loader first(m, o);
      ferry::Epoch ep = first.epoch(1);
      std::map<std::uint64_t, std::size_t> two;
      for (int k = 0; k < 2; ++k) {
        const Batch* b = ep.next();
        ASSERT_NE(b, nullptr);
        for (const auto i : b->indices()) ++two[i];
      }
      const LoaderState s = first.state();
      LoaderOptions o2 = o;
      o2.max_tokens = 90;
      Loader second(m, o2);
      for (const Batch& b : second.resume(s)) {
        for (const auto i : b.indices()) ++two[i];
      }
      EXPECT_EQ(two, got);
    }
  });
}

}  // namespace
