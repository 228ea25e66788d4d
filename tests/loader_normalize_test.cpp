// FieldSpec::normalize: the dataset writes u8 [H, W, C]; batches deliver the normalized
// [C, H, W] tensor, converted by the workers (CPU path) or by the copy stage after the copy
// (device path, here the simulated one). Checked value for value against normalize_images.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace ferry::testing {
namespace {

constexpr std::int64_t kH = 5, kW = 7;

/// Sample i: "image" u8 [5, 7, C] with pixel bytes from (i, position), normalized by the loader
/// with `norm`; "label" i64 [] = i. Throws for the indices in `bad`.
class PixelDataset : public Dataset {
 public:
  PixelDataset(std::size_t n, std::int64_t channels, std::optional<Normalize> norm,
               std::set<std::size_t> bad = {})
      : n_(n), c_(channels), norm_(std::move(norm)), bad_(std::move(bad)) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    std::vector<FieldSpec> f(2);
    f[0].name = "image";
    f[0].dtype = DType::u8;
    f[0].shape = {kH, kW, c_};
    f[0].normalize = norm_;
    f[1].name = "label";
    f[1].dtype = DType::i64;
    return f;
  }
  void read(std::size_t index, SampleRef out) const override {
    if (bad_.count(index) != 0) throw DataError("PixelDataset: img" + std::to_string(index));
    auto* p = out.as<std::uint8_t>(0);
    for (std::int64_t j = 0; j < kH * kW * c_; ++j) p[j] = pixel(index, j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }
  static std::uint8_t pixel(std::size_t index, std::int64_t j) {
    return static_cast<std::uint8_t>((index * 53 + static_cast<std::size_t>(j) * 11) % 256);
  }
  /// Sample i's raw image, as a [5, 7, C] tensor.
  Tensor raw(std::size_t index) const {
    Tensor t = Tensor::empty({kH, kW, c_}, DType::u8);
    for (std::int64_t j = 0; j < kH * kW * c_; ++j) t.data<std::uint8_t>()[j] = pixel(index, j);
    return t;
  }

 private:
  std::size_t n_;
  std::int64_t c_;
  std::optional<Normalize> norm_;
  std::set<std::size_t> bad_;
};

/// Checks every batch of one epoch: shape [N, C, 5, 7] of norm.dtype, and each sample's bytes
/// equal to normalize_images of its raw pixels. Returns the indices delivered.
std::vector<std::uint64_t> check_epoch(Loader& loader, const PixelDataset& ds,
                                       const Normalize& norm, std::int64_t channels) {
  std::vector<std::uint64_t> seen;
  for (const Batch& b : loader.epoch(0)) {
    const Tensor image = b["image"].cpu();
    const auto n = static_cast<std::int64_t>(b.size());
    EXPECT_EQ(image.dtype(), norm.dtype);
    EXPECT_EQ(image.shape(), (std::vector<int64_t>{n, channels, kH, kW}));
    const std::size_t per = image.nbytes() / static_cast<std::size_t>(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t index = b.indices()[static_cast<std::size_t>(i)];
      EXPECT_EQ(b["label"].cpu().data<std::int64_t>()[i], static_cast<std::int64_t>(index));
      const Tensor want = normalize_images(ds.raw(index), norm);
      EXPECT_EQ(want.nbytes(), per);
      if (want.nbytes() != per) continue;
      const std::byte* got =
          static_cast<const std::byte*>(image.data()) + static_cast<std::size_t>(i) * per;
      EXPECT_EQ(std::memcmp(got, want.data(), per), 0) << "sample " << index << " differs";
      seen.push_back(index);
    }
  }
  return seen;
}

Normalize imagenet() {
  Normalize n;
  n.mean = {0.485f, 0.456f, 0.406f};
  n.std = {0.229f, 0.224f, 0.225f};
  return n;
}

TEST(LoaderNormalize, WorkersNormalizeOnTheCpu) {
  const auto ds = std::make_shared<PixelDataset>(45, 3, imagenet());
  Loader loader(ds, cpu_options(8, /*shuffle=*/true, 3));
  const auto seen = check_epoch(loader, *ds, imagenet(), 3);
  EXPECT_EQ(std::set<std::uint64_t>(seen.begin(), seen.end()).size(), 45u);
}

TEST(LoaderNormalize, TheCopyStageNormalizesAfterTheCopyOnTheDevicePath) {
  Normalize half = imagenet();
  half.dtype = DType::f16;
  for (const Normalize& norm : {imagenet(), half}) {
    const auto ds = std::make_shared<PixelDataset>(37, 3, norm);
    LoaderOptions o = cpu_options(8, /*shuffle=*/true, 5);
    Loader loader = make_loader(ds, o, true);
    EXPECT_EQ(check_epoch(loader, *ds, norm, 3).size(), 37u);
  }
}

TEST(LoaderNormalize, OneChannelAndPixelUnits) {
  Normalize norm;
  norm.mean = {128.0f};
  norm.std = {64.0f};
  norm.scale = 1.0f;
  norm.dtype = DType::bf16;
  const auto ds = std::make_shared<PixelDataset>(20, 1, norm);
  for (const bool device_path : {false, true}) {
    LoaderOptions o = cpu_options(6);
    Loader loader = make_loader(ds, o, device_path);
    EXPECT_EQ(check_epoch(loader, *ds, norm, 1).size(), 20u);
  }
}

TEST(LoaderNormalize, SkippedSamplesLeaveTheNormalizedOnesInPlace) {
  const std::set<std::size_t> bad = {0, 5, 6, 17};
  const auto ds = std::make_shared<PixelDataset>(24, 3, imagenet(), bad);
  for (const bool device_path : {false, true}) {
    LoaderOptions o = cpu_options(8);
    o.on_error = ErrorPolicy::skip;
    Loader loader = make_loader(ds, o, device_path);
    const auto seen = check_epoch(loader, *ds, imagenet(), 3);
    std::vector<std::uint64_t> want;
    for (std::uint64_t i = 0; i < 24; ++i) {
      if (bad.count(i) == 0) want.push_back(i);
    }
    EXPECT_EQ(seen, want);
    EXPECT_EQ(loader.stats().skipped, bad.size());
  }
}

TEST(LoaderNormalize, RejectsANormalizeItCannotApply) {
  Normalize zero = imagenet();
  zero.std = {0.2f, 0.0f, 0.2f};
  EXPECT_THROW(Loader(std::make_shared<PixelDataset>(4, 3, zero), cpu_options(2)), ConfigError);
  Normalize two = imagenet();
  two.mean = {0.5f, 0.5f};
  try {
    Loader(std::make_shared<PixelDataset>(4, 3, two), cpu_options(2));
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("field \"image\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("mean has 2 values"), std::string::npos) << e.what();
  }

  // Only u8 [H, W, C] can be normalized.
  class FloatImages : public IndexDataset {
   public:
    FloatImages() : IndexDataset(4) {}
    std::vector<FieldSpec> fields() const override {
      auto f = IndexDataset::fields();
      f[2].normalize = Normalize{};
      return f;
    }
  };
  EXPECT_THROW(Loader(std::make_shared<FloatImages>(), cpu_options(2)), ConfigError);
}

}  // namespace
}  // namespace ferry::testing
