// Epoch plans window by window (EpochPlan, for max_tokens and bucket_window): the heap a plan of
// 10^7 samples holds stays within a bound that does not grow with the epoch, batches never
// cross a planning window, every sample is dealt exactly once across the ranks (padding
// aside), and runs resumed mid-epoch, on the same or another world size and batch size,
// continue the epoch exactly.

#include "pipeline/epoch_plan.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "ferry/mixture.hpp"
#include "pipeline/sampler.hpp"
#include "test_util.hpp"

namespace {

// The heap live now and its peak since reset, counted by the operator new below.
std::atomic<std::uint64_t> g_live{0};
std::atomic<std::uint64_t> g_peak{0};
constexpr std::size_t kHeader = alignof(std::max_align_t);

void* counted_new(std::size_t n) {
  void* p = std::malloc(n + kHeader);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const std::uint64_t live = g_live.fetch_add(n) + n;
  std::uint64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kHeader;
}

void counted_delete(void* p) noexcept {
  if (p == nullptr) return;
  void* block = static_cast<char*>(p) - kHeader;
  g_live.fetch_sub(*static_cast<std::size_t*>(block));
  std::free(block);
}

}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t /*n*/) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t /*n*/) noexcept { counted_delete(p); }
// The nothrow forms too (std::stable_sort's buffer): under ASan they would otherwise be the
// sanitizer's own, and their blocks come back through the delete above.
void* operator new(std::size_t n, const std::nothrow_t& /*tag*/) noexcept {
  try {
    return counted_new(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& tag) noexcept {
  return operator new(n, tag);
}
void operator delete(void* p, const std::nothrow_t& /*tag*/) noexcept { counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t& /*tag*/) noexcept { counted_delete(p); }

namespace {

using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::detail::EpochPlan;
using Batches = std::vector<std::vector<std::uint64_t>>;

constexpr std::size_t kWindow = EpochPlan::kWindow;

// Lengths only (1 to 120, uneven, from a hash of the index); counts the lengths asked.
class Lengths : public ferry::Dataset {
 public:
  explicit Lengths(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"tokens", ferry::DType::i32, {ferry::ragged}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    asked.fetch_add(1, std::memory_order_relaxed);
    return len(index);
  }
  void read(std::size_t /*index*/, ferry::SampleRef /*out*/) const override {}
  static std::int64_t len(std::uint64_t i) {
    const std::uint64_t h = ferry::detail::mix64(i) % 1000;
    return h < 700 ? 1 + static_cast<std::int64_t>(h % 20)
                   : 20 + static_cast<std::int64_t>(h % 101);
  }
  mutable std::atomic<std::uint64_t> asked{0};

 private:
  std::size_t n_;
};

LoaderOptions budget(std::size_t batch_size, int world = 1, int rank = 0) {
  LoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = true;
  o.seed = 11;
  o.ragged = RaggedBatch::pack;
  o.max_tokens = 700;
  o.world_size = world;
  o.rank = rank;
  o.device = ferry::Device::cpu();
  return o;
}

Batches all_batches(EpochPlan& plan) {
  Batches out(plan.batches());
  for (std::size_t k = 0; k < out.size(); ++k) plan.batch(k, out[k]);
  return out;
}

// The epoch's order: position p's dataset index, as the sampler has it.
std::vector<std::uint64_t> epoch_order(const ferry::Dataset& d, const LoaderOptions& o,
                                       std::uint64_t epoch) {
  const ferry::detail::Sampler s(d.size(), {1, o.shuffle, o.seed, false, 0, 1});
  const auto order = s.order(epoch);
  std::vector<std::uint64_t> out(d.size());
  for (std::size_t p = 0; p < out.size(); ++p) out[p] = order(p);
  return out;
}

std::uint64_t tokens(const std::vector<std::uint64_t>& batch) {
  std::uint64_t sum = 0;
  for (const std::uint64_t i : batch) sum += static_cast<std::uint64_t>(Lengths::len(i));
  return sum;
}

TEST(EpochPlan, TenMillionSamplesPlanInABoundedHeap) {
  // 10^7 samples: planned whole, the epoch would take 16 bytes a sample (160 MB) while planning
  // and 8 kept. Window by window, the plan holds the windows being planned (16 bytes a sample
  // of each; two at once here, one per worker), a count per window and a position per batch of
  // this rank: about 3 MB here, whatever the epoch.
  // A quarter under TSan (test_util.hpp): a list of the epoch would still pass the bound 5 times.
  constexpr std::size_t kSamples = ferry::testing::scaled_for_tsan<std::size_t>(10'000'000, 4);
  constexpr std::uint64_t kBound = 4'000'000;  // bytes
  const Lengths data(kSamples);
  LoaderOptions o = budget(256, 4, 1);
  o.max_tokens = 8192;
  o.workers = 2;  // windows planned two at a time
  {
    // oneTBB's own state, made once for the process and kept: made before counting.
    const Lengths warm(3 * kWindow);
    const EpochPlan plan(warm, 0, o, 0);
  }
  const std::uint64_t before = g_live.load();
  g_peak.store(before);
  std::uint64_t samples = 0;
  std::size_t batches = 0;
  std::uint64_t over = 0;
  {
    EpochPlan plan(data, 0, o, 2);
    batches = plan.batches();
    std::vector<std::uint64_t> batch;
    for (std::size_t k = 0; k < batches; ++k) {
      plan.batch(k, batch);
      samples += batch.size();
      if (batch.size() > 1 && tokens(batch) > o.max_tokens) ++over;
    }
  }
  const std::uint64_t peak = g_peak.load() - before;
  EXPECT_LT(peak, kBound) << "the plan's heap grows with the epoch";
  EXPECT_EQ(g_live.load(), before) << "the plan leaked";
  EXPECT_EQ(over, 0U);
  // Rank 1 of 4 gets a quarter of the global batches (rounded up), so about a quarter of the
  // samples; the lengths were asked twice (the counting walk, then the windows of its batches,
  // and the first window once more when the last batch wraps around to it).
  EXPECT_GE(batches, kSamples / 256 / 4);
  EXPECT_GT(samples, kSamples / 4 * 9 / 10);
  EXPECT_LT(samples, kSamples / 4 * 11 / 10);
  EXPECT_GE(data.asked.load(), 2 * kSamples);
  EXPECT_LE(data.asked.load(), 2 * kSamples + kWindow);
}

TEST(EpochPlan, WindowsCountedOnSeveralThreadsGiveThePlanOfOne) {
  const std::size_t n = 5 * kWindow + 777;
  const Lengths data(n);
  for (const std::size_t bucket : {std::size_t{0}, std::size_t{5000}}) {
    for (const std::uint64_t start : {std::uint64_t{0}, std::uint64_t{kWindow + 3}}) {
      if (bucket != 0 && start != 0) continue;  // a bucketed plan resumes at batch ends only
      SCOPED_TRACE("bucket_window " + std::to_string(bucket) + ", start " + std::to_string(start));
      std::vector<Batches> plans;
      std::vector<std::vector<std::uint64_t>> afters;
      for (const int workers : {1, 2, 3}) {
        LoaderOptions o = budget(64, 3, 2);
        o.bucket_window = bucket;
        o.workers = workers;
        EpochPlan plan(data, 0, o, 4, start);
        plans.push_back(all_batches(plan));
        afters.emplace_back();
        for (std::size_t k = 0; k <= plan.batches(); ++k) {
          afters.back().push_back(plan.position_after(k));
        }
        afters.back().push_back(plan.number_offset());
        afters.back().push_back(plan.global_batches());
      }
      EXPECT_GT(plans[0].size(), 100U);
      EXPECT_EQ(plans[1], plans[0]);
      EXPECT_EQ(plans[2], plans[0]);
      EXPECT_EQ(afters[1], afters[0]);
      EXPECT_EQ(afters[2], afters[0]);
    }
  }
}

TEST(EpochPlan, BatchesFollowTheOrderAndNeverCrossAWindow) {
  const std::size_t n = 3 * kWindow + 1234;
  const Lengths data(n);
  const LoaderOptions o = budget(64);
  EpochPlan plan(data, 0, o, 5);
  const Batches batches = all_batches(plan);
  EXPECT_EQ(plan.global_batches(), batches.size());
  const std::vector<std::uint64_t> order = epoch_order(data, o, 5);
  std::size_t at = 0;
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const auto& b = batches[k];
    ASSERT_FALSE(b.empty());
    ASSERT_LE(b.size(), 64U);
    if (b.size() > 1) {
      EXPECT_LE(tokens(b), o.max_tokens) << "batch " << k;
    }
    // Consecutive positions of the order, within one window.
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], order[at + i]) << "batch " << k;
    EXPECT_EQ(at / kWindow, (at + b.size() - 1) / kWindow) << "batch " << k << " crosses";
    // Full: the next sample of the window would break the budget or batch_size.
    const std::size_t end = at + b.size();
    if (end < n && end % kWindow != 0 && b.size() < 64) {
      auto more = b;
      more.push_back(order[end]);
      EXPECT_GT(tokens(more), o.max_tokens) << "batch " << k << " is not full";
    }
    at = end;
    EXPECT_EQ(plan.position_after(k + 1), at);
  }
  EXPECT_EQ(at, n);
}

