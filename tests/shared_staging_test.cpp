// A dataset whose reads other processes do (Dataset::shares_staging): the loader makes its staging
// slots of SharedBuffers, so that every place read() is given lies in one, and what is written
// there through another mapping of its memfd (as a worker process writes it) is what the batch
// holds. A slot whose batch was let go is told to the dataset (staging_released), which may give
// its pages back until the slot is written again (staging_reused comes first). Python's worker
// processes are tested in tests/python/test_pyworkers.py.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::SampleRef;
using ferry::SharedRegion;
using ferry::testing::cpu_options;

/// Sample i: "x" i32 [3] = {i, 2i, 3i}, "y" i64 = -i, written through a second mapping of the
/// memfd that holds its place when `shares`, else in place. Counts the places found in a
/// SharedBuffer.
class Remote : public ferry::Dataset {
 public:
  explicit Remote(bool shares) : shares_(shares) {}
  std::size_t size() const override { return 50; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"x", DType::i32, {3}}, {"y", DType::i64, {}}};
  }
  bool shares_staging() const noexcept override { return shares_; }
  void read(std::size_t index, SampleRef out) const override {
    const auto i = static_cast<std::int32_t>(index);
    const std::int32_t x[3] = {i, 2 * i, 3 * i};
    const std::int64_t y = -static_cast<std::int64_t>(index);
    write(out, 0, x, sizeof x);
    write(out, 1, &y, sizeof y);
  }
  int found() const { return found_.load(); }

 private:
  void write(SampleRef out, std::size_t field, const void* bytes, std::size_t n) const {
    SharedRegion r;
    if (!ferry::shared_region(out.data(field), n, r)) {
      std::memcpy(out.data(field), bytes, n);
      return;
    }
    found_.fetch_add(1);
    // Another mapping of the slot's memfd, as a worker process has.
    void* map = ::mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
    ASSERT_NE(map, MAP_FAILED);
    std::memcpy(static_cast<std::byte*>(map) + r.offset, bytes, n);
    ::munmap(map, r.size);
  }
  bool shares_;
  mutable std::atomic<int> found_{0};
};

