// Ragged fields through the loader: padded [N, Lmax, ...] with lengths, packed [sum L, ...] with
// lengths and i32 offsets, on the CPU path and through the copy stage, with failures skipped,
// and the errors of datasets and options that do not fit. Every value is checked: each sample's
// rows encode its index.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

using ferry::Batch;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Loader;
using ferry::LoaderOptions;
using ferry::RaggedBatch;
using ferry::Tensor;
using ferry::testing::cpu_options;
using ferry::testing::expect_error;
using ferry::testing::make_loader;
using ferry::testing::within;
using namespace std::chrono_literals;

// Sample i: "tokens" i32 [L_i] with L_i = (i * 7) % 13 (some empty), token j = i * 1000 + j;
// "boxes" f32 [B_i, 4] with B_i = i % 4, box b = {i, b, -i, 0.5}; "label" i64 [] = i.
class SequenceDataset : public ferry::Dataset {
 public:
  // `bad_lengths`: a bad sample's length() throws too, as a file's whose header does not read.
  explicit SequenceDataset(std::size_t n, std::set<std::size_t> bad = {}, bool bad_lengths = false)
      : n_(n), bad_(std::move(bad)), bad_lengths_(bad_lengths) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}},
            {"boxes", DType::f32, {ferry::ragged, 4}},
            {"label", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t field) const override {
    if (grow_.load() && index == 5) return 100;  // beyond what it said at open
    if (bad_lengths_ && bad_.count(index) != 0) {
      throw ferry::DataError("sample " + std::to_string(index) + " has no length");
    }
    return field == 0 ? tokens(index) : boxes(index);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (bad_.count(index) != 0) throw ferry::DataError("sample " + std::to_string(index));
    EXPECT_EQ(out.nbytes(0), static_cast<std::size_t>(tokens(index)) * 4);
    EXPECT_EQ(out.nbytes(1), static_cast<std::size_t>(boxes(index)) * 16);
    auto* t = out.as<std::int32_t>(0);
    for (std::int64_t j = 0; j < tokens(index); ++j) t[j] = token(index, j);
    auto* b = out.as<float>(1);
    for (std::int64_t k = 0; k < boxes(index); ++k) {
      const float box[4] = {static_cast<float>(index), static_cast<float>(k),
                            -static_cast<float>(index), 0.5f};
      std::copy(box, box + 4, b + 4 * k);
    }
    *out.as<std::int64_t>(2) = static_cast<std::int64_t>(index);
  }
  static std::int64_t tokens(std::size_t i) { return static_cast<std::int64_t>((i * 7) % 13); }
  static std::int64_t boxes(std::size_t i) { return static_cast<std::int64_t>(i % 4); }
  static std::int32_t token(std::size_t i, std::int64_t j) {
    return static_cast<std::int32_t>(i * 1000 + static_cast<std::size_t>(j));
  }
  void grow() const { grow_.store(true); }

 private:
  std::size_t n_;
  std::set<std::size_t> bad_;
  bool bad_lengths_ = false;
  mutable std::atomic<bool> grow_{false};
};

std::int64_t round_up(std::int64_t n, std::int64_t m) { return (n + m - 1) / m * m; }