TEST(EpochPlan, ABucketWindowNearTheTopOfSizeTIsTheWholeEpoch) {
  // A window longer than the epoch buckets the whole epoch: every sample once, never an empty
  // epoch from a window end that overflows.
  const std::size_t n = 1000;
  const auto data = std::make_shared<Lengths>(n);
  const std::size_t top = std::numeric_limits<std::size_t>::max();
  for (const std::size_t window : {top, top - 1, top - 999, top / 2 + 1, n + 1, n}) {
    for (const bool shuffle : {true, false}) {
      LoaderOptions o = budget(32);
      o.bucket_window = window;
      o.shuffle = shuffle;
      o.workers = 2;
      EpochPlan plan(*data, 0, o, 2);
      std::vector<std::size_t> seen(n, 0);
      for (const auto& b : all_batches(plan)) {
        for (const std::uint64_t i : b) ++seen[i];
      }
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1U) << "window " << window;
      // Through a loader, resumed halfway too.
      ferry::Loader loader(data, o);
      std::vector<std::size_t> got(n, 0);
      std::size_t batches = 0;
      for (const ferry::Batch& b : loader.epoch(2)) {
        for (const std::uint64_t i : b.indices()) ++got[i];
        ++batches;
      }
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 1U) << "window " << window;
      EXPECT_EQ(batches, loader.batches_per_epoch());
    }
  }
}

