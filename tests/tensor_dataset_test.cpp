#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"

namespace {

using ferry::ConfigError;
using ferry::Device;
using ferry::DeviceError;
using ferry::DType;
using ferry::Tensor;
using ferry::TensorDataset;
using Fields = std::vector<std::pair<std::string, Tensor>>;
using Bytes = std::vector<std::uint8_t>;

// Sample i of `ds`, every field's bytes one after another, read as the loader reads it.
Bytes sample(const ferry::Dataset& ds, std::size_t i) {
  const ferry::detail::SlotLayout layout(ds.fields(), 1);
  std::vector<std::byte> slot(layout.bytes);
  ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, 0));
  Bytes out;
  for (std::size_t f = 0; f < layout.offsets.size(); ++f) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data() + layout.offsets[f]);
    out.insert(out.end(), p, p + layout.sample_bytes[f]);
  }
  return out;
}

// 7 samples: "x" f32 [3] = {i, i + 0.5, -i}, "y" i64 [] = 100 - i.
std::shared_ptr<TensorDataset> seven() {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (int i = 0; i < 7; ++i) {
    x.insert(x.end(),
             {static_cast<float>(i), static_cast<float>(i) + 0.5F, -static_cast<float>(i)});
    y.push_back(100 - i);
  }
  return std::make_shared<TensorDataset>(
      Fields{{"x", Tensor::from(x, {7, 3})}, {"y", Tensor::from(y, {7})}});
}

TEST(TensorDataset, ToTheDeviceItIsOnSharesTheStorageAndTheSamples) {
  const auto ds = seven();
  const auto same = ds->to(Device::cpu());
  ASSERT_NE(same, nullptr);
  EXPECT_NE(same.get(), ds.get());
  EXPECT_EQ(same->device(), Device::cpu());
  EXPECT_EQ(same->fields(), ds->fields());
  ASSERT_EQ(same->size(), 7U);
  ASSERT_EQ(same->rows_in_memory().size(), 2U);
  for (std::size_t f = 0; f < 2; ++f) {
    EXPECT_TRUE(same->tensors()[f].shares_storage_with(ds->tensors()[f])) << f;
    EXPECT_EQ(same->tensors()[f].data(), ds->tensors()[f].data()) << f;
  }
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(sample(*same, i), sample(*ds, i)) << i;
  float x[3];
  std::memcpy(x, sample(*same, 4).data(), sizeof x);
  EXPECT_EQ(x[1], 4.5F);
}

TEST(TensorDataset, ToAGpuIsADeviceErrorWithoutOneAndARoundTripWithOne) {
  const auto ds = seven();
  if (!ferry::cuda_is_available()) {
    EXPECT_THROW((void)ds->to(Device::cuda()), DeviceError);
    return;
  }
  const auto gpu = ds->to(Device::cuda());
  EXPECT_EQ(gpu->device(), Device::cuda());
  EXPECT_EQ(gpu->fields(), ds->fields());
  EXPECT_THROW((void)sample(*gpu, 0), ConfigError);  // rows on a GPU are gathered, not read
  const auto back = gpu->to(Device::cpu());
  for (std::size_t i = 0; i < 7; ++i) EXPECT_EQ(sample(*back, i), sample(*ds, i)) << i;
}

TEST(TensorDataset, FieldsOfNoBytesAreReadWithoutTouchingMemory) {
  // "e" has no bytes a sample (and an empty tensor may have no data pointer at all).
  const auto ds = std::make_shared<TensorDataset>(
      Fields{{"e", Tensor::empty({3, 0}, DType::f32)},
             {"y", Tensor::from(std::vector<std::int64_t>{4, 5, 6}, {3})}});
  for (std::size_t i = 0; i < 3; ++i) {
    const Bytes s = sample(*ds, i);
    std::int64_t y = 0;
    ASSERT_EQ(s.size(), sizeof y);
    std::memcpy(&y, s.data(), sizeof y);
    EXPECT_EQ(y, static_cast<std::int64_t>(4 + i));
  }
  ds->prefetch(3);  // past the end: a hint, ignored
  EXPECT_EQ(ds->to(Device::cpu())->size(), 3U);
}

}  // namespace
