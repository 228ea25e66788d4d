#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using ferry::DType;
using ferry::Normalize;
using ferry::Tensor;

// [N, H, W, C] images whose pixel (n, y, x, c) is a known function of its coordinates.
Tensor images(int64_t n, int64_t h, int64_t w, int64_t c) {
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n * h * w * c));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
  return Tensor::from(v, {n, h, w, c});
}

std::uint8_t pixel(const Tensor& t, int64_t n, int64_t y, int64_t x, int64_t c) {
  const auto& s = t.shape();
  return t.data<std::uint8_t>()[((n * s[1] + y) * s[2] + x) * s[3] + c];
}

TEST(NormalizeImages, F32IsChannelFirstAndComputedWithOneFma) {
  const Tensor in = images(2, 3, 5, 3);
  const Normalize norm{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
  const Tensor out = ferry::normalize_images(in, norm);
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{2, 3, 3, 5}));
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(out.device(), ferry::Device::cpu());
  const float* o = out.data<float>();
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t c = 0; c < 3; ++c) {
      const auto k = static_cast<std::size_t>(c);
      const float mul = norm.scale / norm.std[k];
      const float add = -norm.mean[k] / norm.std[k];
      for (int64_t y = 0; y < 3; ++y) {
        for (int64_t x = 0; x < 5; ++x) {
          const float expected = std::fma(static_cast<float>(pixel(in, n, y, x, c)), mul, add);
          ASSERT_EQ(o[((n * 3 + c) * 3 + y) * 5 + x], expected) << n << c << y << x;
          // And it is the normalization a user expects, to float precision.
          EXPECT_NEAR(expected, (pixel(in, n, y, x, c) / 255.0 - norm.mean[k]) / norm.std[k], 1e-5);
        }
      }
    }
  }
}

TEST(NormalizeImages, HalfAndBFloat16AreTheF32ResultRoundedOnce) {
  const Tensor in = images(1, 4, 3, 4);
  for (const DType dtype : {DType::f16, DType::bf16}) {
    const Normalize norm{{0.5f}, {0.25f}, 1.0f / 255.0f, dtype};
    const Tensor ref = ferry::normalize_images(in, Normalize{{0.5f}, {0.25f}});
    const Tensor out = ferry::normalize_images(in, norm);
    EXPECT_EQ(out.dtype(), dtype);
    const float* r = ref.data<float>();
    const auto* bits = static_cast<const std::uint16_t*>(out.data());
    for (int64_t i = 0; i < out.numel(); ++i) {
      const auto expected =
          dtype == DType::f16 ? ferry::to_half(r[i]).bits : ferry::to_bfloat16(r[i]).bits;
      ASSERT_EQ(bits[i], expected) << ferry::dtype_name(dtype) << " at " << i;
    }
  }
}

TEST(NormalizeImages, SingleImageAndPixelUnits) {
  const Tensor in = images(1, 2, 2, 1).reshape({2, 2, 1});
  const Tensor out = ferry::normalize_images(in, Normalize{{128.0f}, {2.0f}, 1.0f});
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{1, 2, 2}));
  for (int64_t i = 0; i < 4; ++i) {
    const float x = in.data<std::uint8_t>()[i];
    EXPECT_EQ(out.data<float>()[i], std::fma(x, 0.5f, -64.0f));
  }
}

TEST(NormalizeImages, DefaultsScaleToZeroOne) {
  const Tensor in = images(1, 2, 3, 1);
  const Tensor out = ferry::normalize_images(in, Normalize{});
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float x = in.data<std::uint8_t>()[i];
    EXPECT_EQ(out.data<float>()[i], std::fma(x, 1.0f / 255.0f, -0.0f));
    EXPECT_NEAR(out.data<float>()[i], x / 255.0f, 1e-7);
  }
}

TEST(NormalizeImages, RejectsBadArgumentsWithConfigError) {
  const Tensor in = images(1, 2, 2, 3);
  const Normalize ok{{0.5f}, {0.5f}};
  EXPECT_THROW((void)ferry::normalize_images(in.to(DType::f32), ok), ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in.reshape({12}), ok), ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(images(1, 1, 1, 5), ok), ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{0.1f, 0.2f}, {0.5f}}),
               ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{0.1f}, {0.5f, 0.0f, 1.0f}}),
               ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{0.1f}, {0.5f}, 1.0f, DType::i32}),
               ferry::ConfigError);
  // Factors that are not finite could make NaN, whose bits differ between CPU and GPU.
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{std::nanf("")}, {0.5f}}),
               ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{0.5f}, {1e-45f}}), ferry::ConfigError);
  EXPECT_THROW((void)ferry::normalize_images(in, Normalize{{0.5f}, {INFINITY}}),
               ferry::ConfigError);
  try {
    (void)ferry::normalize_images(in, Normalize{{0.1f}, {0.0f}});
    FAIL();
  } catch (const ferry::ConfigError& e) {
    EXPECT_STREQ(e.what(), "normalize_images: std of channel 0 is 0");
  }
}

TEST(HwcToChw, MovesElementsOfEveryWidth) {
  const Tensor u8 = images(2, 3, 4, 3);
  for (const DType dtype : {DType::u8, DType::f32, DType::i64, DType::f16}) {
    const Tensor in = u8.to(dtype);
    const Tensor out = ferry::hwc_to_chw(in);
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{2, 3, 3, 4}));
    EXPECT_EQ(out.dtype(), dtype);
    const Tensor back = out.to(DType::u8);
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < 3; ++y)
          for (int64_t x = 0; x < 4; ++x)
            ASSERT_EQ(back.data<std::uint8_t>()[((n * 3 + c) * 3 + y) * 4 + x],
                      pixel(u8, n, y, x, c));
  }
  EXPECT_THROW((void)ferry::hwc_to_chw(Tensor::empty({4, 4}, DType::u8)), ferry::ConfigError);
}

}  // namespace