TEST(EpochPlan, RanksTogetherGetEverySampleOnceAndAsManyBatches) {
  const std::size_t n = 2 * kWindow + 777;
  const Lengths data(n);
  for (const bool bucket : {false, true}) {
    LoaderOptions one = budget(48);
    if (bucket) one.bucket_window = 5000;  // windows that do not divide kWindow or n
    EpochPlan whole(data, 0, one, 1);
    const Batches global = all_batches(whole);
    for (const int world : {2, 3, 7}) {
      for (const bool drop : {false, true}) {
        std::vector<int> seen(n, 0);
        for (int r = 0; r < world; ++r) {
          LoaderOptions o = one;
          o.world_size = world;
          o.rank = r;
          o.drop_last = drop;
          EpochPlan plan(data, 0, o, 1);
          const std::size_t want = drop ? global.size() / static_cast<std::size_t>(world)
                                        : (global.size() + static_cast<std::size_t>(world) - 1) /
                                              static_cast<std::size_t>(world);
          ASSERT_EQ(plan.batches(), want) << "world " << world << " rank " << r;
          const Batches mine = all_batches(plan);
          for (std::size_t k = 0; k < mine.size(); ++k) {
            // Rank r's batch k is global batch r + k x W, padding wrapping to the first ones.
            const std::size_t g =
                (static_cast<std::size_t>(r) + k * static_cast<std::size_t>(world)) % global.size();
            ASSERT_EQ(mine[k], global[g]) << "world " << world << " rank " << r << " batch " << k;
            for (const std::uint64_t i : mine[k]) ++seen[i];
          }
        }
        // Every sample once, but for the padding (the first global batches again), or less
        // with drop_last.
        std::vector<int> padded(n, 0);
        const std::size_t dealt =
            global.size() / static_cast<std::size_t>(world) * static_cast<std::size_t>(world);
        const std::size_t extra = drop || dealt == global.size()
                                      ? 0
                                      : dealt + static_cast<std::size_t>(world) - global.size();
        for (std::size_t g = 0; g < global.size(); ++g) {
          if (drop && g >= dealt) continue;
          for (const std::uint64_t i : global[g]) ++padded[i];
        }
        for (std::size_t g = 0; g < extra; ++g) {
          for (const std::uint64_t i : global[g]) ++padded[i];
        }
        EXPECT_EQ(seen, padded) << "world " << world << " drop_last " << drop << " bucket "
                                << bucket;
        if (!drop) {
          EXPECT_EQ(std::count(seen.begin(), seen.end(), 0), 0);
        }
      }
    }
  }
}

