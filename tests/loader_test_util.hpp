#pragma once

// Datasets and helpers for the loader's tests: every sample encodes its own index, so a test
// can check which samples arrived, in which order, with which bytes.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "pipeline/testing.hpp"

namespace ferry::testing {

/// Sample i: "x" u8 [width] with byte j = (i * 31 + j * 7) mod 251, "y" i64 [] = i,
/// "z" f32 [2] = {i, -i}. Optionally throws for some indices.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(std::size_t n, std::int64_t width = 13, std::set<std::size_t> bad = {})
      : n_(n), width_(width), bad_(std::move(bad)) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"x", DType::u8, {width_}}, {"y", DType::i64, {}}, {"z", DType::f32, {2}}};
  }
  void read(std::size_t index, SampleRef out) const override {
    if (bad_.count(index) != 0) {
      throw DataError("IndexDataset: fake.bin:" + std::to_string(index * 100) + ": corrupt record");
    }
    auto* x = out.as<std::uint8_t>(0);
    for (std::int64_t j = 0; j < width_; ++j) x[j] = expected_byte(index, j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
    out.as<float>(2)[0] = static_cast<float>(index);
    out.as<float>(2)[1] = -static_cast<float>(index);
  }
  static std::uint8_t expected_byte(std::size_t index, std::int64_t j) {
    return static_cast<std::uint8_t>((index * 31 + static_cast<std::size_t>(j) * 7) % 251);
  }

 private:
  std::size_t n_;
  std::int64_t width_;
  std::set<std::size_t> bad_;
};

/// Checks that `batch` holds exactly its indices' samples, byte for byte.
inline ::testing::AssertionResult holds_its_samples(const Batch& batch, std::int64_t width = 13) {
  const Tensor x = batch["x"].cpu();
  const Tensor y = batch["y"].cpu();
  const Tensor z = batch["z"].cpu();
  const auto n = static_cast<std::int64_t>(batch.size());
  if (x.shape() != std::vector<int64_t>{n, width} || y.shape() != std::vector<int64_t>{n} ||
      z.shape() != std::vector<int64_t>{n, 2}) {
    return ::testing::AssertionFailure() << "wrong shapes in batch " << batch.number();
  }
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t index = batch.indices()[static_cast<std::size_t>(i)];
    if (y.data<std::int64_t>()[i] != static_cast<std::int64_t>(index)) {
      return ::testing::AssertionFailure()
             << "batch " << batch.number() << " position " << i
             << ": y = " << y.data<std::int64_t>()[i] << ", index " << index;
    }
    for (std::int64_t j = 0; j < width; ++j) {
      if (x.data<std::uint8_t>()[i * width + j] != IndexDataset::expected_byte(index, j)) {
        return ::testing::AssertionFailure()
               << "batch " << batch.number() << " sample " << index << " byte " << j << " differs";
      }
    }
    if (z.data<float>()[2 * i] != static_cast<float>(index) ||
        z.data<float>()[2 * i + 1] != -static_cast<float>(index)) {
      return ::testing::AssertionFailure()
             << "batch " << batch.number() << " sample " << index << ": z differs";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Every batch's indices of one epoch, checking each batch's bytes on the way.
inline std::vector<std::vector<std::uint64_t>> collect(Loader& loader, std::uint64_t epoch,
                                                       std::size_t start = 0) {
  std::vector<std::vector<std::uint64_t>> out;
  for (const Batch& b : loader.epoch(epoch, start)) {
    EXPECT_TRUE(holds_its_samples(b));
    out.emplace_back(b.indices().begin(), b.indices().end());
  }
  return out;
}

/// Runs `f` on another thread and fails (instead of hanging) when it takes longer than
/// `limit`. The test binary then aborts, as a hung thread cannot be stopped.
template <class F>
void within(std::chrono::seconds limit, F f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) == std::future_status::timeout) {
    ADD_FAILURE() << "timed out after " << limit.count() << " s";
    std::fflush(nullptr);
    std::abort();
  }
  done.get();
}

/// A loader whose copy stage runs on the host copy engine when `copy_stage` (the CI stand-in
/// for a GPU); with `rows_on_device`, a dataset's rows in memory count as the device's.
inline Loader make_loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                          bool copy_stage, bool rows_on_device = false) {
  detail::SimulatedCopy simulated;
  simulated.enabled = copy_stage;
  simulated.dataset_on_device = rows_on_device;
  return detail::make_loader(std::move(dataset), options, simulated);
}

/// Every batch of a shuffled epoch of `dataset` (batches of `batch`, `seed`, epoch `epoch`, two
/// workers, cpu): its indices (as bytes), then each field's bytes. `gathered`: through the
/// stand-in for rows on the device, where the loader gathers rows instead of reading samples.
inline std::vector<std::vector<std::uint8_t>> epoch_bytes(
    const std::shared_ptr<const Dataset>& dataset, std::size_t batch, std::uint64_t seed,
    std::uint64_t epoch, bool gathered) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = true;
  o.seed = seed;
  o.device = Device::cpu();
  o.workers = 2;
  Loader loader = make_loader(dataset, o, gathered, gathered);
  std::vector<std::vector<std::uint8_t>> out;
  for (const Batch& b : loader.epoch(epoch)) {
    std::vector<std::uint8_t>& bytes = out.emplace_back();
    for (const std::uint64_t i : b.indices()) bytes.push_back(static_cast<std::uint8_t>(i));
    for (const FieldSpec& f : dataset->fields()) {
      const Tensor t = b[f.name].cpu();
      const auto* p = static_cast<const std::uint8_t*>(t.data());
      bytes.insert(bytes.end(), p, p + t.nbytes());
    }
  }
  EXPECT_EQ(loader.stats().samples, dataset->size());
  EXPECT_EQ(loader.stats().read_seconds == 0.0, gathered);  // gathered: no sample was read
  return out;
}

inline LoaderOptions cpu_options(std::size_t batch, bool shuffle = false, std::uint64_t seed = 0) {
  LoaderOptions o;
  o.batch_size = batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.device = Device::cpu();
  o.workers = 2;
  return o;
}

}  // namespace ferry::testing
