// Autotune (LoaderOptions::autotune) and the memory budget (LoaderOptions::memory_budget): the
// loader's memory never exceeds the budget, every sample arrives exactly once and the batches
// are the same bytes as under a fixed setting while workers and slots change mid-epoch, a run
// resumes under autotune, a budget too small for the smallest pipeline is refused, and the
// choices move the right way for an input-bound and a compute-bound consumer (directions, not
// timings).

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::testing::collect;
using ferry::testing::holds_its_samples;
using ferry::testing::IndexDataset;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

int cores() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// IndexDataset whose reads take `delay` microseconds (sleeping, as I/O does); the delay can
// change while the loader runs.
class SlowDataset : public IndexDataset {
 public:
  SlowDataset(std::size_t n, std::int64_t width, int delay_us)
      : IndexDataset(n, width), delay_us_(delay_us) {}
  void read(std::size_t index, ferry::SampleRef out) const override {
    const int d = delay_us_.load(std::memory_order_relaxed);
    if (d > 0) std::this_thread::sleep_for(std::chrono::microseconds(d));
    IndexDataset::read(index, out);
  }
  void set_delay(int us) const { delay_us_.store(us); }

 private:
  mutable std::atomic<int> delay_us_;
};

// Sample i: "tokens" i32 [i % 9 + 1] with token j = i * 100 + j; "label" i64 [] = i.
class RaggedDataset : public ferry::Dataset {
 public:
  explicit RaggedDataset(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"label", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t) const override { return rows(index); }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < rows(index); ++j) {
      t[j] = static_cast<std::int32_t>(static_cast<std::int64_t>(index) * 100 + j);
    }
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
  static std::int64_t rows(std::size_t i) { return static_cast<std::int64_t>(i % 9 + 1); }

 private:
  std::size_t n_;
};

// Spins (a CPU-bound training step) for `d`.
void spin(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Each batch as bytes: its indices, then every field's tensor.
std::vector<std::vector<std::uint8_t>> epoch_bytes(Loader& loader, std::uint64_t epoch,
                                                   const std::vector<FieldSpec>& fields) {
  std::vector<std::vector<std::uint8_t>> out;
  for (const Batch& b : loader.epoch(epoch)) {
    std::vector<std::uint8_t>& bytes = out.emplace_back();
    const auto* ix = reinterpret_cast<const std::uint8_t*>(b.indices().data());
    bytes.insert(bytes.end(), ix, ix + b.indices().size_bytes());
    for (const FieldSpec& f : fields) {
      const ferry::Tensor t = b[f.name].cpu();
      const auto* p = static_cast<const std::uint8_t*>(t.data());
      bytes.insert(bytes.end(), p, p + t.nbytes());
    }
  }
  return out;
}

LoaderOptions tuned(std::size_t batch, std::uint64_t budget = 0) {
  LoaderOptions o = ferry::testing::cpu_options(batch, /*shuffle=*/true, /*seed=*/7);
  o.autotune = true;
  o.memory_budget = budget;
  o.workers = 1;
  o.prefetch = 2;
  return o;
}

// The smallest budget the loader accepts, read from the ConfigError's "needs N bytes".
std::uint64_t smallest_budget(const std::shared_ptr<const ferry::Dataset>& ds, LoaderOptions o,
                              bool copy_stage) {
  o.memory_budget = 1;
  try {
    static_cast<void>(make_loader(ds, o, copy_stage));
  } catch (const ferry::ConfigError& e) {
    const std::string what = e.what();
    const auto at = what.find("needs ");
    EXPECT_NE(at, std::string::npos) << what;
    return std::stoull(what.substr(at + 6));
  }
  ADD_FAILURE() << "a budget of 1 byte was accepted";
  return 0;
}

TEST(LoaderAutotune, OffChangesNothingAndReportsTheFixedChoice) {
  auto ds = std::make_shared<IndexDataset>(100);
  LoaderOptions o = ferry::testing::cpu_options(8);
  o.workers = 3;
  o.prefetch = 5;
  o.autotune = false;
  Loader loader(ds, o);
  EXPECT_EQ(collect(loader, 0).size(), 13U);
  const ferry::LoaderStats s = loader.stats();
  EXPECT_EQ(s.workers, 3);
  EXPECT_EQ(s.prefetch, 5);
  EXPECT_EQ(s.staging_allocations, 5U);
  EXPECT_FALSE(s.autotune);
  EXPECT_TRUE(s.autotune_decisions.empty());
  EXPECT_GT(s.memory_bytes, 0U);
  EXPECT_EQ(s.summary().find("autotune"), std::string::npos);
  // A budget that holds exactly what the options ask for is accepted, one byte less is not.
  o.memory_budget = s.memory_bytes;
  EXPECT_NO_THROW(Loader(ds, o));
  o.memory_budget = s.memory_bytes - 1;
  try {
    Loader refused(ds, o);
    ADD_FAILURE() << "a budget below the options' needs was accepted";
  } catch (const ferry::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(s.memory_bytes) + " bytes"),
              std::string::npos)
        << e.what();
  }
}

