// ParquetDataset's shared cache of decoded row groups (lib/datasets/table/parquet_cache.hpp):
// one decode per row group however many threads ask at once, the least recently used leaving
// past the budget (two always kept), a failed decode reaching every waiter, and kept (its error,
// met at once by later reads) only when it is a DataError, until the failures are forgotten.

#include "datasets/table/parquet_cache.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "datasets/table/parquet_table.hpp"
#include "ferry/error.hpp"

namespace {

using ferry::detail::DecodedGroup;
using ferry::detail::GroupCache;

/// A decoded row group of `bytes` bytes.
std::shared_ptr<const DecodedGroup> group_of(std::size_t bytes) {
  auto d = std::make_shared<DecodedGroup>();
  d->columns.emplace_back();
  d->columns.back().fixed.resize(bytes);
  return d;
}

TEST(ParquetGroupCache, ThreadsAskingAtOnceShareOneDecode) {
  GroupCache cache(1 << 20);
  std::atomic<int> decodes{0};
  std::vector<std::thread> threads;
  std::vector<std::shared_ptr<const DecodedGroup>> got(8);
  for (std::size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      got[i] = cache.get(7, [&] {
        ++decodes;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        return group_of(100);
      });
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(decodes.load(), 1);
  for (const auto& g : got) EXPECT_EQ(g, got[0]);
  EXPECT_EQ(cache.bytes(), 100U);
}

TEST(ParquetGroupCache, TheLeastRecentlyUsedLeavePastTheBudgetTwoStay) {
  GroupCache cache(250);
  int decodes = 0;
  const auto get = [&](std::size_t g) {
    return cache.get(g, [&] {
      ++decodes;
      return group_of(100);
    });
  };
  get(0);
  get(1);
  EXPECT_EQ(decodes, 2);
  get(0);  // 0 is now more recent than 1
  get(2);  // 300 bytes: 1 leaves
  EXPECT_EQ(decodes, 3);
  EXPECT_EQ(cache.bytes(), 200U);
  get(0);
  get(2);
  EXPECT_EQ(decodes, 3);
  get(1);
  EXPECT_EQ(decodes, 4);
  // Groups larger than the budget: two stay all the same.
  GroupCache small(10);
  int big = 0;
  for (const std::size_t g : {0U, 1U, 0U, 1U}) {
    small.get(g, [&] {
      ++big;
      return group_of(100);
    });
  }
  EXPECT_EQ(big, 2);
}

TEST(ParquetGroupCache, AFailedDecodeReachesItsWaitersAndIsNotKept) {
  GroupCache cache(1 << 20);
  std::atomic<int> decodes{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        cache.get(3, [&]() -> std::shared_ptr<const DecodedGroup> {
          ++decodes;
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("corrupt page");
        });
      } catch (const std::runtime_error&) {
        ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 4);
  EXPECT_GE(decodes.load(), 1);
  EXPECT_EQ(cache.bytes(), 0U);
  // Asked again, it is decoded again.
  (void)cache.get(3, [] { return group_of(10); });
  EXPECT_EQ(cache.bytes(), 10U);
}

TEST(ParquetGroupCache, ADataErrorFailsItsRowGroupOnceUntilTheFailuresAreForgotten) {
  GroupCache cache(1 << 20);
  std::atomic<int> decodes{0};
  std::atomic<int> errors{0};
  const auto failing = [&]() -> std::shared_ptr<const DecodedGroup> {
    ++decodes;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    throw ferry::DataError("t.parquet: row group 3: no progress for 1 s");
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      try {
        cache.get(3, failing);
      } catch (const ferry::DataError& e) {
        if (std::string(e.what()).find("row group 3") != std::string::npos) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 4);
  EXPECT_EQ(decodes.load(), 1);  // the waiters met the one decode's error
  // Asked again: the same error, without a decode.
  EXPECT_THROW(cache.get(3, failing), ferry::DataError);
  EXPECT_EQ(decodes.load(), 1);
  EXPECT_TRUE(cache.holds(3));
  EXPECT_EQ(cache.find(3), nullptr);
  // Other row groups are unaffected; forgotten failures are decoded again.
  (void)cache.get(4, [] { return group_of(10); });
  cache.forget_failures();
  EXPECT_FALSE(cache.holds(3));
  (void)cache.get(3, [] { return group_of(20); });
  EXPECT_EQ(cache.bytes(), 30U);
}

}  // namespace
