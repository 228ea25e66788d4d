#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/image_ops.hpp"
#include "expect_error.hpp"
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

// The CPU twin against a plain scalar std::fma, over every byte value in every channel, for
// factor sets that reach f16's overflow and subnormals and ties of every output type: both the
// kernel convert_image_cpu picks at run time (AVX2 + FMA where the CPU has them) and the
// portable one, in both layouts, with pixel counts that leave vector tails.
TEST(NormalizeImages, EveryByteMatchesAScalarFmaInEveryKernel) {
  struct Factors {
    float mul, add;
  };
  const std::vector<Factors> sets = {{1.0f / 255.0f, 0.0f},
                                     {1.0f / 255.0f, -0.0f},
                                     {0.01712475f, -2.117904f},
                                     {0.017507f, -2.0357141f},
                                     {0.01742919f, -1.804444f},
                                     {1.0f, -128.0f},
                                     {300.0f, -0.5f},
                                     {1e-6f, 0.0f},
                                     {-0.5f, 3.25f},
                                     {3.0517578e-05f, 6.1035156e-05f},
                                     {0.1f, -12.7f},
                                     {7.0f / 3.0f, 1e-3f}};
  const std::int64_t n = 2, h = 13, w = 21;  // 273 pixels a plane: all 256 values, odd tails
  for (const std::int64_t c : {1, 2, 3, 4}) {
    std::vector<std::uint8_t> src(static_cast<std::size_t>(n * h * w * c));
    for (std::size_t i = 0; i < src.size(); ++i) {
      src[i] = static_cast<std::uint8_t>((i / static_cast<std::size_t>(c)) * 97 + i * 31 + 5);
    }
    for (std::size_t first = 0; first < sets.size(); ++first) {
      ferry::detail::ImageConvert a;
      a.src = src.data();
      a.n = n;
      a.h = h;
      a.w = w;
      a.c = c;
      a.normalize = true;
      for (std::size_t k = 0; k < static_cast<std::size_t>(c); ++k) {
        a.mul[k] = sets[(first + k) % sets.size()].mul;
        a.add[k] = sets[(first + k) % sets.size()].add;
      }
      for (const DType dtype : {DType::f32, DType::f16, DType::bf16}) {
        a.dst_dtype = dtype;
        const std::size_t elem = ferry::dtype_size(dtype);
        for (const bool chw : {true, false}) {
          a.to_chw = chw;
          std::vector<std::uint8_t> expected(src.size() * elem);
          for (std::int64_t i = 0; i < n * h * w * c; ++i) {
            const std::int64_t img = i / (h * w * c), p = i / c % (h * w), ch = i % c;
            const auto k = static_cast<std::size_t>(ch);
            const float v =
                std::fma(static_cast<float>(src[static_cast<std::size_t>(i)]), a.mul[k], a.add[k]);
            const std::int64_t at = chw ? (img * c + ch) * h * w + p : i;
            std::uint8_t* to = expected.data() + static_cast<std::size_t>(at) * elem;
            if (dtype == DType::f32) {
              std::memcpy(to, &v, elem);
            } else {
              const std::uint16_t bits =
                  dtype == DType::f16 ? ferry::to_half(v).bits : ferry::to_bfloat16(v).bits;
              std::memcpy(to, &bits, elem);
            }
          }
          for (const bool portable : {false, true}) {
            std::vector<std::uint8_t> got(expected.size(), 0xa5);
            a.dst = got.data();
            if (portable) {
              ferry::detail::convert_image_cpu_portable(a);
            } else {
              ferry::detail::convert_image_cpu(a);
            }
            ASSERT_EQ(got, expected)
                << ferry::dtype_name(dtype) << " c=" << c << " set " << first
                << (chw ? " chw" : " hwc") << (portable ? " portable" : " dispatched");
          }
        }
      }
    }
  }
}

// The reference above is worth having: for ImageNet's factors a separate multiply and add (two
// roundings) differs from the fused result for some bytes.
TEST(NormalizeImages, FusedAndUnfusedDifferForImageNetFactors) {
  const float mul = 0.01712475f;
  const float add = -2.117904f;
  int differ = 0;
  for (int x = 0; x < 256; ++x) {
    volatile float product = static_cast<float>(x) * mul;  // rounded here, not contracted
    differ += std::fma(static_cast<float>(x), mul, add) != product + add ? 1 : 0;
  }
  EXPECT_GT(differ, 0);
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

TEST(NormalizeImages, ImagesWithNoPixelsGiveAnEmptyResultAtOnce) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  // N x H beyond any memory, W = 0: no pixels, and no loop over 2^40 images of none.
  const Tensor wide = Tensor::empty({kHuge, kHuge, 0, 3}, DType::u8);
  const Tensor out = ferry::normalize_images(wide, Normalize{});
  EXPECT_EQ(out.shape(), (std::vector<int64_t>{kHuge, 3, kHuge, 0}));
  EXPECT_EQ(out.dtype(), DType::f32);
  // N = 0: H x W would overflow int64 if the kernel formed it.
  const Tensor none = Tensor::empty({0, kHuge, kHuge, 3}, DType::u8);
  EXPECT_EQ(ferry::normalize_images(none, Normalize{}).numel(), 0);
  EXPECT_EQ(ferry::hwc_to_chw(none.to(DType::f16)).shape(),
            (std::vector<int64_t>{0, 3, kHuge, kHuge}));
}

TEST(NormalizeImages, UndefinedImagesAreAConfigError) {
  ferry::testing::expect_error<ferry::ConfigError>(
      [] { (void)ferry::normalize_images(Tensor(), Normalize{}); },
      {"normalize_images", "undefined"});
  ferry::testing::expect_error<ferry::ConfigError>([] { (void)ferry::hwc_to_chw(Tensor()); },
                                                   {"hwc_to_chw", "undefined"});
}

}  // namespace
