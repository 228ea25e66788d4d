// Elastic resume: a LoaderState taken on any rank of a W-rank job, between steps, resumes on W'
// ranks and with another batch_size in the same global order, every sample of the epoch
// arriving exactly once over the two runs but for the end-of-epoch padding; a state of another
// dataset size, shuffle setting or bucketed plan is refused.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "pipeline/sampler.hpp"

namespace {

using ferry::Batch;
using ferry::ConfigError;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::LoaderState;
using ferry::RaggedBatch;
using ferry::testing::cpu_options;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::within;
using namespace std::chrono_literals;
using Flat = std::vector<std::uint64_t>;

constexpr std::uint64_t kEpoch = 4;

// Sample i: "tokens" i32 [L_i], L_i in [1, 40]; "id" i64 [] = i.
class Texts : public ferry::Dataset {
 public:
  explicit Texts(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return 1 + static_cast<std::int64_t>((index * 2654435761ULL) % 40);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < length(index, 0); ++j) t[j] = static_cast<std::int32_t>(j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }

 private:
  std::size_t n_;
};

LoaderOptions ranked(LoaderOptions o, int rank, int world, std::size_t batch) {
  o.rank = rank;
  o.world_size = world;
  o.batch_size = batch;
  o.workers = 1;
  return o;
}

// A W-rank job runs `steps` steps of epoch kEpoch; every rank's state is returned (they must
// agree) and `delivered` gets the samples of every rank, per rank.
LoaderState run_steps(const std::shared_ptr<const ferry::Dataset>& ds, const LoaderOptions& o,
                      int world, std::size_t batch, std::size_t steps,
                      std::vector<Flat>& delivered) {
  std::vector<std::string> states;
  delivered.assign(static_cast<std::size_t>(world), {});
  for (int r = 0; r < world; ++r) {
    Loader loader(ds, ranked(o, r, world, batch));
    ferry::Epoch ep = loader.epoch(kEpoch);
    for (std::size_t k = 0; k < steps; ++k) {
      const Batch* b = ep.next();
      if (b == nullptr) {
        ADD_FAILURE() << "rank " << r << " ran out at step " << k;
        break;
      }
      delivered[static_cast<std::size_t>(r)].insert(delivered[static_cast<std::size_t>(r)].end(),
                                                    b->indices().begin(), b->indices().end());
    }
    states.push_back(loader.state().str());
  }
  for (const std::string& s : states) EXPECT_EQ(s, states[0]) << "ranks disagree";
  return LoaderState::parse(states[0]);
}

// The rest of the epoch on a W'-rank job resumed from `state`: each rank's samples. All ranks
// must get as many batches.
std::vector<Flat> resume_on(const std::shared_ptr<const ferry::Dataset>& ds, const LoaderOptions& o,
                            int world, std::size_t batch, const LoaderState& state) {
  std::vector<Flat> out(static_cast<std::size_t>(world));
  std::size_t batches = 0;
  for (int r = 0; r < world; ++r) {
    Loader loader(ds, ranked(o, r, world, batch));
    std::size_t count = 0;
    ferry::Epoch ep = loader.resume(state);
    const std::size_t size = ep.size();
    for (const Batch& b : ep) {
      if (o.max_tokens == 0) {
        EXPECT_TRUE(holds_its_samples(b, 5));
      }
      out[static_cast<std::size_t>(r)].insert(out[static_cast<std::size_t>(r)].end(),
                                              b.indices().begin(), b.indices().end());
      ++count;
    }
    EXPECT_EQ(count, size);
    if (r == 0) batches = count;
    EXPECT_EQ(count, batches) << "rank " << r << " of " << world;
    EXPECT_EQ(loader.state().position, state.samples);  // the epoch is consumed
  }
  return out;
}

std::map<std::uint64_t, int> counts(const std::vector<Flat>& a, const std::vector<Flat>& b) {
  std::map<std::uint64_t, int> c;
  for (const auto* runs : {&a, &b}) {
    for (const Flat& f : *runs) {
      for (const std::uint64_t i : f) ++c[i];
    }
  }
  return c;
}

TEST(LoaderElasticResume, TwoRanksResumeOnOneAndThreeInTheSameGlobalOrder) {
  constexpr std::size_t n = 1003;
  auto ds = std::make_shared<IndexDataset>(n, 5);
  const LoaderOptions o = cpu_options(16, true, 71);
  const ferry::detail::Permutation order = ferry::detail::epoch_permutation(n, 71, kEpoch);
  within(60s, [&] {
    std::vector<Flat> before;
    const LoaderState state = run_steps(ds, o, 2, 16, 5, before);
    EXPECT_EQ(state.position, 5U * 16U * 2U);
    EXPECT_EQ(state.next_batch, 5U);
    EXPECT_EQ(state.samples, n);
    EXPECT_TRUE(state.shuffle);
    EXPECT_EQ(state.epoch, kEpoch);
    // The job consumed exactly the order's first `position` samples, rank r every other one.
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t j = 0; j < before[r].size(); ++j) {
        ASSERT_EQ(before[r][j], order(j * 2 + r));
      }
    }
    for (const int world : {1, 3}) {
      for (const std::size_t batch : {16U, 7U, 50U}) {
        SCOPED_TRACE("world " + std::to_string(world) + " batch " + std::to_string(batch));
        const std::vector<Flat> after = resume_on(ds, o, world, batch, state);
        // Rank r' takes positions P + r', P + r' + W', ...; past the end, the epoch's first.
        const auto w = static_cast<std::size_t>(world);
        for (std::size_t r = 0; r < w; ++r) {
          for (std::size_t j = 0; j < after[r].size(); ++j) {
            ASSERT_EQ(after[r][j], order((state.position + j * w + r) % n));
          }
        }
        const auto seen = counts(before, after);
        ASSERT_EQ(seen.size(), n);  // nothing lost
        std::size_t extra = 0;
        for (const auto& [i, times] : seen) extra += static_cast<std::size_t>(times - 1);
        EXPECT_LT(extra, w);  // repeated: only the last step's padding
      }
    }
  });
}