void expect_samples(Loader& loader, std::uint64_t epoch) {
  std::vector<int> seen(50);
  for (const Batch& b : loader.epoch(epoch)) {
    const auto* x = b["x"].data<std::int32_t>();
    const auto* y = b["y"].data<std::int64_t>();
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto i = static_cast<std::int32_t>(b.indices()[k]);
      EXPECT_EQ(x[3 * k], i);
      EXPECT_EQ(x[3 * k + 1], 2 * i);
      EXPECT_EQ(x[3 * k + 2], 3 * i);
      EXPECT_EQ(y[k], -i);
      ++seen[static_cast<std::size_t>(i)];
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
}

TEST(SharedStaging, EverySampleIsPlacedInASharedSlotWrittenFromAnotherMapping) {
  auto ds = std::make_shared<Remote>(true);
  Loader loader(ds, cpu_options(8, /*shuffle=*/true, 3));
  expect_samples(loader, 0);
  expect_samples(loader, 1);
  EXPECT_EQ(ds->found(), 2 * 2 * 50);  // both fields of every sample, two epochs
}

TEST(SharedStaging, OtherDatasetsKeepPrivateSlots) {
  auto ds = std::make_shared<Remote>(false);
  Loader loader(ds, cpu_options(8, /*shuffle=*/true, 3));
  expect_samples(loader, 0);
  EXPECT_EQ(ds->found(), 0);
}

TEST(SharedStaging, AMixtureSharesWhenOneSourceDoes) {
  auto shares = std::make_shared<Remote>(true);
  auto own = std::make_shared<Remote>(false);
  auto mix = ferry::Mixture::open({{own, 1}, {shares, 1}});
  EXPECT_TRUE(mix->shares_staging());
  EXPECT_FALSE(ferry::Mixture::open({{own, 1}})->shares_staging());
  Loader loader(mix, cpu_options(10));
  std::size_t n = 0;
  for (const Batch& b : loader.epoch(0)) n += b.size();
  EXPECT_EQ(n, 100U);
  EXPECT_EQ(shares->found(), 2 * 50);  // every sample of the source that shares, in a slot
  EXPECT_EQ(own->found(), 2 * 50);     // and the other source's too: the slots are shared
}

/// Remote, and what happened last to each staging slot (by its region's id): its pages are given
/// back at once when the loader says the slot's batch was let go (MADV_REMOVE: the slot then
/// reads as zeros), and a read into a slot given back but not yet said to be reused is counted.
/// Each read takes `read_ms` (asleep), as a worker process's does.
class GivingBack : public Remote {
 public:
  explicit GivingBack(int read_ms = 2) : Remote(true), read_ms_(read_ms) {}
  void read(std::size_t index, SampleRef out) const override {
    {
      const std::lock_guard lock(mutex_);
      if (last(out.data(0)) == Event::released) ++too_early_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(read_ms_));
    Remote::read(index, out);
  }
  void staging_released(std::span<std::byte> slot) const noexcept override {
    const std::lock_guard lock(mutex_);
    SharedRegion r;
    if (!ferry::shared_region(slot.data(), slot.size(), r) || r.offset != 0 ||
        r.size < slot.size()) {
      ++outside_;
      return;
    }
    if (last(slot.data()) == Event::released) ++twice_;
    state_[r.id] = Event::released;
    ++released_;
    if (::madvise(slot.data(), slot.size(), MADV_REMOVE) != 0) ++outside_;
  }
  void staging_reused(std::span<std::byte> slot) const noexcept override {
    const std::lock_guard lock(mutex_);
    SharedRegion r;
    if (!ferry::shared_region(slot.data(), slot.size(), r)) {
      ++outside_;
      return;
    }
    state_[r.id] = Event::reused;
    ++reused_;
  }
  int released() const {
    const std::lock_guard lock(mutex_);
    return released_;
  }
  int reused() const {
    const std::lock_guard lock(mutex_);
    return reused_;
  }
  /// Reads into a slot given back and not said to be reused; slots given back twice in a row;
  /// calls with bytes that are not a whole slot.
  int faults() const {
    const std::lock_guard lock(mutex_);
    return too_early_ + twice_ + outside_;
  }

 private:
  enum class Event { released, reused };
  std::optional<Event> last(const void* p) const {
    SharedRegion r;
    if (!ferry::shared_region(p, 1, r)) return std::nullopt;
    const auto it = state_.find(r.id);
    return it == state_.end() ? std::nullopt : std::optional<Event>(it->second);
  }
  int read_ms_;
  mutable std::mutex mutex_;
  mutable std::map<std::uint64_t, Event> state_;
  mutable int released_ = 0;
  mutable int reused_ = 0;
  mutable int too_early_ = 0;
  mutable int twice_ = 0;
  mutable int outside_ = 0;
};

TEST(SharedStaging, TheEpochsTailSlotsAreGivenBackAndSaidReusedBeforeTheirNextReads) {
  auto ds = std::make_shared<GivingBack>();
  LoaderOptions o = cpu_options(8, /*shuffle=*/true, 3);
  o.prefetch = 2;
  o.autotune = false;  // limit() stays 2
  Loader loader(ds, o);
  // The reads are slower than the loop, which waits for each batch. A slot let go within the
  // epoch keeps its bytes (the reads write it again as soon as they reach it); the slots of the
  // epoch's last batches are given back (zeroed), and the next epoch's batches are right only if
  // every slot is said reused before it is read into again.
  expect_samples(loader, 0);
  expect_samples(loader, 1);
  EXPECT_EQ(ds->faults(), 0);
  // Of the 7 batches of each epoch (50 samples, batches of 8), the last 2 (limit()) are the
  // tail, and the one let go as the first of them was taken; none before.
  EXPECT_GE(ds->released(), 2 * 2);
  EXPECT_LE(ds->released(), 2 * 3);
  EXPECT_EQ(ds->reused(), 2 * 7);  // before each batch's reads
}

TEST(SharedStaging, ASlotIsNotGivenBackWhereBatchesWaitForTheLoopButTheEpochsTailIs) {
  // Instant reads and a loop that takes 5 ms a batch: the slots are written again as soon as
  // they are let go, so none is given back (the first batch, which the loop waited for, may be),
  // except the epoch's last 3 (prefetch): their slots are not written again in the epoch.
  auto ds = std::make_shared<GivingBack>(/*read_ms=*/0);
  LoaderOptions o = cpu_options(2, /*shuffle=*/true, 3);
  o.prefetch = 3;
  o.autotune = false;  // limit() stays 3: autotune may choose fewer slots on a busy machine
  Loader loader(ds, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (const Batch& b : loader.epoch(static_cast<std::uint64_t>(epoch))) {
      static_cast<void>(b);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // The 6 of the tails, and the first of each epoch; a few more where this thread stalled (a
  // busy machine, the sanitizers) and found its batch not ready. Of the other 44, most are not.
  EXPECT_GE(ds->released(), 2 * 3);
  EXPECT_LE(ds->released(), 2 * 3 + 2 + 6);
  EXPECT_EQ(ds->reused(), 2 * 25);
  EXPECT_EQ(ds->faults(), 0);
}

TEST(SharedStaging, AKeptBatchIsGivenBackOnlyWhenItsLastCopyGoes) {
  auto ds = std::make_shared<GivingBack>();
  Loader loader(ds, cpu_options(8, /*shuffle=*/false, 3));
  std::optional<Batch> kept;
  int batches = 0;
  for (const Batch& b : loader.epoch(0)) {
    if (!kept) kept = b;
    ++batches;
  }
  EXPECT_EQ(batches, 7);
  // Still its bytes: sample i's x is {i, 2i, 3i} (a slot given back would read zeros).
  const auto* x = (*kept)["x"].data<std::int32_t>();
  for (std::size_t k = 0; k < kept->size(); ++k) {
    EXPECT_EQ(x[3 * k + 2], 3 * static_cast<std::int32_t>(kept->indices()[k]));
  }
  const int released = ds->released();
  EXPECT_GE(released, 3);  // the others' slots (the loop waited for most)
  kept.reset();
  EXPECT_LE(ds->released(), released + 1);
  EXPECT_EQ(ds->faults(), 0);
}

TEST(SharedStaging, AMixtureTellsTheSourcesThatShare) {
  auto shares = std::make_shared<GivingBack>();
  auto own = std::make_shared<Remote>(false);
  LoaderOptions o = cpu_options(10);
  o.prefetch = 2;
  o.autotune = false;  // limit() stays 2
  Loader loader(ferry::Mixture::open({{own, 1}, {shares, 1}}), o);
  std::size_t n = 0;
  for (const Batch& b : loader.epoch(0)) n += b.size();
  EXPECT_EQ(n, 100U);
  // The slots of the epoch's tail (its last 2 batches, and the one let go as the first of them
  // was taken) are told, through the mixture.
  EXPECT_GE(shares->released(), 2);
  EXPECT_LE(shares->released(), 3);
  EXPECT_EQ(shares->reused(), 10);
  EXPECT_EQ(shares->faults(), 0);
}

}  // namespace
