#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/convert_rules.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::BFloat16;
using ferry::DType;
using ferry::Half;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <class D, class S>
D convert_one(S value) {
  D out{};
  ferry::convert(&value, ferry::dtype_of<S>(), &out, ferry::dtype_of<D>(), 1);
  return out;
}

TEST(DType, SizesAndNames) {
  const std::vector<std::pair<DType, std::size_t>> sizes = {
      {DType::u8, 1},  {DType::u16, 2}, {DType::u32, 4},  {DType::i32, 4},
      {DType::i64, 8}, {DType::f16, 2}, {DType::bf16, 2}, {DType::f32, 4},
      {DType::f64, 8}, {DType::i8, 1},  {DType::i16, 2},  {DType::u64, 8}};
  for (const auto& [t, size] : sizes) {
    EXPECT_EQ(ferry::dtype_size(t), size);
    EXPECT_EQ(ferry::parse_dtype(ferry::dtype_name(t)), t);
  }
  EXPECT_EQ(ferry::dtype_name(DType::bf16), "bf16");
  // Added after the first nine, which keep their values.
  EXPECT_EQ(static_cast<int>(DType::f64), 8);
  EXPECT_EQ(static_cast<int>(DType::i8), 9);
  EXPECT_EQ(ferry::dtype_name(DType::i8), "i8");
  EXPECT_EQ(ferry::dtype_name(DType::i16), "i16");
  EXPECT_EQ(ferry::dtype_name(DType::u64), "u64");
  EXPECT_EQ(ferry::parse_dtype("int8"), DType::i8);
  EXPECT_EQ(ferry::parse_dtype("int16"), DType::i16);
  EXPECT_EQ(ferry::parse_dtype("uint64"), DType::u64);
  EXPECT_EQ(ferry::dtype_of<std::int8_t>(), DType::i8);
  EXPECT_EQ(ferry::dtype_of<std::int16_t>(), DType::i16);
  EXPECT_EQ(ferry::dtype_of<std::uint64_t>(), DType::u64);
  EXPECT_EQ((convert_one<std::int64_t, std::int8_t>(-5)), -5);
  EXPECT_EQ((convert_one<std::uint64_t, std::int16_t>(-1)), ~std::uint64_t{0});
  EXPECT_EQ((convert_one<float, std::uint64_t>(std::uint64_t{1} << 40)), 1099511627776.0F);
  EXPECT_EQ((convert_one<std::int8_t, float>(300.0F)), 127);  // saturates
  // u64 beyond i64 to bf16 rounds once: 2^64 - 1 is 2^64.
  EXPECT_EQ(ferry::to_float(convert_one<ferry::BFloat16, std::uint64_t>(~std::uint64_t{0})),
            18446744073709551616.0F);
  EXPECT_EQ(ferry::parse_dtype("float32"), DType::f32);
  EXPECT_EQ(ferry::parse_dtype("half"), DType::f16);
  EXPECT_EQ(ferry::parse_dtype("uint8"), DType::u8);
  EXPECT_EQ(ferry::parse_dtype("uint16"), DType::u16);
  EXPECT_EQ(ferry::parse_dtype("uint32"), DType::u32);
  EXPECT_EQ(ferry::dtype_name(DType::u16), "u16");
  EXPECT_EQ(ferry::dtype_name(DType::u32), "u32");
  EXPECT_EQ(ferry::dtype_of<std::uint16_t>(), DType::u16);
  EXPECT_EQ(ferry::dtype_of<std::uint32_t>(), DType::u32);
  EXPECT_FALSE(ferry::is_floating(DType::u16));
  EXPECT_FALSE(ferry::is_floating(DType::u32));
  EXPECT_THROW((void)ferry::parse_dtype("f8"), ferry::ConfigError);
  EXPECT_TRUE(ferry::is_floating(DType::bf16));
  EXPECT_FALSE(ferry::is_floating(DType::i64));
}

struct HalfCase {
  double value;
  std::uint16_t bits;
};

