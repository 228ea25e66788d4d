// normalize_images and hwc_to_chw on the GPU give the same bits as the same call on the CPU, for
// every output dtype, channel count and odd image sizes, and run after the copy that brings
// their input.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DType;
using ferry::Normalize;
using ferry::Tensor;
using ferry::cuda_testing::CudaParamTest;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_tensor;

/// Batches [N, H, W] and single images [H, W], less their channels: odd sizes, empty ones, and
/// one big enough for many blocks.
const std::vector<std::vector<std::int64_t>> kGeometries = {
    {0, 1, 1}, {1, 1, 1}, {2, 7, 13}, {3, 31, 17}, {1, 224, 224}, {5, 0, 9}, {61, 97}, {1, 1}};

std::vector<std::int64_t> image_shape(std::vector<std::int64_t> geometry, std::int64_t channels) {
  geometry.push_back(channels);
  return geometry;
}

Tensor random_images(const std::vector<std::int64_t>& shape, DType dtype, std::uint64_t seed) {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  const std::vector<std::uint8_t> bytes =
      pattern(static_cast<std::size_t>(n) * ferry::dtype_size(dtype), seed);
  return Tensor::from_bytes(bytes.data(), bytes.size(), shape, dtype);
}

Normalize norm_for(std::int64_t channels, DType dtype, bool pixel_units) {
  Normalize norm;
  norm.dtype = dtype;
  if (pixel_units) {  // DALI's way: mean and std in 0..255
    norm.scale = 1.0f;
    norm.mean = {123.675f, 116.28f, 103.53f, 127.5f};
    norm.std = {58.395f, 57.12f, 57.375f, 64.0f};
  } else {  // torchvision's ImageNet values, and one odd fourth channel
    norm.mean = {0.485f, 0.456f, 0.406f, 0.3f};
    norm.std = {0.229f, 0.224f, 0.225f, 0.1f};
  }
  norm.mean.resize(static_cast<std::size_t>(channels));
  norm.std.resize(static_cast<std::size_t>(channels));
  return norm;
}

struct NormalizeCase {
  DType dtype;
  std::int64_t channels;
};

void PrintTo(const NormalizeCase& p, std::ostream* os) {
  *os << ferry::dtype_name(p.dtype) << ", " << p.channels << " channels";
}

std::vector<NormalizeCase> normalize_cases() {
  std::vector<NormalizeCase> out;
  for (const DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (const std::int64_t c : {1, 3, 4}) out.push_back({t, c});
  }
  return out;
}

std::string normalize_name(const ::testing::TestParamInfo<NormalizeCase>& info) {
  return std::string(ferry::dtype_name(info.param.dtype)) + "_" +
         std::to_string(info.param.channels) + "_channels";
}

class GpuNormalize : public CudaParamTest<NormalizeCase> {};

TEST_P(GpuNormalize, MatchesTheCpuBitForBit) {
  const NormalizeCase p = GetParam();
  std::uint64_t seed = 1;
  for (const auto& g : kGeometries) {
    for (const bool pixel_units : {false, true}) {
      const std::vector<std::int64_t> shape = image_shape(g, p.channels);
      const Tensor images = random_images(shape, DType::u8, seed++);
      const Normalize norm = norm_for(p.channels, p.dtype, pixel_units);
      const Tensor expected = ferry::normalize_images(images, norm);

      const Tensor gpu = ferry::normalize_images(images.to(Device::cuda()), norm);
      EXPECT_EQ(gpu.device(), Device::cuda(0));
      EXPECT_EQ(gpu.shape(), expected.shape());
      EXPECT_TRUE(same_tensor(expected, gpu.cpu()))
          << "shape " << ::testing::PrintToString(shape) << ", pixel units " << pixel_units;

      // Queued behind a non-blocking copy from pinned memory, and copied back non-blocking.
      const Tensor queued =
          ferry::normalize_images(images.pin_memory().to(Device::cuda(), true), norm);
      EXPECT_TRUE(same_tensor(expected, queued.to(Device::cpu(), true)))
          << "non-blocking, shape " << ::testing::PrintToString(shape);
    }
  }
}

TEST_P(GpuNormalize, OneMeanAndStdForAllChannels) {
  const NormalizeCase p = GetParam();
  const Tensor images = random_images({2, 19, 23, p.channels}, DType::u8, 99);
  Normalize norm;
  norm.dtype = p.dtype;
  norm.mean = {0.5f};
  norm.std = {0.25f};
  EXPECT_TRUE(same_tensor(ferry::normalize_images(images, norm),
                          ferry::normalize_images(images.to(Device::cuda()), norm).cpu()));
}

INSTANTIATE_TEST_SUITE_P(DtypesAndChannels, GpuNormalize, ::testing::ValuesIn(normalize_cases()),
                         normalize_name);

class GpuNormalizeBatch : public CudaTest {};

TEST_F(GpuNormalizeBatch, LargeBatchAfterANonBlockingCopy) {
  // 64 images of 224 x 224 x 3: 9.6 MB cross the bus, then the kernel reads them.
  const Tensor images = random_images({64, 224, 224, 3}, DType::u8, 7);
  const Normalize norm = norm_for(3, DType::f16, false);
  const Tensor expected = ferry::normalize_images(images, norm);
  const Tensor gpu = ferry::normalize_images(images.pin_memory().to(Device::cuda(), true), norm);
  EXPECT_EQ(gpu.shape(), (std::vector<std::int64_t>{64, 3, 224, 224}));
  EXPECT_TRUE(same_tensor(expected, gpu.cpu()));
}

struct ChwCase {
  DType dtype;
  std::int64_t channels;
};

void PrintTo(const ChwCase& p, std::ostream* os) {
  *os << ferry::dtype_name(p.dtype) << ", " << p.channels << " channels";
}

std::vector<ChwCase> chw_cases() {
  std::vector<ChwCase> out;
  // u8, f16, f32 and i64: element sizes 1, 2, 4 and 8.
  for (const DType t : {DType::u8, DType::f16, DType::f32, DType::i64}) {
    for (const std::int64_t c : {1, 3, 4, 7}) out.push_back({t, c});
  }
  return out;
}

std::string chw_name(const ::testing::TestParamInfo<ChwCase>& info) {
  return std::string(ferry::dtype_name(info.param.dtype)) + "_" +
         std::to_string(info.param.channels) + "_channels";
}

class GpuHwcToChw : public CudaParamTest<ChwCase> {};

TEST_P(GpuHwcToChw, MatchesTheCpuBitForBit) {
  const ChwCase p = GetParam();
  std::uint64_t seed = 1000;
  for (const auto& g : kGeometries) {
    const std::vector<std::int64_t> shape = image_shape(g, p.channels);
    // Random bytes: for f16 and f32 these include NaN patterns, which must move unchanged.
    const Tensor images = random_images(shape, p.dtype, seed++);
    const Tensor expected = ferry::hwc_to_chw(images);
    const Tensor gpu = ferry::hwc_to_chw(images.pin_memory().to(Device::cuda(), true));
    EXPECT_EQ(gpu.device(), Device::cuda(0));
    EXPECT_EQ(gpu.dtype(), p.dtype);
    EXPECT_TRUE(same_tensor(expected, gpu.cpu())) << "shape " << ::testing::PrintToString(shape);
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndChannels, GpuHwcToChw, ::testing::ValuesIn(chw_cases()),
                         chw_name);

}  // namespace