// IndexDataset that holds memory of its own for the loader's reads (as a Python dataset's worker
// processes do): three samples' worth and 12,345 bytes; it keeps the sample size it was told.
class HoldingDataset : public IndexDataset {
 public:
  using IndexDataset::IndexDataset;
  std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept override {
    told_.store(sample_bytes);
    return 3 * sample_bytes + 12345;
  }
  std::uint64_t told() const { return told_.load(); }

 private:
  mutable std::atomic<std::uint64_t> told_{0};
};

// What a dataset holds for its reads (Dataset::reader_memory) counts in memory_bytes and in the
// budget, with and without autotune, and a Mixture's sources' add up.
TEST(LoaderAutotune, TheDatasetsOwnMemoryCountsInTheBudget) {
  for (const bool autotune : {false, true}) {
    LoaderOptions o = ferry::testing::cpu_options(8);
    o.workers = 2;
    o.prefetch = 3;
    o.autotune = autotune;
    const auto plain = std::make_shared<IndexDataset>(100);
    const auto holding = std::make_shared<HoldingDataset>(100);
    const std::uint64_t base = Loader(plain, o).stats().memory_bytes;
    Loader loader(holding, o);
    // A sample as the loader lays it out: at least its fields' bytes (x u8 [13], y i64, z f32
    // [2]).
    const std::uint64_t sample = holding->told();
    EXPECT_GE(sample, 13U + 8U + 8U);
    const std::uint64_t held = 3 * sample + 12345;
    EXPECT_EQ(loader.stats().memory_bytes, base + held) << autotune;
    EXPECT_EQ(collect(loader, 0).size(), 13U);
    if (!autotune) {
      EXPECT_EQ(loader.stats().memory_bytes, base + held);
    }
    // A budget that holds the loader's own memory but not the dataset's is refused, naming it:
    // what the options ask for, or (autotune, which starts smaller where it must) the smallest
    // pipeline.
    const std::uint64_t need = (autotune ? smallest_budget(plain, o, false) : base) + held;
    o.memory_budget = need - 1;
    try {
      Loader refused(holding, o);
      ADD_FAILURE() << "a budget without room for the dataset's memory was accepted";
    } catch (const ferry::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(held) + " held by the dataset's reads"),
                std::string::npos)
          << e.what();
    }
    o.memory_budget = need;
    EXPECT_NO_THROW(Loader(holding, o));
    o.memory_budget = 0;
    const auto other = std::make_shared<HoldingDataset>(50);
    const auto two = ferry::Mixture::open({{holding, 1}, {other, 1}});
    const auto two_plain =
        ferry::Mixture::open({{plain, 1}, {std::make_shared<IndexDataset>(50), 1}});
    const std::uint64_t mixed = Loader(two, o).stats().memory_bytes;
    // Both sources are asked with the mixture's sample as laid out.
    EXPECT_EQ(other->told(), holding->told());
    EXPECT_EQ(mixed, Loader(two_plain, o).stats().memory_bytes + 2 * (3 * holding->told() + 12345));
  }
}

// Autotune is the default, and so is its budget: an eighth of the memory (physical, or the
// cgroup's limit where lower), or what the starting options need where that is more.
TEST(LoaderAutotune, IsOnByDefaultWithADefaultBudget) {
  EXPECT_TRUE(LoaderOptions{}.autotune);
  const std::uint64_t physical = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                                 static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t budget = ferry::default_memory_budget();
  EXPECT_GT(budget, 0U);
  EXPECT_LE(budget, physical / 8);
  auto ds = std::make_shared<IndexDataset>(100);
  LoaderOptions o = ferry::testing::cpu_options(8);
  Loader loader(ds, o);
  EXPECT_EQ(collect(loader, 0).size(), 13U);
  const ferry::LoaderStats s = loader.stats();
  EXPECT_TRUE(s.autotune);
  EXPECT_EQ(s.memory_budget, budget);
  EXPECT_LE(s.memory_bytes, s.memory_budget);
  EXPECT_NE(s.summary().find(" MiB budget"), std::string::npos) << s.summary();
  // A budget given is the budget kept to; without autotune and without a budget, there is none.
  o.memory_budget = 1 << 20;
  EXPECT_EQ(Loader(ds, o).stats().memory_budget, 1U << 20);
  o.memory_budget = 0;
  o.autotune = false;
  EXPECT_EQ(Loader(ds, o).stats().memory_budget, 0U);
}