TEST(DType, HalfRoundsToNearestEvenWithExactTable) {
  const HalfCase cases[] = {
      {0.0, 0x0000},
      {-0.0, 0x8000},
      {1.0, 0x3c00},
      {-2.0, 0xc000},
      {65504.0, 0x7bff},   // largest finite
      {65519.99, 0x7bff},  // just below the overflow threshold
      {65520.0, 0x7c00},   // ties away to infinity (even is 2^16)
      {1e6, 0x7c00},       // overflow
      {-1e6, 0xfc00},
      {std::ldexp(1.0, -14), 0x0400},        // smallest normal
      {std::ldexp(1.0, -24), 0x0001},        // smallest subnormal
      {std::ldexp(1.0, -25), 0x0000},        // tie between 0 and 2^-24: even is 0
      {std::ldexp(3.0, -26), 0x0001},        // above that tie
      {std::ldexp(3.0, -25), 0x0002},        // tie between 1 and 2 units: even is 2
      {std::ldexp(1023.5, -24), 0x0400},     // top subnormal rounds up into the normals
      {1.0 + std::ldexp(1.0, -11), 0x3c00},  // tie: to even mantissa 0
      {1.0 + std::ldexp(3.0, -11), 0x3c02},  // tie: to even mantissa 2
      {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 0x3c01},  // no double rounding
      {2049.0, 0x6800},                                             // 2048, tie to even
      {2051.0, 0x6802},                                             // 2052
      {1.0 / 3.0, 0x3555},
      {kInf, 0x7c00},
      {-kInf, 0xfc00},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ferry::to_half(c.value).bits, c.bits) << c.value;
    if (c.value == static_cast<double>(static_cast<float>(c.value))) {
      // The same through the bulk f32 path.
      EXPECT_EQ(convert_one<Half>(static_cast<float>(c.value)).bits, c.bits) << c.value;
    }
    EXPECT_EQ(convert_one<Half>(c.value).bits, c.bits) << c.value;
  }
  const Half nan = ferry::to_half(kNaN);
  EXPECT_EQ(nan.bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan.bits & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(ferry::to_float(nan)));
  EXPECT_TRUE(std::signbit(ferry::to_float(ferry::to_half(-kNaN))));
}