// Checks one padded batch against the dataset's values; returns its indices.
::testing::AssertionResult padded_ok(const Batch& b, std::int64_t multiple, std::int32_t pad_i32,
                                     float pad_f32) {
  const auto n = static_cast<std::int64_t>(b.size());
  const Tensor tokens = b["tokens"].cpu();
  const Tensor boxes = b["boxes"].cpu();
  const Tensor lengths = b.lengths("tokens").cpu();
  const Tensor box_lengths = b.lengths("boxes").cpu();
  std::int64_t lmax = 0;
  std::int64_t bmax = 0;
  for (const std::uint64_t i : b.indices()) {
    lmax = std::max(lmax, SequenceDataset::tokens(i));
    bmax = std::max(bmax, SequenceDataset::boxes(i));
  }
  lmax = round_up(lmax, multiple);
  bmax = round_up(bmax, multiple);
  if (tokens.shape() != std::vector<int64_t>{n, lmax} ||
      boxes.shape() != std::vector<int64_t>{n, bmax, 4} ||
      lengths.shape() != std::vector<int64_t>{n}) {
    return ::testing::AssertionFailure() << "batch " << b.number() << ": shapes";
  }
  for (std::int64_t s = 0; s < n; ++s) {
    const std::uint64_t i = b.indices()[static_cast<std::size_t>(s)];
    if (lengths.data<std::int64_t>()[s] != SequenceDataset::tokens(i) ||
        box_lengths.data<std::int64_t>()[s] != SequenceDataset::boxes(i)) {
      return ::testing::AssertionFailure() << "sample " << i << ": lengths";
    }
    for (std::int64_t j = 0; j < lmax; ++j) {
      const std::int32_t want =
          j < SequenceDataset::tokens(i) ? SequenceDataset::token(i, j) : pad_i32;
      if (tokens.data<std::int32_t>()[s * lmax + j] != want) {
        return ::testing::AssertionFailure() << "sample " << i << " token " << j;
      }
    }
    for (std::int64_t k = 0; k < bmax; ++k) {
      const float* box = boxes.data<float>() + (s * bmax + k) * 4;
      const bool real = k < SequenceDataset::boxes(i);
      const float want[4] = {real ? static_cast<float>(i) : pad_f32,
                             real ? static_cast<float>(k) : pad_f32,
                             real ? -static_cast<float>(i) : pad_f32, real ? 0.5f : pad_f32};
      if (!std::equal(box, box + 4, want)) {
        return ::testing::AssertionFailure() << "sample " << i << " box " << k;
      }
    }
    if (b["label"].cpu().data<std::int64_t>()[s] != static_cast<std::int64_t>(i)) {
      return ::testing::AssertionFailure() << "sample " << i << ": label";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult packed_ok(const Batch& b) {
  const auto n = static_cast<std::int64_t>(b.size());
  const Tensor tokens = b["tokens"].cpu();
  const Tensor boxes = b["boxes"].cpu();
  const Tensor offsets = b.offsets("tokens").cpu();
  const Tensor box_offsets = b.offsets("boxes").cpu();
  const Tensor lengths = b.lengths("tokens").cpu();
  if (offsets.shape() != std::vector<int64_t>{n + 1} || offsets.dtype() != DType::i32 ||
      lengths.shape() != std::vector<int64_t>{n}) {
    return ::testing::AssertionFailure() << "batch " << b.number() << ": table shapes";
  }
  std::int64_t at = 0;
  std::int64_t box_at = 0;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::uint64_t i = b.indices()[static_cast<std::size_t>(s)];
    if (offsets.data<std::int32_t>()[s] != at || box_offsets.data<std::int32_t>()[s] != box_at ||
        lengths.data<std::int64_t>()[s] != SequenceDataset::tokens(i)) {
      return ::testing::AssertionFailure() << "sample " << i << ": offsets";
    }
    for (std::int64_t j = 0; j < SequenceDataset::tokens(i); ++j) {
      if (tokens.data<std::int32_t>()[at + j] != SequenceDataset::token(i, j)) {
        return ::testing::AssertionFailure() << "sample " << i << " token " << j;
      }
    }
    for (std::int64_t k = 0; k < SequenceDataset::boxes(i); ++k) {
      if (boxes.data<float>()[(box_at + k) * 4 + 1] != static_cast<float>(k) ||
          boxes.data<float>()[(box_at + k) * 4] != static_cast<float>(i)) {
        return ::testing::AssertionFailure() << "sample " << i << " box " << k;
      }
    }
    at += SequenceDataset::tokens(i);
    box_at += SequenceDataset::boxes(i);
  }
  if (offsets.data<std::int32_t>()[n] != at || tokens.shape() != std::vector<int64_t>{at} ||
      boxes.shape() != std::vector<int64_t>{box_at, 4}) {
    return ::testing::AssertionFailure() << "batch " << b.number() << ": totals";
  }
  return ::testing::AssertionSuccess();
}

using Order = std::vector<std::vector<std::uint64_t>>;

// Sample i: "seed" i64 [], the seed read() was given.
class SeedDataset : public ferry::Dataset {
 public:
  std::size_t size() const override { return 9; }
  std::vector<FieldSpec> fields() const override { return {{"seed", DType::i64, {}}}; }
  void read(std::size_t, ferry::SampleRef out) const override {
    *out.as<std::int64_t>(0) = static_cast<std::int64_t>(out.seed());
  }
};

TEST(LoaderRagged, ReadSampleGivesASamplesOwnRowsAndTheSeedALoaderGivesIt) {
  const SequenceDataset ds(20, {3});
  for (const std::size_t i : {0U, 1U, 5U, 13U, 19U}) {  // sample 13 has no tokens
    const auto sample = ferry::read_sample(ds, i);
    ASSERT_EQ(sample.size(), 3U);
    EXPECT_EQ(sample[0].first, "tokens");
    const Tensor& tokens = sample[0].second;
    ASSERT_EQ(tokens.shape(), (std::vector<int64_t>{SequenceDataset::tokens(i)}));
    ASSERT_EQ(tokens.dtype(), DType::i32);
    for (std::int64_t j = 0; j < SequenceDataset::tokens(i); ++j) {
      EXPECT_EQ(tokens.data<std::int32_t>()[j], SequenceDataset::token(i, j));
    }
    const Tensor& boxes = sample[1].second;
    ASSERT_EQ(boxes.shape(), (std::vector<int64_t>{SequenceDataset::boxes(i), 4}));
    for (std::int64_t k = 0; k < SequenceDataset::boxes(i); ++k) {
      EXPECT_EQ(boxes.data<float>()[4 * k], static_cast<float>(i));
      EXPECT_EQ(boxes.data<float>()[4 * k + 1], static_cast<float>(k));
    }
    EXPECT_EQ(sample[2].first, "label");
    EXPECT_EQ(sample[2].second.shape(), std::vector<int64_t>{});
    EXPECT_EQ(sample[2].second.data<std::int64_t>()[0], static_cast<std::int64_t>(i));
  }
  expect_error<ferry::DataError>([&] { (void)ferry::read_sample(ds, 3); }, {"sample 3: sample 3"});
  expect_error<ferry::ConfigError>([&] { (void)ferry::read_sample(ds, 20); },
                                   {"read_sample: index 20 is past the last sample (20 samples)"});

  auto seeds = std::make_shared<SeedDataset>();
  for (const auto& [seed, epoch] : {std::pair<std::uint64_t, std::uint64_t>{0, 0}, {7, 3}}) {
    Loader loader = make_loader(seeds, cpu_options(1, true, seed), false);
    std::size_t batches = 0;
    for (const Batch& b : loader.epoch(epoch)) {
      const std::uint64_t i = b.indices()[0];
      EXPECT_EQ(b["seed"].cpu().data<std::int64_t>()[0],
                ferry::read_sample(*seeds, i, seed, epoch)[0].second.data<std::int64_t>()[0])
          << "sample " << i;
      ++batches;
    }
    EXPECT_EQ(batches, 9U);
  }
}

TEST(LoaderRagged, PaddedBatchesHoldEachSampleThenPadding) {
  auto ds = std::make_shared<SequenceDataset>(103);
  Order reference;
  for (const bool copy_stage : {false, true}) {
    for (const std::int64_t multiple : {1, 8}) {
      LoaderOptions o = cpu_options(10, true, 4);
      o.pad_multiple = multiple;
      o.pad_value = -1;
      Loader loader = make_loader(ds, o, copy_stage);
      Order order;
      within(30s, [&] {
        for (const Batch& b : loader.epoch(2)) {
          EXPECT_TRUE(padded_ok(b, multiple, -1, -1.f));
          EXPECT_THROW((void)b.offsets("tokens"), ferry::ConfigError);
          EXPECT_THROW((void)b.lengths("label"), ferry::ConfigError);
          order.emplace_back(b.indices().begin(), b.indices().end());
        }
      });
      EXPECT_EQ(order.size(), 11U);
      if (reference.empty()) reference = order;
      EXPECT_EQ(order, reference);  // the same order, whatever the path and padding
    }
  }
}

TEST(LoaderRagged, PackedBatchesCloseUpWithI32Offsets) {
  auto ds = std::make_shared<SequenceDataset>(77);
  for (const bool copy_stage : {false, true}) {
    LoaderOptions o = cpu_options(16, true, 9);
    o.ragged = RaggedBatch::pack;
    Loader loader = make_loader(ds, o, copy_stage);
    std::size_t samples = 0;
    within(30s, [&] {
      for (std::uint64_t e = 0; e < 3; ++e) {
        for (const Batch& b : loader.epoch(e)) {
          EXPECT_TRUE(packed_ok(b));
          samples += b.size();
        }
      }
    });
    EXPECT_EQ(samples, 3 * 77U);
  }
}

TEST(LoaderRagged, SkippedSamplesLeaveNoHoles) {
  const std::set<std::size_t> bad = {3, 4, 17, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49};
  auto ds = std::make_shared<SequenceDataset>(60, bad);
  for (const RaggedBatch mode : {RaggedBatch::pad, RaggedBatch::pack}) {
    for (const bool copy_stage : {false, true}) {
      LoaderOptions o = cpu_options(10);  // in order: batch 4 is all bad
      o.ragged = mode;
      o.on_error = ferry::ErrorPolicy::skip;
      o.pad_value = 7;
      Loader loader = make_loader(ds, o, copy_stage);
      std::vector<std::uint64_t> got;
      within(30s, [&] {
        for (const Batch& b : loader.epoch(0)) {
          EXPECT_TRUE(mode == RaggedBatch::pad ? padded_ok(b, 1, 7, 7.f) : packed_ok(b));
          got.insert(got.end(), b.indices().begin(), b.indices().end());
        }
      });
      std::vector<std::uint64_t> want;
      for (std::uint64_t i = 0; i < 60; ++i) {
        if (bad.count(i) == 0) want.push_back(i);
      }
      EXPECT_EQ(got, want);
      EXPECT_EQ(loader.stats().skipped, bad.size());
    }
  }
}

// A sample whose length() fails (a file whose header does not read) is, under skip, left out of
// its batch and counted like one whose read() fails: the loader is made, every other sample is
// delivered, in the same batches whatever the workers; the budgeted (max_tokens) plan too.
// Under raise its DataError stays.
TEST(LoaderRagged, ASampleWhoseLengthFailsIsSkippedUnderSkip) {
  const std::set<std::size_t> bad = {0, 6, 7, 30};
  auto ds = std::make_shared<SequenceDataset>(37, bad, true);
  std::vector<std::uint64_t> want;
  for (std::uint64_t i = 0; i < 37; ++i) {
    if (bad.count(i) == 0) want.push_back(i);
  }
  for (const std::uint64_t budget : {std::uint64_t{0}, std::uint64_t{40}}) {
    for (const RaggedBatch mode : {RaggedBatch::pad, RaggedBatch::pack}) {
      Order reference;
      for (const bool copy_stage : {false, true}) {
        for (const int workers : {1, 3}) {
          LoaderOptions o = cpu_options(5, true, 11);
          o.ragged = mode;
          o.max_tokens = budget;
          o.workers = workers;
          o.on_error = ferry::ErrorPolicy::skip;
          o.pad_value = 7;
          Loader loader = make_loader(ds, o, copy_stage);
          std::vector<std::uint64_t> got;
          Order order;
          within(30s, [&] {
            for (const Batch& b : loader.epoch(1)) {
              EXPECT_TRUE(mode == RaggedBatch::pad ? padded_ok(b, 1, 7, 7.f) : packed_ok(b));
              got.insert(got.end(), b.indices().begin(), b.indices().end());
              order.emplace_back(b.indices().begin(), b.indices().end());
            }
          });
          std::sort(got.begin(), got.end());
          EXPECT_EQ(got, want);
          EXPECT_EQ(loader.stats().skipped, bad.size());
          const std::vector<std::string> reasons = loader.stats().skip_reasons;
          ASSERT_EQ(reasons.size(), bad.size());
          for (const std::size_t i : bad) {
            const std::string name = "sample " + std::to_string(i) + " has no length";
            EXPECT_EQ(std::count_if(
                          reasons.begin(), reasons.end(),
                          [&](const std::string& r) { return r.find(name) != std::string::npos; }),
                      1)
                << name;
          }
          if (reference.empty()) reference = order;
          EXPECT_EQ(order, reference);
        }
      }
    }
    LoaderOptions o = cpu_options(5, true, 11);
    o.max_tokens = budget;
    EXPECT_THROW(
        {
          Loader loader = make_loader(ds, o, false);
          for (const Batch& b : loader.epoch(1)) (void)b;
        },
        ferry::DataError);
  }
}

// Padding converts pad_value to the field's dtype, and a field of empty samples only is fine.
class EmptyRows : public ferry::Dataset {
 public:
  std::size_t size() const override { return 5; }
  std::vector<FieldSpec> fields() const override {
    return {{"u", DType::u8, {ferry::ragged, 2}}, {"h", DType::f16, {ferry::ragged}}};
  }
  std::int64_t length(std::size_t index, std::size_t field) const override {
    return field == 0 ? 0 : static_cast<std::int64_t>(index);
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    EXPECT_EQ(out.nbytes(0), 0U);
    const Tensor ones =
        Tensor::from(std::vector<float>(index, 1.f), {static_cast<int64_t>(index)}).to(DType::f16);
    std::copy_n(static_cast<const std::byte*>(ones.data()), out.nbytes(1),
                static_cast<std::byte*>(out.data(1)));
  }
};

// Through the copy stage too, where padding is a batch operation: a field whose rows are all
// empty has an empty padded region (it once made the loader refuse the dataset, with
// "negative dimension in shape [-1]").
TEST(LoaderRagged, PadValueTakesTheFieldsDtypeAndEmptySamplesWork) {
  for (const bool copy_stage : {false, true}) {
    SCOPED_TRACE(copy_stage ? "through the copy stage" : "on the CPU path");
    LoaderOptions o = cpu_options(5);
    o.pad_value = 300.5;  // u8 saturates to 255; f16 rounds to 300.5
    Loader loader = make_loader(std::make_shared<EmptyRows>(), o, copy_stage);
    const Batch* b = nullptr;
    ferry::Epoch epoch = loader.epoch(0);
    b = epoch.next();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ((*b)["u"].shape(), (std::vector<int64_t>{5, 0, 2}));
    const Tensor h = (*b)["h"].cpu().to(DType::f32);
    ASSERT_EQ(h.shape(), (std::vector<int64_t>{5, 4}));
    for (std::int64_t i = 0; i < 5; ++i) {
      for (std::int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(h.data<float>()[i * 4 + j], j < i ? 1.f : 300.5f) << i << " " << j;
      }
    }
    o.ragged = RaggedBatch::pack;
    Loader packed = make_loader(std::make_shared<EmptyRows>(), o, copy_stage);
    ferry::Epoch pe = packed.epoch(0);
    b = pe.next();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ((*b)["u"].shape(), (std::vector<int64_t>{0, 2}));
  }
}

class NoLength : public ferry::Dataset {
 public:
  std::size_t size() const override { return 3; }
  std::vector<FieldSpec> fields() const override { return {{"v", DType::f32, {ferry::ragged}}}; }
  void read(std::size_t /*index*/, ferry::SampleRef /*out*/) const override {}
};

class NegativeLength : public NoLength {
 public:
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return index == 2 ? -3 : 1;
  }
};

TEST(LoaderRagged, DatasetsAndOptionsThatDoNotFitAreRefused) {
  try {
    Loader loader(std::make_shared<NoLength>(), cpu_options(2));
    ADD_FAILURE() << "accepted";
  } catch (const ferry::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("field \"v\" is ragged"), std::string::npos) << e.what();
  }
  try {
    Loader loader(std::make_shared<NegativeLength>(), cpu_options(2));
    ADD_FAILURE() << "accepted";
  } catch (const ferry::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("sample 2 has -3 rows"), std::string::npos) << e.what();
  }
  auto ds = std::make_shared<SequenceDataset>(20);
  LoaderOptions o = cpu_options(4);
  o.pad_multiple = 0;
  EXPECT_THROW(Loader(ds, o), ferry::ConfigError);
  // A sample longer than any the dataset had at open fails its batch, naming it.
  Loader loader(ds, cpu_options(4));
  ds->grow();
  within(30s, [&] {
    std::size_t delivered = 0;
    try {
      for (const Batch& b : loader.epoch(0)) delivered += b.size();
      ADD_FAILURE() << "no error";
    } catch (const ferry::DataError& e) {
      EXPECT_NE(std::string(e.what()).find("sample 5 has 100 rows"), std::string::npos) << e.what();
    }
    EXPECT_EQ(delivered, 4U);  // batch 0; batch 1 holds sample 5
  });
}

