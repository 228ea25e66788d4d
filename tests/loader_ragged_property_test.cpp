// Ragged loading over random configurations: dataset size, lengths (empty ones included),
// batch size, pad or pack, pad_multiple, token budgets, bucketing, world size, drop_last,
// workers, prefetch, the copy stage and resume points. Checked for each: every delivered
// sample's rows, padding and tables are exact; without drop_last every sample arrives across
// the ranks; and the batches are the same whatever the workers, prefetch or copy stage, and
// from any resume point.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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
using ferry::DType;
using ferry::FieldSpec;
using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::Tensor;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;
using Order = std::vector<std::vector<std::uint64_t>>;

// Sample i: "seq" i32 [L_i] with token j = i * 31 + j; L_i from a seeded table.
class RandomLengths : public ferry::Dataset {
 public:
  RandomLengths(std::size_t n, std::uint64_t seed, std::int64_t longest) : lengths_(n) {
    std::mt19937_64 rng(seed);
    for (auto& l : lengths_)
      l = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(longest + 1));
  }
  std::size_t size() const override { return lengths_.size(); }
  std::vector<FieldSpec> fields() const override {
    return {{"seq", DType::i32, {ferry::ragged}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return lengths_[index];
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < lengths_[index]; ++j) t[j] = token(index, j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
  static std::int32_t token(std::size_t i, std::int64_t j) {
    return static_cast<std::int32_t>(i * 31 + static_cast<std::size_t>(j));
  }
  std::int64_t len(std::size_t i) const { return lengths_[i]; }

 private:
  std::vector<std::int64_t> lengths_;
};

// Checks a batch's values; returns a failure naming what differs.
::testing::AssertionResult exact(const Batch& b, const RandomLengths& ds, const LoaderOptions& o) {
  const auto n = static_cast<std::int64_t>(b.size());
  const Tensor seq = b["seq"].cpu();
  const Tensor lengths = b.lengths("seq").cpu();
  const Tensor ids = b["id"].cpu();
  std::int64_t at = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::uint64_t i = b.indices()[static_cast<std::size_t>(s)];
    if (ids.data<std::int64_t>()[s] != static_cast<std::int64_t>(i) ||
        lengths.data<std::int64_t>()[s] != ds.len(i)) {
      return ::testing::AssertionFailure() << "sample " << i << ": id or length";
    }
    const std::int64_t row = o.ragged == RaggedBatch::pad ? s * seq.shape(1) : at;
    for (std::int64_t j = 0; j < ds.len(i); ++j) {
      if (seq.data<std::int32_t>()[row + j] != RandomLengths::token(i, j)) {
        return ::testing::AssertionFailure() << "sample " << i << " token " << j;
      }
    }
    if (o.ragged == RaggedBatch::pad) {
      if (seq.shape(1) % o.pad_multiple != 0 || seq.shape(1) < ds.len(i)) {
        return ::testing::AssertionFailure() << "batch " << b.number() << ": Lmax";
      }
      for (std::int64_t j = ds.len(i); j < seq.shape(1); ++j) {
        if (seq.data<std::int32_t>()[row + j] != -5) {
          return ::testing::AssertionFailure() << "sample " << i << " pad " << j;
        }
      }
    } else if (b.offsets("seq").cpu().data<std::int32_t>()[s] != at) {
      return ::testing::AssertionFailure() << "sample " << i << ": offset";
    }
    at += ds.len(i);
  }
  return ::testing::AssertionSuccess();
}

TEST(LoaderRaggedProperty, ExactValuesEverySampleAndTheSameBatchesOverRandomConfigurations) {
  std::mt19937_64 rng(1130);
  auto pick = [&](std::uint64_t lo, std::uint64_t hi) {
    return std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng);
  };
  within(120s, [&] {
    // 20 cases under TSan (test_util.hpp), 60 elsewhere.
    for (int c = 0; c < ferry::testing::scaled_for_tsan(60, 3); ++c) {
      const std::size_t n = pick(1, 300);
      const auto ds =
          std::make_shared<RandomLengths>(n, rng(), static_cast<std::int64_t>(pick(0, 40)));
      LoaderOptions o;
      o.device = ferry::Device::cpu();
      o.batch_size = pick(1, 40);
      o.shuffle = pick(0, 3) != 0;
      o.seed = rng();
      o.drop_last = pick(0, 3) == 0;
      o.world_size = static_cast<int>(pick(1, std::min<std::uint64_t>(n, 3)));
      o.ragged = pick(0, 1) == 0 ? RaggedBatch::pad : RaggedBatch::pack;
      o.pad_multiple = static_cast<std::int64_t>(pick(1, 8));
      o.pad_value = -5;
      o.max_tokens = pick(0, 2) == 0 ? 0 : pick(1, 400);
      o.bucket_window = pick(0, 2) == 0 ? pick(1, 100) : 0;
      const std::uint64_t epoch = pick(0, 50);
      std::ostringstream what;
      what << "case " << c << ": n " << n << " batch " << o.batch_size << " world " << o.world_size
           << " drop_last " << o.drop_last << " shuffle " << o.shuffle
           << (o.ragged == RaggedBatch::pad ? " pad " : " pack ") << o.pad_multiple
           << " max_tokens " << o.max_tokens << " bucket " << o.bucket_window;
      SCOPED_TRACE(what.str());
      std::set<std::uint64_t> seen;
      for (int r = 0; r < o.world_size; ++r) {
        o.rank = r;
        o.workers = 1;
        o.prefetch = 1;
        Order reference;
        {
          ferry::Loader loader = make_loader(ds, o, false);
          for (const Batch& b : loader.epoch(epoch)) {
            ASSERT_TRUE(exact(b, *ds, o));
            reference.emplace_back(b.indices().begin(), b.indices().end());
            seen.insert(b.indices().begin(), b.indices().end());
          }
        }
        o.workers = static_cast<int>(pick(2, 3));
        o.prefetch = static_cast<int>(pick(1, 4));
        const std::size_t start = pick(0, reference.size());
        ferry::Loader loader = make_loader(ds, o, pick(0, 1) == 1);
        Order other;
        for (const Batch& b : loader.epoch(epoch, start)) {
          ASSERT_TRUE(exact(b, *ds, o));
          other.emplace_back(b.indices().begin(), b.indices().end());
        }
        EXPECT_EQ(other,
                  Order(reference.begin() + static_cast<std::ptrdiff_t>(start), reference.end()))
            << "rank " << r << " from " << start;
      }
      if (!o.drop_last) {
        EXPECT_EQ(seen.size(), n);
      }
    }
  });
}

}  // namespace