TEST(DType, BFloat16RoundsToNearestEvenWithExactTable) {
  const HalfCase cases[] = {
      {0.0, 0x0000},
      {-0.0, 0x8000},
      {1.0, 0x3f80},
      {1.0 + std::ldexp(1.0, -8), 0x3f80},  // tie: even
      {1.0 + std::ldexp(3.0, -8), 0x3f82},  // tie: even
      {1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), 0x3f81},
      {3.3895313892515355e38, 0x7f7f},                                   // largest finite
      {static_cast<double>(std::numeric_limits<float>::max()), 0x7f80},  // rounds to infinity
      {std::ldexp(1.0, -126), 0x0080},                                   // smallest normal
      {std::ldexp(1.0, -133), 0x0001},                                   // smallest subnormal
      {std::ldexp(1.0, -134), 0x0000},                                   // tie with 0
      {kInf, 0x7f80},
      {-kInf, 0xff80},
      {-3.0, 0xc040},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ferry::to_bfloat16(c.value).bits, c.bits) << c.value;
    EXPECT_EQ(convert_one<BFloat16>(c.value).bits, c.bits) << c.value;
  }
  EXPECT_TRUE(std::isnan(ferry::to_float(ferry::to_bfloat16(kNaN))));
  EXPECT_TRUE(
      std::isnan(ferry::to_float(convert_one<BFloat16>(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, EveryHalfAndBFloat16RoundTripsThroughFloat) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    const float h = ferry::to_float(Half{bits});
    const float bf = ferry::to_float(BFloat16{bits});
    if (std::isnan(h)) {
      EXPECT_TRUE(std::isnan(ferry::to_float(ferry::to_half(h))));
    } else {
      ASSERT_EQ(ferry::to_half(h).bits, bits) << std::hex << b;
      ASSERT_EQ(convert_one<Half>(h).bits, bits) << std::hex << b;
    }
    if (std::isnan(bf)) {
      EXPECT_TRUE(std::isnan(ferry::to_float(ferry::to_bfloat16(bf))));
    } else {
      ASSERT_EQ(ferry::to_bfloat16(bf).bits, bits) << std::hex << b;
      std::uint32_t u = 0;
      std::memcpy(&u, &bf, sizeof u);
      ASSERT_EQ(u >> 16, b);  // exact widening
    }
  }
  EXPECT_EQ(ferry::to_float(Half{0x7bff}), 65504.0f);
  EXPECT_EQ(ferry::to_float(Half{0x0001}), std::ldexp(1.0f, -24));
}

TEST(DType, FloatToIntegerTruncatesSaturatesAndMapsNaNToZero) {
  EXPECT_EQ(convert_one<std::int32_t>(2.9), 2);
  EXPECT_EQ(convert_one<std::int32_t>(-2.9), -2);
  EXPECT_EQ(convert_one<std::int32_t>(kNaN), 0);
  EXPECT_EQ(convert_one<std::int32_t>(1e10), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(convert_one<std::int32_t>(-1e10), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(convert_one<std::int32_t>(kInf), std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(convert_one<std::int32_t>(-kInf), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(convert_one<std::int32_t>(2147483647.0), 2147483647);
  EXPECT_EQ(convert_one<std::int32_t>(-2147483648.0), std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(convert_one<std::uint8_t>(300.0f), 255);
  EXPECT_EQ(convert_one<std::uint8_t>(-1.0f), 0);
  EXPECT_EQ(convert_one<std::uint8_t>(255.9f), 255);
  EXPECT_EQ(convert_one<std::uint8_t>(-0.9f), 0);
  EXPECT_EQ(convert_one<std::int64_t>(std::ldexp(1.0, 63)),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(convert_one<std::int64_t>(-std::ldexp(1.0, 63)),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(convert_one<std::int64_t>(std::ldexp(1.0, 62)), std::int64_t{1} << 62);
  EXPECT_EQ(convert_one<std::int64_t>(ferry::to_half(-3.75)), -3);
  EXPECT_EQ(convert_one<std::uint8_t>(ferry::to_bfloat16(kInf)), 255);
  EXPECT_EQ(convert_one<std::int64_t>(ferry::to_bfloat16(kNaN)), 0);
}

TEST(DType, IntegerToIntegerWrapsModuloAsCpp20) {
  EXPECT_EQ(convert_one<std::int32_t>((std::int64_t{1} << 32) + 5), 5);
  EXPECT_EQ(convert_one<std::uint8_t>(std::int32_t{-1}), 255);
  EXPECT_EQ(convert_one<std::uint8_t>(std::int32_t{300}), 44);
  EXPECT_EQ(convert_one<std::int64_t>(std::int32_t{-7}), -7);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint8_t{200}), 200);
}

TEST(DType, IntegerToFloatRoundsOnceToNearestEven) {
  EXPECT_EQ(convert_one<float>(std::int64_t{(1 << 24) + 1}), 16777216.0f);
  EXPECT_EQ(convert_one<float>(std::int64_t{(1 << 24) + 3}), 16777220.0f);
  EXPECT_EQ(convert_one<float>(std::int32_t{(1 << 24) + 1}), 16777216.0f);
  EXPECT_EQ(convert_one<double>((std::int64_t{1} << 53) + 1), std::ldexp(1.0, 53));
  EXPECT_EQ(convert_one<Half>(std::int32_t{2049}).bits, 0x6800);
  EXPECT_EQ(convert_one<Half>(std::int64_t{70000}).bits, 0x7c00);
  EXPECT_EQ(convert_one<Half>(std::numeric_limits<std::int64_t>::min()).bits, 0xfc00);
  EXPECT_EQ(convert_one<BFloat16>(std::int32_t{257}).bits, ferry::to_bfloat16(256.0).bits);
  EXPECT_EQ(convert_one<BFloat16>(std::int32_t{259}).bits, ferry::to_bfloat16(260.0).bits);
  // 2^60 + 2^52 + 1: through double it would become the tie 2^60 + 2^52 and then 2^60; rounded
  // once it is above the tie and goes up to 2^60 + 2^53.
  const std::int64_t v = (std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1;
  EXPECT_EQ(convert_one<BFloat16>(v).bits, 0x5d81);
  EXPECT_EQ(convert_one<BFloat16>(-v).bits, 0xdd81);
  EXPECT_EQ(convert_one<float>(std::uint8_t{255}), 255.0f);
}

TEST(DType, FloatWideningAndNarrowingKeepsNaNAndInfinity) {
  EXPECT_EQ(convert_one<float>(1e300), std::numeric_limits<float>::infinity());
  EXPECT_EQ(convert_one<float>(-1e300), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(convert_one<float>(kNaN)));
  EXPECT_TRUE(std::isnan(convert_one<double>(ferry::to_half(kNaN))));
  EXPECT_EQ(convert_one<double>(ferry::to_half(-kInf)), -kInf);
  EXPECT_EQ(convert_one<float>(1.0 + std::ldexp(1.0, -24)), 1.0f);  // tie: even
  EXPECT_EQ(convert_one<float>(1.0 + std::ldexp(3.0, -24)), 1.0f + std::ldexp(1.0f, -22));
  EXPECT_EQ(convert_one<double>(ferry::to_bfloat16(1.5)), 1.5);
  EXPECT_EQ(convert_one<Half>(ferry::to_bfloat16(1e20)).bits, 0x7c00);
  EXPECT_EQ(convert_one<BFloat16>(ferry::to_half(65504.0)).bits, ferry::to_bfloat16(65504.0).bits);
}

TEST(DType, NaNBecomesTheCanonicalQuietNaNWithItsSign) {
  const std::uint32_t signalling_f32 = 0x7f800001u;
  const std::uint32_t negative_payload_f32 = 0xffc12345u;
  float f = 0;
  std::memcpy(&f, &signalling_f32, sizeof f);
  double d = convert_one<double>(f);
  std::uint64_t d_bits = 0;
  std::memcpy(&d_bits, &d, sizeof d_bits);
  EXPECT_EQ(d_bits, 0x7ff8000000000000u);
  std::memcpy(&f, &negative_payload_f32, sizeof f);
  EXPECT_EQ(convert_one<Half>(f).bits, 0xfe00);
  EXPECT_EQ(convert_one<BFloat16>(f).bits, 0xffc0);
  EXPECT_EQ(convert_one<std::int32_t>(f), 0);
  const float back = convert_one<float>(Half{0x7c01});  // signalling half NaN with payload 1
  std::uint32_t back_bits = 0;
  std::memcpy(&back_bits, &back, sizeof back_bits);
  EXPECT_EQ(back_bits, 0x7fc00000u);
  EXPECT_EQ(convert_one<Half>(BFloat16{0xff81}).bits, 0xfe00);
  const float from_double = convert_one<float>(-kNaN);
  std::memcpy(&back_bits, &from_double, sizeof back_bits);
  EXPECT_EQ(back_bits, 0xffc00000u);
}

TEST(DType, FastFloatPathsAgreeWithTheExactRoundingAcrossAllExponents) {
  namespace rules = ferry::detail::rules;
  // Every exponent, many mantissas, both signs: a stride through all 2^32 patterns plus the
  // patterns next to every rounding boundary of half (mantissa low 13 bits near 0x1000).
  std::vector<std::uint32_t> patterns;
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 4093)
    patterns.push_back(static_cast<std::uint32_t>(u));
  for (std::uint32_t e = 0; e < 255; ++e) {
    for (std::uint32_t low :
         {0x0fffu, 0x1000u, 0x1001u, 0x2fffu, 0x3000u, 0x3001u, 0x7fffu, 0x8000u, 0x8001u}) {
      for (std::uint32_t high : {0u, 1u, 0x3ffu, 0x155u}) {
        patterns.push_back((e << 23) | (high << 13) | low);
        patterns.push_back(0x80000000u | (e << 23) | (high << 13) | low);
      }
    }
  }
  for (const std::uint32_t u : patterns) {
    float f = 0;
    std::memcpy(&f, &u, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(rules::half_bits_of_float(u), rules::half_bits(f)) << std::hex << u;
    ASSERT_EQ(rules::bfloat16_bits_of_float(u), rules::bfloat16_bits(f)) << std::hex << u;
  }
}

TEST(DType, BulkConvertMatchesElementRulesForEveryPair) {
  const std::vector<double> values = {0.0, -0.0, 1.5, -1.5, 2.5, 255.0, 65504.0, -70000.0, 1e-8};
  const DType all[] = {DType::u8,  DType::u16,  DType::u32, DType::i32, DType::i64,
                       DType::f16, DType::bf16, DType::f32, DType::f64};
  for (const DType from : all) {
    std::vector<unsigned char> src(values.size() * ferry::dtype_size(from));
    ferry::convert(values.data(), DType::f64, src.data(), from, values.size());
    for (const DType to : all) {
      std::vector<unsigned char> bulk(values.size() * ferry::dtype_size(to));
      ferry::convert(src.data(), from, bulk.data(), to, values.size());
      for (std::size_t i = 0; i < values.size(); ++i) {
        std::vector<unsigned char> one(ferry::dtype_size(to));
        ferry::convert(src.data() + i * ferry::dtype_size(from), from, one.data(), to, 1);
        EXPECT_EQ(std::memcmp(one.data(), bulk.data() + i * ferry::dtype_size(to), one.size()), 0)
            << ferry::dtype_name(from) << " -> " << ferry::dtype_name(to) << " at " << i;
      }
      if (from == to) {
        EXPECT_EQ(bulk, src);
      }
    }
  }
}

// u16 and u32 to every dtype on the edges of each destination, against values worked out by
// hand: modulo 2^bits into integers, one rounding into floating types.
TEST(DType, UnsignedSixteenAndThirtyTwoBitsConvertToEveryDtype) {
  constexpr std::uint16_t u16_max = 0xffff;
  EXPECT_EQ(convert_one<std::uint8_t>(std::uint16_t{255}), 255);
  EXPECT_EQ(convert_one<std::uint8_t>(std::uint16_t{256}), 0);
  EXPECT_EQ(convert_one<std::uint8_t>(u16_max), 255);
  EXPECT_EQ(convert_one<std::uint32_t>(u16_max), 65535u);
  EXPECT_EQ(convert_one<std::int32_t>(u16_max), 65535);
  EXPECT_EQ(convert_one<std::int64_t>(std::uint16_t{32768}), 32768);
  EXPECT_EQ(convert_one<float>(u16_max), 65535.0f);
  EXPECT_EQ(convert_one<double>(u16_max), 65535.0);
  EXPECT_EQ(convert_one<Half>(std::uint16_t{2049}).bits, 0x6800);   // 2048: tie to even
  EXPECT_EQ(convert_one<Half>(std::uint16_t{65504}).bits, 0x7bff);  // largest finite
  EXPECT_EQ(convert_one<Half>(std::uint16_t{65519}).bits, 0x7bff);
  EXPECT_EQ(convert_one<Half>(std::uint16_t{65520}).bits, 0x7c00);    // the tie goes to infinity
  EXPECT_EQ(convert_one<BFloat16>(std::uint16_t{257}).bits, 0x4380);  // 256: tie to even
  EXPECT_EQ(convert_one<BFloat16>(u16_max).bits, 0x4780);             // 65536

  constexpr std::uint32_t u32_max = 0xffffffffu;
  EXPECT_EQ(convert_one<std::uint8_t>(u32_max), 255);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint32_t{65536}), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint32_t{65537}), 1);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint32_t{0x7fffffffu}), 0x7fffffff);
  EXPECT_EQ(convert_one<std::int32_t>(std::uint32_t{0x80000000u}),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(convert_one<std::int32_t>(u32_max), -1);
  EXPECT_EQ(convert_one<std::int64_t>(u32_max), std::int64_t{0xffffffff});
  EXPECT_EQ(convert_one<double>(u32_max), 4294967295.0);
  EXPECT_EQ(convert_one<float>(u32_max), 4294967296.0f);
  EXPECT_EQ(convert_one<float>(std::uint32_t{16777217}), 16777216.0f);  // tie to even
  EXPECT_EQ(convert_one<float>(std::uint32_t{16777219}), 16777220.0f);
  EXPECT_EQ(convert_one<Half>(std::uint32_t{65536}).bits, 0x7c00);
  EXPECT_EQ(convert_one<Half>(u32_max).bits, 0x7c00);
  EXPECT_EQ(convert_one<BFloat16>(u32_max).bits, 0x4f80);                     // 2^32
  EXPECT_EQ(convert_one<BFloat16>(std::uint32_t{0x80800000u}).bits, 0x4f00);  // tie: to even
  EXPECT_EQ(convert_one<BFloat16>(std::uint32_t{0x80800001u}).bits, 0x4f01);
  EXPECT_EQ(convert_one<std::uint32_t>(std::uint16_t{0}), 0u);
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint32_t{0}), 0);
}

// Every dtype to u16 and u32 on the edges: integers wrap modulo 2^bits, floating values
// truncate toward zero and saturate at 0 and the maximum, NaN gives 0.
TEST(DType, EveryDtypeConvertsToUnsignedSixteenAndThirtyTwoBits) {
  EXPECT_EQ(convert_one<std::uint16_t>(std::uint8_t{255}), 255);
  EXPECT_EQ(convert_one<std::uint32_t>(std::uint8_t{255}), 255u);
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{-1}), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(std::int32_t{65536 + 7}), 7);
  EXPECT_EQ(convert_one<std::uint16_t>(std::numeric_limits<std::int32_t>::min()), 0);
  EXPECT_EQ(convert_one<std::uint32_t>(std::int32_t{-1}), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(std::numeric_limits<std::int32_t>::min()), 0x80000000u);
  EXPECT_EQ(convert_one<std::uint32_t>(std::int64_t{(std::int64_t{1} << 32) + 5}), 5u);
  EXPECT_EQ(convert_one<std::uint32_t>(std::numeric_limits<std::int64_t>::min()), 0u);
  EXPECT_EQ(convert_one<std::uint32_t>(std::numeric_limits<std::int64_t>::max()), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint16_t>(std::int64_t{-2}), 65534);

  EXPECT_EQ(convert_one<std::uint16_t>(65535.9), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(65536.0), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(1e10), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(-0.9), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(-1.0), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(kNaN), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(kInf), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(-kInf), 0);
  EXPECT_EQ(convert_one<std::uint16_t>(2.9f), 2);
  EXPECT_EQ(convert_one<std::uint32_t>(4294967295.0), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(4294967295.75), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(4294967296.0), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(2147483648.5), 2147483648u);
  EXPECT_EQ(convert_one<std::uint32_t>(-1e30), 0u);
  EXPECT_EQ(convert_one<std::uint32_t>(kNaN), 0u);
  EXPECT_EQ(convert_one<std::uint32_t>(4294967296.0f), 0xffffffffu);  // f32 rounds 2^32 - 1 up
  EXPECT_EQ(convert_one<std::uint32_t>(4294967040.0f), 4294967040u);  // largest f32 below 2^32
  EXPECT_EQ(convert_one<std::uint32_t>(std::numeric_limits<float>::quiet_NaN()), 0u);
  EXPECT_EQ(convert_one<std::uint16_t>(ferry::to_half(65504.0)), 65504);
  EXPECT_EQ(convert_one<std::uint16_t>(ferry::to_half(kInf)), 65535);
  EXPECT_EQ(convert_one<std::uint16_t>(ferry::to_half(-3.75)), 0);
  EXPECT_EQ(convert_one<std::uint32_t>(ferry::to_half(kInf)), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(ferry::to_half(kNaN)), 0u);
  EXPECT_EQ(convert_one<std::uint16_t>(ferry::to_bfloat16(1e6)), 65535);
  EXPECT_EQ(convert_one<std::uint32_t>(ferry::to_bfloat16(1e6)), 999424u);  // bf16 of 1e6
  EXPECT_EQ(convert_one<std::uint32_t>(ferry::to_bfloat16(1e20)), 0xffffffffu);
  EXPECT_EQ(convert_one<std::uint32_t>(ferry::to_bfloat16(-kInf)), 0u);
}