TEST(EpochPlan, AResumedRunIsTheRestOfTheEpoch) {
  const std::size_t n = 2 * kWindow + 999;
  const Lengths data(n);
  for (const bool bucket : {false, true}) {
    LoaderOptions o = budget(40, 3, 2);
    if (bucket) o.bucket_window = 3000;
    EpochPlan whole(data, 0, o, 4);
    const Batches all = all_batches(whole);
    for (const std::size_t k :
         {std::size_t{0}, std::size_t{1}, all.size() / 2, all.size() - 1, all.size()}) {
      const std::uint64_t position = whole.position_after(k);
      EpochPlan rest(data, 0, o, 4, position);
      ASSERT_EQ(rest.batches(), all.size() - k) << "from batch " << k;
      EXPECT_EQ(rest.number_offset(), k);
      const Batches tail = all_batches(rest);
      for (std::size_t j = 0; j < tail.size(); ++j) {
        ASSERT_EQ(tail[j], all[k + j]) << "from batch " << k << ", batch " << j;
        EXPECT_EQ(rest.position_after(j), whole.position_after(k + j));
      }
    }
  }
}

TEST(EpochPlan, ElasticResumeInsideABatchCutsThatWindowFromThereAndKeepsTheRest) {
  const std::size_t n = 3 * kWindow + 4321;
  const Lengths data(n);
  const std::vector<std::uint64_t> order = epoch_order(data, budget(1), 6);
  // A job of 4 ranks and batches of 32 stops after 700 batches each; a job of 3 ranks and
  // batches of 50 continues.
  const std::uint64_t position = EpochPlan(data, 0, budget(32, 4, 0), 6).position_after(700);
  ASSERT_GT(position, 0U);
  ASSERT_LT(position, n);
  const LoaderOptions one = budget(50);
  EpochPlan from_zero(data, 0, one, 6);
  const Batches reference = all_batches(from_zero);
  Batches global;
  for (int r = 0; r < 3; ++r) {
    EpochPlan plan(data, 0, budget(50, 3, r), 6, position);
    Batches mine = all_batches(plan);
    if (global.size() < mine.size() * 3) global.resize(mine.size() * 3);
    for (std::size_t k = 0; k < mine.size(); ++k)
      global[static_cast<std::size_t>(r) + 3 * k] = mine[k];
  }
  // Global batches in order: positions [position, n) exactly once, then the padding.
  std::size_t at = position;
  std::size_t g = 0;
  for (; g < global.size() && at < n; ++g) {
    const auto& b = global[g];
    for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(b[i], order[at + i]) << "batch " << g;
    ASSERT_EQ(at / kWindow, (at + b.size() - 1) / kWindow) << "batch " << g << " crosses";
    at += b.size();
  }
  EXPECT_EQ(at, n);
  EXPECT_LT(global.size() - g, 3U);  // padding: fewer than the ranks
  // From the next window on, the batches are those of a run from the epoch's start.
  const std::size_t next = (position / kWindow + 1) * kWindow;
  std::size_t ref = 0;
  std::size_t ref_at = 0;
  while (ref_at < next) ref_at += reference[ref++].size();
  at = position;
  for (std::size_t j = 0; j < g; ++j) {
    if (at >= next) {
      ASSERT_EQ(global[j], reference[ref++]);
    }
    at += global[j].size();
  }
  EXPECT_EQ(ref, reference.size());
}

