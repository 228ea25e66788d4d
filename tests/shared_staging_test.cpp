// A dataset whose reads other processes do (Dataset::shares_staging): the loader makes its staging
// slots of SharedBuffers, so that every place read() is given lies in one, and what is written
// there through another mapping of its memfd (as a worker process writes it) is what the batch
// holds. Python's worker processes are tested in tests/python/test_pyworkers.py.

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::Loader;
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

}  // namespace