TEST(LoaderAutotune, ABudgetBelowTheSmallestPipelineIsAConfigErrorSayingWhatItNeeds) {
  auto ds = std::make_shared<IndexDataset>(64, 1000);
  for (const bool copy : {false, true}) {
    const std::uint64_t need = smallest_budget(ds, tuned(16), copy);
    ASSERT_GT(need, 16U * 1000U);  // at least one slot of 16 samples of 1000 bytes
    LoaderOptions o = tuned(16, need - 1);
    EXPECT_THROW(make_loader(ds, o, copy), ferry::ConfigError);
    o.memory_budget = need;
    Loader loader = make_loader(ds, o, copy);  // the smallest pipeline runs
    std::size_t samples = 0;
    for (const Batch& b : loader.epoch(0)) {
      EXPECT_TRUE(holds_its_samples(b, 1000));
      EXPECT_LE(loader.stats().memory_bytes, need);
      samples += b.size();
    }
    EXPECT_EQ(samples, 64U);
    EXPECT_EQ(loader.stats().staging_allocations, 1U);
  }
  // A copy stage's device buffers count: its smallest pipeline needs more.
  EXPECT_GT(smallest_budget(ds, tuned(16), true), smallest_budget(ds, tuned(16), false));
}

// memory_bytes, sampled after every batch, never exceeds the budget: big samples, the copy
// stage, a ragged dataset, many epochs, while the tuner raises slots and workers (slow reads).
TEST(LoaderAutotune, TheBudgetHoldsAfterEveryBatch) {
  within(300s, [] {
    struct Case {
      std::shared_ptr<const ferry::Dataset> ds;
      bool copy;
      bool index;  // IndexDataset: bytes checked
    };
    auto big = std::make_shared<SlowDataset>(400, 64 * 1024, 300);  // 64 KiB samples
    // Two epochs under TSan (test_util.hpp): the tuner has moved by the second.
    constexpr std::uint64_t kEpochs = ferry::testing::scaled_for_tsan<std::uint64_t>(4, 2);
    const std::vector<Case> cases = {{big, false, true},
                                     {big, true, true},
                                     {std::make_shared<RaggedDataset>(500), false, false},
                                     {std::make_shared<RaggedDataset>(500), true, false}};
    for (const Case& c : cases) {
      LoaderOptions o = tuned(8);
      const std::uint64_t least = smallest_budget(c.ds, o, c.copy);
      // Room for the smallest pipeline and two more slots' worth: the tuner must stop there.
      o.memory_budget = least + 2 * (least / 2);
      Loader loader = make_loader(c.ds, o, c.copy);
      std::uint64_t peak = 0;
      std::size_t samples = 0;
      for (std::uint64_t e = 0; e < kEpochs; ++e) {
        for (const Batch& b : loader.epoch(e)) {
          if (c.index) {
            EXPECT_TRUE(holds_its_samples(b, 64 * 1024));
          }
          samples += b.size();
          const std::uint64_t now = loader.stats().memory_bytes;
          ASSERT_LE(now, o.memory_budget) << "batch " << b.number() << " of epoch " << e;
          peak = std::max(peak, now);
        }
      }
      EXPECT_EQ(samples, kEpochs * c.ds->size());
      EXPECT_LE(peak, o.memory_budget);
      const ferry::LoaderStats s = loader.stats();
      EXPECT_LE(s.memory_bytes, o.memory_budget);
      EXPECT_GE(s.prefetch, 1);
      EXPECT_GE(s.workers, 1);
    }
  });
}