TEST(EpochPlan, ABucketedPlanRefusesAPositionInsideABatch) {
  const Lengths data(kWindow);
  LoaderOptions o = budget(40);
  o.bucket_window = 1000;
  EpochPlan whole(data, 0, o, 0);
  const std::uint64_t inside = whole.position_after(3) + 1;
  EXPECT_THROW(EpochPlan(data, 0, o, 0, inside), ferry::ConfigError);
}

TEST(EpochPlan, ANegativeLengthIsADataErrorNamingTheSample) {
  class Negative : public Lengths {
   public:
    using Lengths::Lengths;
    std::int64_t length(std::size_t index, std::size_t field) const override {
      return index == 70'000 ? -3 : Lengths::length(index, field);
    }
  };
  const Negative data(kWindow + 10'000);
  try {
    EpochPlan plan(data, 0, budget(16), 0);
    FAIL() << "no error";
  } catch (const ferry::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("sample 70000 has -3 rows"), std::string::npos)
        << e.what();
  }
}

// Chooses its epochs' samples and gives each position's index directly (as a Mixture that is
// not stratified): position p of epoch e is sample hash(seed, e, p) mod size(). Counts the
// epoch lists asked for, which a loader must not need. Sample i's tokens are i, i + 1, ...
class Indexing : public Lengths {
 public:
  Indexing(std::size_t n, std::size_t epoch) : Lengths(n), epoch_(epoch) {}
  std::uint64_t selection_key() const noexcept override { return 77; }
  std::size_t epoch_size() const override { return epoch_; }
  bool indexes_epoch() const noexcept override { return true; }
  std::uint64_t epoch_index(std::uint64_t seed, std::uint64_t epoch,
                            std::uint64_t position) const override {
    return ferry::detail::mix64(ferry::detail::mix64(seed ^ (epoch << 32)) ^ position) % size();
  }
  std::vector<std::uint64_t> epoch_indices(std::uint64_t seed, std::uint64_t epoch) const override {
    lists.fetch_add(1);
    std::vector<std::uint64_t> out(epoch_);
    for (std::size_t p = 0; p < epoch_; ++p) out[p] = epoch_index(seed, epoch, p);
    return out;
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < len(index); ++j)
      t[j] = static_cast<std::int32_t>(static_cast<std::int64_t>(index) + j);
  }
  mutable std::atomic<int> lists{0};

 private:
  std::size_t epoch_;
};