TEST(LoaderElasticResume, TheSameShapeResumesAsTheUninterruptedRun) {
  auto ds = std::make_shared<IndexDataset>(500, 5);
  const LoaderOptions o = cpu_options(8, true, 3);
  within(60s, [&] {
    std::vector<Flat> before;
    const LoaderState state = run_steps(ds, o, 3, 8, 4, before);
    for (int r = 0; r < 3; ++r) {
      Loader whole(ds, ranked(o, r, 3, 8));
      Loader resumed(ds, ranked(o, r, 3, 8));
      std::vector<std::pair<std::size_t, Flat>> a, b;
      for (const Batch& x : whole.epoch(kEpoch, 4))
        a.emplace_back(x.number(), Flat(x.indices().begin(), x.indices().end()));
      for (const Batch& x : resumed.resume(state))
        b.emplace_back(x.number(), Flat(x.indices().begin(), x.indices().end()));
      EXPECT_EQ(a, b) << "rank " << r;  // numbers and padding included
      EXPECT_EQ(resumed.state(), whole.state());
    }
  });
}

TEST(LoaderElasticResume, DynamicBatchesResumeOnOtherWorldSizesAndBatchSizes) {
  constexpr std::size_t n = 307;
  auto ds = std::make_shared<Texts>(n);
  for (const std::size_t window : {0U, 64U}) {
    LoaderOptions o = cpu_options(16, true, 9);
    o.ragged = RaggedBatch::pack;
    o.max_tokens = 150;
    o.bucket_window = window;
    within(60s, [&] {
      std::vector<Flat> before;
      const LoaderState state = run_steps(ds, o, 2, 16, 6, before);
      EXPECT_GT(state.position, 0U);
      EXPECT_LT(state.position, n);
      EXPECT_EQ(state.plan == 0, window == 0);
      // Without bucketing the position is a prefix of the order: any batch_size resumes it.
      for (const int world : {1, 3}) {
        for (const std::size_t batch :
             window == 0 ? std::vector<std::size_t>{16, 5} : std::vector<std::size_t>{16}) {
          SCOPED_TRACE("window " + std::to_string(window) + " world " + std::to_string(world) +
                       " batch " + std::to_string(batch));
          const std::vector<Flat> after = resume_on(ds, o, world, batch, state);
          const auto seen = counts(before, after);
          ASSERT_EQ(seen.size(), n);
          std::size_t extra = 0;
          for (const auto& [i, times] : seen) extra += static_cast<std::size_t>(times - 1);
          // Padding: at most W' - 1 repeated batches.
          EXPECT_LE(extra, (static_cast<std::size_t>(world) - 1) * batch);
          if (world == 1) {
            EXPECT_EQ(extra, 0U);
          }
        }
      }
      if (window != 0) {
        // A bucketed epoch's batches depend on batch_size: another one cannot continue it.
        Loader other(ds, ranked(o, 0, 3, 5));
        EXPECT_THROW((void)other.resume(state), ConfigError);
      }
    });
  }
}

TEST(LoaderElasticResume, RefusesAStateOfAnotherOrder) {
  auto ds = std::make_shared<IndexDataset>(100, 5);
  const LoaderOptions o = cpu_options(10, true, 5);
  std::vector<Flat> before;
  const LoaderState state = run_steps(ds, o, 2, 10, 2, before);
  const auto refused = [&](const std::shared_ptr<const ferry::Dataset>& d, const LoaderOptions& x,
                           const LoaderState& s, const std::string& names) {
    Loader loader(d, x);
    try {
      (void)loader.resume(s);
      ADD_FAILURE() << "accepted " << s.str();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
    }
  };
  refused(std::make_shared<IndexDataset>(101, 5), o, state, "dataset of 100 samples");
  LoaderOptions unshuffled = o;
  unshuffled.shuffle = false;
  refused(ds, unshuffled, state, "shuffle on");
  LoaderOptions seeded = o;
  seeded.seed = 6;
  refused(ds, seeded, state, "seed 5");
  LoaderState past = state;
  past.position = 101;
  refused(ds, o, past, "position 101");
  LoaderState planned = state;
  planned.plan = 42;
  refused(ds, o, planned, "plan 42");
  // The epoch's end resumes as an empty epoch.
  LoaderState end = state;
  end.position = 100;
  Loader loader(ds, o);
  ferry::Epoch ep = loader.resume(end);
  EXPECT_EQ(ep.size(), 0U);
  EXPECT_EQ(ep.next(), nullptr);
}

}  // namespace
