// Options that size an allocation (a mixture's epoch_size, stratified or not, a loader's
// batch_size, bucket_window) past what the machine holds: a ConfigError naming the option and
// the bytes it would need, never std::bad_alloc or std::length_error.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "core/memory_need.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "ferry/mixture.hpp"
#include "loader_test_util.hpp"
#include "pipeline/epoch_plan.hpp"

namespace {

using ferry::ConfigError;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::Mixture;
using ferry::MixtureOptions;
using ferry::testing::expect_error;
using ferry::testing::IndexDataset;

constexpr std::size_t kHuge = std::size_t{1} << 50;  // samples: 8 PiB of indices

LoaderOptions cpu(std::size_t batch) {
  LoaderOptions o;
  o.batch_size = batch;
  o.device = ferry::Device::cpu();
  o.workers = 1;
  o.autotune = false;
  return o;
}

TEST(OptionMemory, AStratifiedEpochTooLargeToListIsAConfigError) {
  MixtureOptions mo;
  mo.epoch_size = kHuge;
  mo.stratified = 64;
  expect_error<ConfigError>(
      [&] {
        const auto m = Mixture::open(
            {{std::make_shared<IndexDataset>(10), 1}, {std::make_shared<IndexDataset>(20), 1}}, mo);
        Loader loader(m, cpu(64));
        for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
      },
      {"epoch_size 1125899906842624", "stratified", "bytes", "memory"});
}

TEST(OptionMemory, AnEpochListTooLargeIsAConfigError) {
  MixtureOptions mo;
  mo.epoch_size = kHuge;
  const auto m = Mixture::open(
      {{std::make_shared<IndexDataset>(10), 1}, {std::make_shared<IndexDataset>(20), 1}}, mo);
  // The loader asks such an epoch by position; its list, asked for, cannot be made.
  expect_error<ConfigError>([&] { static_cast<void>(m->epoch_indices(0, 0)); },
                            {"epoch_size 1125899906842624", "bytes", "epoch's list"});
  // A mixture over it that cannot ask by position (stratified) would list it too.
  MixtureOptions so;
  so.stratified = 4;
  expect_error<ConfigError>(
      [&] {
        const auto outer = Mixture::open({{m, 1}, {std::make_shared<IndexDataset>(3), 1}}, so);
        static_cast<void>(outer->epoch_indices(0, 0));
      },
      {"epoch_size", "bytes"});
}

TEST(OptionMemory, ABatchTooLargeForTheMachineIsAConfigErrorNamingBatchSize) {
  const auto data = std::make_shared<IndexDataset>(kHuge);
  expect_error<ConfigError>([&] { Loader loader(data, cpu(kHuge / 2)); },
                            {"batch_size 562949953421312", "bytes", "staging", "memory"});
}

// Lengths only, of a ragged field, for bucketing.
class Ragged : public ferry::Dataset {
 public:
  explicit Ragged(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"tokens", ferry::DType::i32, {ferry::ragged}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return static_cast<std::int64_t>(1 + index % 7);
  }
  std::int64_t max_length(std::size_t /*field*/) const override { return 7; }
  void read(std::size_t /*index*/, ferry::SampleRef /*out*/) const override {}

 private:
  std::size_t n_;
};

TEST(OptionMemory, ABucketWindowTooLargeToPlanIsAConfigErrorNamingIt) {
  const Ragged data(kHuge);
  LoaderOptions o = cpu(16);
  o.ragged = ferry::RaggedBatch::pack;
  o.bucket_window = kHuge;
  expect_error<ConfigError>([&] { ferry::detail::EpochPlan plan(data, 0, o, 0); },
                            {"bucket_window 1125899906842624", "bytes", "window's plan"});
}

TEST(OptionMemory, TheCheckPassesWhatFitsAndNamesWhatDoesNot) {
  EXPECT_NO_THROW(ferry::detail::check_need("x", 1000, 8, "for y"));
  expect_error<ConfigError>(
      [&] { ferry::detail::check_need("Loader: z 5", std::uint64_t{1} << 40, 1 << 30, "for w"); },
      {"Loader: z 5", "for w", "memory"});
}

}  // namespace