// Every u16 survives a trip through every dtype that holds it (all but u8, f16 and bf16), and
// u32 values at the edges through i64 and f64; the wider types give them back unchanged too.
TEST(DType, UnsignedValuesRoundTripThroughWiderDtypes) {
  std::vector<std::uint16_t> all16(65536);
  for (std::size_t i = 0; i < all16.size(); ++i) all16[i] = static_cast<std::uint16_t>(i);
  for (const DType via : {DType::u32, DType::i32, DType::i64, DType::f32, DType::f64}) {
    std::vector<unsigned char> wide(all16.size() * ferry::dtype_size(via));
    ferry::convert(all16.data(), DType::u16, wide.data(), via, all16.size());
    std::vector<std::uint16_t> back(all16.size());
    ferry::convert(wide.data(), via, back.data(), DType::u16, back.size());
    EXPECT_EQ(back, all16) << ferry::dtype_name(via);
  }
  std::vector<std::uint32_t> edges32 = {0,          1,          255,         256,
                                        65535,      65536,      16777217,    0x7fffffffu,
                                        0x80000000, 0x80000001, 0xfffffffeu, 0xffffffffu};
  for (std::uint64_t v = 0; v <= 0xffffffffu; v += 0x01000193u)
    edges32.push_back(static_cast<std::uint32_t>(v));
  for (const DType via : {DType::i64, DType::f64}) {
    std::vector<unsigned char> wide(edges32.size() * ferry::dtype_size(via));
    ferry::convert(edges32.data(), DType::u32, wide.data(), via, edges32.size());
    std::vector<std::uint32_t> back(edges32.size());
    ferry::convert(wide.data(), via, back.data(), DType::u32, back.size());
    EXPECT_EQ(back, edges32) << ferry::dtype_name(via);
  }
  // Through i32 the bits survive (modulo 2^32 both ways).
  std::vector<std::int32_t> as_i32(edges32.size());
  ferry::convert(edges32.data(), DType::u32, as_i32.data(), DType::i32, edges32.size());
  std::vector<std::uint32_t> back(edges32.size());
  ferry::convert(as_i32.data(), DType::i32, back.data(), DType::u32, back.size());
  EXPECT_EQ(back, edges32);
  // u16 through u8 keeps the low byte only.
  const std::uint16_t wide16[] = {0x1234, 0x00ff};
  std::uint8_t narrow[2] = {};
  ferry::convert(wide16, DType::u16, narrow, DType::u8, 2);
  EXPECT_EQ(narrow[0], 0x34);
  EXPECT_EQ(narrow[1], 0xff);
}

TEST(Convert, CountsWhoseBytesOverflowAndUnknownDtypesAreConfigErrors) {
  using ferry::testing::expect_error;
  float in = 1.5f;
  double out = 0;
  constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();
  // count x 8 bytes wraps around: no element may be touched.
  expect_error<ferry::ConfigError>(
      [&] { ferry::convert(&in, DType::f32, &out, DType::f64, kMaxSize / 4); },
      {"convert", "4611686018427387903 x 8"});
  expect_error<ferry::ConfigError>(
      [&] { ferry::convert(&in, DType::f32, &in, DType::f32, kMaxSize); }, {"convert"});
  expect_error<ferry::ConfigError>(
      [&] { ferry::convert(&in, static_cast<DType>(42), &out, DType::f64, 1); },
      {"convert", "unknown dtype 42"});
  expect_error<ferry::ConfigError>(
      [&] { ferry::convert(nullptr, DType::f32, &out, DType::f64, 1); }, {"convert", "null"});
  EXPECT_EQ(out, 0.0);
  ferry::convert(nullptr, DType::f32, nullptr, DType::f64, 0);  // nothing to do
  ferry::convert(&in, DType::f32, &out, DType::f64, 1);
  EXPECT_EQ(out, 1.5);
}

}  // namespace