// Workers and slots change mid-epoch (reads that turn slow and fast again, a consumer that
// slows down and speeds up): still every sample once, and the same bytes as a fixed setting.
TEST(LoaderAutotune, SameBatchesByteForByteWhileChoicesChange) {
  within(300s, [] {
    auto ds = std::make_shared<SlowDataset>(1500, 32, 0);
    LoaderOptions fixed = ferry::testing::cpu_options(10, /*shuffle=*/true, /*seed=*/3);
    fixed.workers = 1;
    fixed.prefetch = 2;
    Loader reference(ds, fixed);
    const auto expected0 = epoch_bytes(reference, 0, ds->fields());
    const auto expected1 = epoch_bytes(reference, 1, ds->fields());

    LoaderOptions o = tuned(10);
    o.seed = 3;
    o.workers = std::min(2, cores());
    o.prefetch = 4;
    Loader loader(ds, o);
    for (std::uint64_t e = 0; e < 2; ++e) {
      std::vector<std::vector<std::uint8_t>> got;
      std::vector<std::uint64_t> seen;
      std::size_t k = 0;
      for (const Batch& b : loader.epoch(e)) {
        // Phases of 30 batches: slow reads and a fast consumer, then fast reads and a slow one.
        const bool input_bound = (k / 30) % 2 == 0;
        ds->set_delay(input_bound ? 400 : 0);
        if (!input_bound) spin(2ms);
        std::vector<std::uint8_t>& bytes = got.emplace_back();
        const auto* ix = reinterpret_cast<const std::uint8_t*>(b.indices().data());
        bytes.insert(bytes.end(), ix, ix + b.indices().size_bytes());
        for (const FieldSpec& f : ds->fields()) {
          const auto* p = static_cast<const std::uint8_t*>(b[f.name].data());
          bytes.insert(bytes.end(), p, p + b[f.name].nbytes());
        }
        seen.insert(seen.end(), b.indices().begin(), b.indices().end());
        ++k;
      }
      std::sort(seen.begin(), seen.end());
      ASSERT_EQ(seen.size(), ds->size());
      for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i);
      EXPECT_EQ(got, e == 0 ? expected0 : expected1) << "epoch " << e;
    }
    ds->set_delay(0);
    // The tuner did change something on the way.
    EXPECT_FALSE(loader.stats().autotune_decisions.empty());
  });
}

TEST(LoaderAutotune, ResumesMidEpochUnderAutotune) {
  within(120s, [] {
    auto ds = std::make_shared<SlowDataset>(600, 13, 100);
    LoaderOptions o = tuned(8);
    o.seed = 11;
    Loader whole_loader(ds, o);
    const Order whole = collect(whole_loader, 2);
    ferry::LoaderState saved;
    {
      Loader interrupted(ds, o);
      ferry::Epoch ep = interrupted.epoch(2);
      for (int i = 0; i < 31; ++i) ASSERT_NE(ep.next(), nullptr);
      saved = interrupted.state();
    }
    Loader resumed(ds, o);
    Order rest;
    for (const Batch& b : resumed.resume(saved)) {
      EXPECT_TRUE(holds_its_samples(b));
      rest.emplace_back(b.indices().begin(), b.indices().end());
    }
    EXPECT_EQ(rest, Order(whole.begin() + 31, whole.end()));
  });
}

// Slow reads and a consumer that takes no time: more workers (up to the cores) or deeper
// prefetch, never less.
TEST(LoaderAutotune, AnInputBoundConsumerGetsMoreWorkersOrSlots) {
  if (cores() < 2) GTEST_SKIP() << "one core: there is no worker to add";
  within(120s, [] {
    auto ds = std::make_shared<SlowDataset>(3000, 13, 500);
    LoaderOptions o = tuned(4);
    Loader loader(ds, o);
    for (const Batch& b : loader.epoch(0)) {
      static_cast<void>(b);
      if (loader.stats().batches >= 200) break;
    }
    const ferry::LoaderStats s = loader.stats();
    EXPECT_GT(s.workers + s.prefetch, o.workers + o.prefetch) << s.summary();
    std::size_t lowered = 0, raised = 0;
    std::string all;
    for (const ferry::AutotuneDecision& d : s.autotune_decisions) {
      (d.reason.rfind("raised", 0) == 0 ? raised : lowered) += 1;
      all += d.reason + "\n";
    }
    EXPECT_GT(raised, lowered) << all;
    EXPECT_NE(s.summary().find("autotune: "), std::string::npos) << s.summary();
    EXPECT_LE(s.workers, std::max(cores(), o.workers));
  });
}