// Lengths that change once the batches are cut: the loader and each epoch's plan (on the
// thread that made the dataset) see sample 0 with 32 rows and the others with 1; any other
// thread (the planner, which places each batch in its slot) sees 32 rows for every sample. Each
// is within the longest the loader was made for, but a batch cut for 32 tokens now holds 16 x 32.
class ShiftingLengths : public ferry::Dataset {
 public:
  std::size_t size() const override { return 40; }
  std::vector<FieldSpec> fields() const override {
    return {{"tokens", DType::i32, {ferry::ragged}}, {"id", DType::i64, {}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    return index == 0 || std::this_thread::get_id() != maker_ ? 32 : 1;
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* t = out.as<std::int32_t>(0);
    std::fill(t, t + out.nbytes(0) / 4, static_cast<std::int32_t>(index));
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }

 private:
  std::thread::id maker_ = std::this_thread::get_id();
};

TEST(LoaderRagged, ABatchPastItsSlotsRegionIsADataErrorNamingTheSample) {
  for (const bool copy_stage : {false, true}) {
    for (const RaggedBatch mode : {RaggedBatch::pack, RaggedBatch::pad}) {
      SCOPED_TRACE(std::string(copy_stage ? "copy stage, " : "cpu, ") +
                   (mode == RaggedBatch::pack ? "pack" : "pad"));
      // The budget sizes the region at 32 rows: batch 0 is sample 0 alone, batch 1 samples 1
      // to 16 (16 tokens when cut, 512 when placed).
      LoaderOptions o = cpu_options(16);
      o.max_tokens = 32;
      o.ragged = mode;
      Loader loader = make_loader(std::make_shared<ShiftingLengths>(), o, copy_stage);
      ferry::Epoch epoch = loader.epoch(0);  // planned here, on the dataset's thread
      within(30s, [&] {
        std::size_t delivered = 0;
        try {
          for (const Batch& b : epoch) delivered += b.size();
          ADD_FAILURE() << "no error";
        } catch (const ferry::DataError& e) {
          // Packed: sample 2's rows pass the region; padded (in the slot, or after the copy
          // stage): sample 1 raises Lmax to 32, and 16 x 32 rows pass it.
          const std::string sample =
              mode == RaggedBatch::pack ? "sample 2 has 32 rows" : "sample 1 has 32 rows";
          EXPECT_NE(std::string(e.what()).find(sample), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("past the 32 rows"), std::string::npos) << e.what();
        }
        EXPECT_EQ(delivered, 1U);  // batch 0
      });
    }
  }
}

// SequenceDataset's samples with each ragged field's longest declared (Dataset::max_length:
// `tokens_max` and 3, or -1 for neither, as a dataset that does not know), counting the lengths
// the loader asks.
class DeclaredSequences : public SequenceDataset {
 public:
  DeclaredSequences(std::size_t n, std::int64_t tokens_max)
      : SequenceDataset(n), max_(tokens_max) {}
  std::int64_t length(std::size_t index, std::size_t field) const override {
    asked.fetch_add(1);
    return SequenceDataset::length(index, field);
  }
  std::int64_t max_length(std::size_t field) const override {
    return max_ < 0 ? -1 : field == 0 ? max_ : 3;
  }
  mutable std::atomic<std::uint64_t> asked{0};

 private:
  std::int64_t max_;
};

TEST(LoaderRagged, ADatasetThatDeclaresItsLongestSampleIsAskedNoLengthWhenTheLoaderIsMade) {
  constexpr std::size_t kSamples = 200'000;
  for (const bool copy_stage : {false, true}) {
    SCOPED_TRACE(copy_stage ? "copy stage" : "cpu");
    // Declared (the true longest, 12 tokens, and a loose 40): no length is asked until batches
    // are planned, and then only theirs.
    for (const std::int64_t declared : {12, 40}) {
      auto ds = std::make_shared<DeclaredSequences>(kSamples, declared);
      LoaderOptions o = cpu_options(16, true, 3);
      o.prefetch = 2;
      Loader loader = make_loader(ds, o, copy_stage);
      EXPECT_EQ(ds->asked.load(), 0U);
      within(30s, [&] {
        ferry::Epoch epoch = loader.epoch(0);
        for (int k = 0; k < 3; ++k) {
          const Batch* b = epoch.next();
          ASSERT_NE(b, nullptr);
          EXPECT_TRUE(padded_ok(*b, 1, 0, 0.f));
        }
      });
      // Three batches taken, a few more planned ahead: two fields of 16 samples each.
      EXPECT_LE(ds->asked.load(), 2U * 16 * 16) << "declared " << declared;
    }
    // Not declared: every sample's two lengths, once, when the loader is made.
    auto unknown = std::make_shared<DeclaredSequences>(kSamples, -1);
    Loader loader = make_loader(unknown, cpu_options(16, true, 3), copy_stage);
    EXPECT_EQ(unknown->asked.load(), 2 * kSamples);
  }
  // The same batches, declared or not (a short epoch, every batch checked).
  Order declared;
  Order walked;
  for (const std::int64_t max : {40, -1}) {
    Loader loader =
        make_loader(std::make_shared<DeclaredSequences>(203, max), cpu_options(16, true, 8), false);
    within(30s, [&] {
      for (const Batch& b : loader.epoch(1)) {
        EXPECT_TRUE(padded_ok(b, 1, 0, 0.f));
        (max < 0 ? walked : declared).emplace_back(b.indices().begin(), b.indices().end());
      }
    });
  }
  EXPECT_EQ(declared.size(), 13U);
  EXPECT_EQ(declared, walked);
}

TEST(LoaderRagged, ASampleLongerThanItsDatasetsMaxLengthIsADataErrorNamingItAfterTheBatchesBefore) {
  // Tokens of samples 0 to 7: 0, 7, 1, 8, 2, 9, 3, 10. Declared at most 8: batch 1 (samples 4
  // to 7) holds sample 5, 9 rows.
  for (const bool copy_stage : {false, true}) {
    for (const RaggedBatch mode : {RaggedBatch::pad, RaggedBatch::pack}) {
      SCOPED_TRACE(std::string(copy_stage ? "copy stage, " : "cpu, ") +
                   (mode == RaggedBatch::pack ? "pack" : "pad"));
      LoaderOptions o = cpu_options(4);
      o.ragged = mode;
      Loader loader = make_loader(std::make_shared<DeclaredSequences>(40, 8), o, copy_stage);
      std::vector<std::uint64_t> delivered;
      within(30s, [&] {
        try {
          for (const Batch& b : loader.epoch(0)) {
            EXPECT_TRUE(mode == RaggedBatch::pad ? padded_ok(b, 1, 0, 0.f) : packed_ok(b));
            delivered.insert(delivered.end(), b.indices().begin(), b.indices().end());
          }
          ADD_FAILURE() << "no error";
        } catch (const ferry::DataError& e) {
          EXPECT_NE(std::string(e.what()).find("sample 5 has 9 rows"), std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("max_length() said at most 8"), std::string::npos)
              << e.what();
        }
      });
      EXPECT_EQ(delivered, (std::vector<std::uint64_t>{0, 1, 2, 3}));
    }
  }
}

}  // namespace