TEST(EpochPlan, ADatasetThatIndexesItsEpochsIsNeverAskedForTheList) {
  const auto data = std::make_shared<Indexing>(1000, 5000);
  // An epoch this short would take the list: asked by position here as a long one is.
  const std::size_t limit = ferry::detail::listed_epoch_limit.exchange(0);
  struct Restore {
    std::size_t limit;
    ~Restore() { ferry::detail::listed_epoch_limit = limit; }
  } restore{limit};
  for (const bool budgeted : {false, true}) {
    LoaderOptions o = budget(32);
    o.workers = 2;
    if (!budgeted) o.max_tokens = 0;
    // The epoch's order: its positions permuted, each position's index asked.
    const ferry::detail::Sampler s(5000, {1, true, o.seed, false, 0, 1});
    const auto order = s.order(3);
    std::vector<std::uint64_t> want(5000);
    for (std::size_t p = 0; p < want.size(); ++p) want[p] = data->epoch_index(o.seed, 3, order(p));
    ferry::Loader loader(data, o);
    std::vector<std::uint64_t> got;
    for (const ferry::Batch& b : loader.epoch(3)) {
      const ferry::Tensor t = b["tokens"];
      const ferry::Tensor lengths = b.lengths("tokens");
      std::size_t at = 0;
      for (std::size_t i = 0; i < b.size(); ++i) {
        const std::uint64_t index = b.indices()[i];
        ASSERT_EQ(lengths.data<std::int64_t>()[i], Lengths::len(index));
        ASSERT_EQ(t.data<std::int32_t>()[at], static_cast<std::int32_t>(index));  // its bytes
        at += static_cast<std::size_t>(Lengths::len(index));
        got.push_back(index);
      }
      if (budgeted && b.size() > 1) {
        EXPECT_LE(tokens(std::vector<std::uint64_t>(b.indices().begin(), b.indices().end())),
                  o.max_tokens);
      }
    }
    EXPECT_EQ(got, want) << "max_tokens " << o.max_tokens;
    EXPECT_EQ(data->lists.load(), 0) << "the epoch's list was built";
  }
  // Under the limit, the list is taken, and gives the same batches.
  ferry::detail::listed_epoch_limit = limit;
  LoaderOptions o = budget(32);
  o.workers = 2;
  std::vector<std::vector<std::uint64_t>> listed;
  std::vector<std::vector<std::uint64_t>> asked;
  for (const ferry::Batch& b : ferry::Loader(data, o).epoch(3)) {
    listed.emplace_back(b.indices().begin(), b.indices().end());
  }
  EXPECT_GT(data->lists.load(), 0);
  ferry::detail::listed_epoch_limit = 0;
  for (const ferry::Batch& b : ferry::Loader(data, o).epoch(3)) {
    asked.emplace_back(b.indices().begin(), b.indices().end());
  }
  EXPECT_EQ(listed, asked);
}

ferry::MixtureOptions mixture_options(std::size_t epoch_size) {
  ferry::MixtureOptions o;
  o.epoch_size = epoch_size;
  return o;
}

TEST(EpochPlan, AMixtureOfTenMillionSamplesPlansInABoundedHeap) {
  // A mixture's epoch of 10^7 samples (two sources, one up-sampled, one down-sampled): no list
  // of the epoch (80 MB) is made, by the plan or its order.
  constexpr std::size_t kEpoch = 10'000'000;
  constexpr std::uint64_t kBound = 4'000'000;  // bytes
  // Whole under TSan too: at 2.5 million its plan held 22 MB there (the stop notes: not yet
  // understood), against well under 4 MB at 10 million.
  const auto mixture = ferry::Mixture::open(
      {{std::make_shared<Lengths>(3'000'000), 1}, {std::make_shared<Lengths>(9'000'000), 1}},
      mixture_options(kEpoch));
  ASSERT_TRUE(mixture->indexes_epoch());
  LoaderOptions o = budget(256, 8, 3);
  o.max_tokens = 8192;
  const std::uint64_t before = g_live.load();
  g_peak.store(before);
  std::vector<std::uint64_t> per_source(2, 0);
  {
    EpochPlan plan(*mixture, 0, o, 1);
    std::vector<std::uint64_t> batch;
    for (std::size_t k = 0; k < plan.batches(); ++k) {
      plan.batch(k, batch);
      for (const std::uint64_t i : batch) ++per_source[mixture->source_of(i)];
    }
  }
  EXPECT_LT(g_peak.load() - before, kBound) << "the plan's heap grows with the epoch";
  // Rank 3 of 8 gets about an eighth of each source's share.
  EXPECT_NEAR(static_cast<double>(per_source[0]), kEpoch / 2 / 8.0, kEpoch / 2 / 80.0);
  EXPECT_NEAR(static_cast<double>(per_source[1]), kEpoch / 2 / 8.0, kEpoch / 2 / 80.0);
}

}  // namespace