// Epochs shorter than a tuning window (8 batches against its 16), with a pause between them
// longer than an epoch (evaluation, checkpoints): the window spans epochs, so an input-bound
// consumer still gets a raise; and the pause is not in it, so the consumer's wait is not
// diluted by time the loader was not asked for anything.
TEST(LoaderAutotune, WindowsSpanEpochsShorterThanAWindowWithoutTheGapsBetweenThem) {
  within(120s, [] {
    auto ds = std::make_shared<SlowDataset>(32, 13, 1000);
    LoaderOptions o = tuned(4);
    o.shuffle = false;
    Loader loader(ds, o);
    std::vector<std::uint64_t> seen;
    for (std::uint64_t e = 0; e < 16; ++e) {
      seen.clear();
      for (const Batch& b : loader.epoch(e)) {
        EXPECT_TRUE(holds_its_samples(b));
        seen.insert(seen.end(), b.indices().begin(), b.indices().end());
      }
      ASSERT_EQ(seen.size(), 32U);
      for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], i) << "epoch " << e;
      std::this_thread::sleep_for(300ms);
    }
    const ferry::LoaderStats s = loader.stats();
    std::string all;
    std::size_t raised = 0;
    for (const ferry::AutotuneDecision& d : s.autotune_decisions) {
      if (d.reason.rfind("raised", 0) == 0) ++raised;
      all += "batch " + std::to_string(d.batch) + ": " + d.reason + "\n";
    }
    EXPECT_GE(raised, 1U) << s.summary() << "\n" << all;
  });
}

// Fast reads and a consumer that spins per batch (CPU training): workers and slots in use are
// given back (raises only as trials, undone), and the slots' memory is freed.
TEST(LoaderAutotune, AComputeBoundConsumerGivesBackWorkersAndSlots) {
  within(120s, [] {
    auto ds = std::make_shared<IndexDataset>(4000);
    LoaderOptions o = tuned(4);
    o.workers = 2;
    o.prefetch = 6;
    Loader loader(ds, o);
    std::uint64_t peak = 0, least_later = UINT64_MAX;
    for (const Batch& b : loader.epoch(0)) {
      EXPECT_TRUE(holds_its_samples(b));
      spin(4ms);
      const ferry::LoaderStats now = loader.stats();
      peak = std::max(peak, now.memory_bytes);
      if (now.batches >= 100) least_later = std::min(least_later, now.memory_bytes);
      if (now.batches >= 250) break;
    }
    const ferry::LoaderStats s = loader.stats();
    std::string decisions;
    for (const ferry::AutotuneDecision& d : s.autotune_decisions) {
      decisions += "batch " + std::to_string(d.batch) + ": " + d.reason + "\n";
    }
    // A worker was given back, and slots. (The end may find a raise on trial: a loaded machine
    // can stall a worker long enough for two windows to see the consumer wait; the trial undoes
    // it when batches come no faster. A stall at the start may even make a raise that is kept,
    // with its slots as a floor that idle windows lower one by one: slots given back are counted
    // from whatever the setting was before each decision, not from the options.)
    int least_workers = o.workers;
    int prefetch_before = o.prefetch;
    std::size_t slots_given_back = 0;
    for (const ferry::AutotuneDecision& d : s.autotune_decisions) {
      least_workers = std::min(least_workers, d.workers);
      if (d.reason.rfind("lowered", 0) == 0 && d.prefetch < prefetch_before) ++slots_given_back;
      prefetch_before = d.prefetch;
    }
    EXPECT_EQ(least_workers, 1) << s.summary() << "\n" << decisions;
    EXPECT_GE(slots_given_back, 1U) << decisions;
    // The slots given back were freed: the memory went down from its peak (six slots made).
    EXPECT_LT(least_later, peak) << decisions;
    // Mostly lowering: raises are trials, each undone (a decision too) when it did not help.
    std::size_t lowered = 0, raised = 0, undone = 0;
    for (const ferry::AutotuneDecision& d : s.autotune_decisions) {
      if (d.reason.rfind("lowered", 0) == 0) {
        ++lowered;
      } else if (d.reason.rfind("undid", 0) == 0) {
        ++undone;
      } else {
        ++raised;
      }
    }
    EXPECT_GT(lowered, raised) << decisions;
    EXPECT_LE(undone, raised) << decisions;
    EXPECT_NE(s.summary().find("autotune: "), std::string::npos) << s.summary();
  });
}

}  // namespace
