// Tensor::to(DType) on the GPU gives the same bits as ferry::convert on the CPU, for all 81
// (from, to) pairs, on the values where conversions go wrong: signed zeros, ties, the edges of
// f16's range, denormals, NaN, infinities, integer limits and 2^53 + 1.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DType;
using ferry::Tensor;
using ferry::cuda_testing::CudaParamTest;

constexpr DType kTypes[] = {DType::u8,  DType::u16, DType::u32,  DType::i32,
                            DType::i64, DType::f16, DType::bf16, DType::f32,
                            DType::f64, DType::i8,  DType::i16,  DType::u64};

// Doubles for the floating sources; f32 gets them through ferry::convert (overflow to infinity
// is defined there, unlike a C++ cast).
std::vector<double> special_doubles() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // clang-format off
  std::vector<double> v = {
      0.0, -0.0, 1.5, -1.5, 2.5, -2.5, 0.5, -0.5, 1.0, -1.0, 0.49999999999999994, 3.5,
      65504.0, -65504.0, 65519.99, 65520.0, -65520.0, 65536.0, 1e-8, -1e-8,
      5.9604644775390625e-08,   // smallest f16 denormal
      2.98023223876953125e-08,  // half of it: a tie to even, to 0
      2.9802322387695313e-08,   // just above that tie
      6.097555160522461e-05,    // largest f16 denormal
      6.103515625e-05,          // smallest f16 normal
      1e-45, -1e-45,            // f32 denormal
      1.1754942106924411e-38,   // largest f32 denormal
      1.1754943508222875e-38,   // smallest f32 normal
      9.183549615799121e-41,    // bf16 denormal
      4.9406564584124654e-324, -4.9406564584124654e-324,  // f64 denormal
      2.2250738585072014e-308, nan, -nan, inf, -inf,
      127.5, 128.0, 255.0, 255.5, 256.0, -128.5, -129.0, 257.0, 259.0, 2049.0, 2051.0,
      2147483647.0, 2147483647.9, 2147483648.0, -2147483648.0, -2147483648.9, -2147483649.0,
      9007199254740992.0, 9007199254740994.0, 16777217.0, 16777219.0,
      9223372036854775807.0, -9223372036854775808.0, 1e19, -1e19,
      3.4028234663852886e38, 3.4028235677973366e38, 3.4028235677973362e38,
      3.3895313892515355e38,    // bf16 max
      3.3961775292304172e38,    // rounds past bf16 max
      1e300, -1e300, 0.1, 1.0 / 3.0, -2.0 / 3.0, 3.141592653589793, 1e10, -123456.789};
  // clang-format on
  return v;
}

std::vector<std::int64_t> special_integers() {
  const std::int64_t i32_min = std::numeric_limits<std::int32_t>::min();
  const std::int64_t i32_max = std::numeric_limits<std::int32_t>::max();
  const std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
  const std::int64_t i64_max = std::numeric_limits<std::int64_t>::max();
  const std::int64_t p53 = std::int64_t{1} << 53;
  // clang-format off
  return {0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 257, 259, 2049, 2051, 32767, 32768,
          65504, 65519, 65520, 65535, 65536, 16777216, 16777217, 16777219, -16777217,
          i32_max, i32_min, i32_min + 1, i32_max + 1, i32_min - 1, 1000000007, -123456789,
          std::int64_t{1} << 40, (std::int64_t{1} << 40) + (std::int64_t{1} << 32) + 1,
          p53 - 1, p53, p53 + 1, -(p53 + 1), p53 + 3, p53 * 2 + 2,
          (std::int64_t{1} << 62) + (std::int64_t{1} << 54),      // a bf16 tie, to even
          (std::int64_t{1} << 62) + (std::int64_t{1} << 54) + 1,  // above it; twice rounded: below
          i64_max, i64_min, i64_min + 1, i64_max - 1};
  // clang-format on
}

template <class T>
void append(std::vector<std::uint8_t>& out, T value) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
  out.insert(out.end(), p, p + sizeof value);
}

/// The source elements for `from`, as bytes.
std::vector<std::uint8_t> source_bytes(DType from) {
  std::vector<std::uint8_t> out;
  const std::vector<double> doubles = special_doubles();
  const std::vector<std::int64_t> ints = special_integers();
  switch (from) {
    case DType::u8:
      for (int i = 0; i < 256; ++i) out.push_back(static_cast<std::uint8_t>(i));
      break;
    case DType::u16:
      for (std::uint32_t v = 0; v < 0x10000U; ++v) append(out, static_cast<std::uint16_t>(v));
      break;
    case DType::u32:
      for (const std::int64_t v : ints) append(out, static_cast<std::uint32_t>(v));  // modulo 2^32
      break;
    case DType::i32:
      for (const std::int64_t v : ints) append(out, static_cast<std::int32_t>(v));  // modulo 2^32
      break;
    case DType::i64:
      for (const std::int64_t v : ints) append(out, v);
      break;
    case DType::i8:
      for (int i = -128; i < 128; ++i) append(out, static_cast<std::int8_t>(i));
      break;
    case DType::i16:
      for (std::int32_t v = -0x8000; v < 0x8000; ++v) append(out, static_cast<std::int16_t>(v));
      break;
    case DType::u64:
      for (const std::int64_t v : ints) append(out, static_cast<std::uint64_t>(v));  // modulo 2^64
      for (const std::uint64_t v : {std::uint64_t{1} << 63U, (std::uint64_t{1} << 63U) + 1,
                                    ~std::uint64_t{0}, (std::uint64_t{1} << 53U) + 1}) {
        append(out, v);
      }
      break;
    case DType::f16:
    case DType::bf16:
      // Every 16-bit pattern: all denormals, both zeros, infinities and every NaN.
      for (std::uint32_t bits = 0; bits < 0x10000U; ++bits) {
        append(out, static_cast<std::uint16_t>(bits));
      }
      break;
    case DType::f32: {
      std::vector<float> f(doubles.size());
      ferry::convert(doubles.data(), DType::f64, f.data(), DType::f32, doubles.size());
      for (const float v : f) append(out, v);
      const std::uint32_t raw[] = {0x00000001U, 0x80000001U, 0x007fffffU, 0x00800000U, 0x7f7fffffU,
                                   0xff7fffffU, 0x7f800001U, 0xffbfffffU, 0x7fc00000U, 0xffc00000U,
                                   0x7fffffffU, 0x33000000U, 0x33000001U, 0x477fefffU, 0x477ff000U,
                                   0x3f808000U, 0x3f818000U, 0x4b800001U, 0x5f000000U, 0xdf000000U,
                                   0x4effffffU, 0x4f000000U, 0xcf000000U, 0xcf000001U};
      for (const std::uint32_t r : raw) append(out, r);
      break;
    }
    case DType::f64: {
      for (const double v : doubles) append(out, v);
      const std::uint64_t raw[] = {0x0000000000000001ULL, 0x7ff0000000000001ULL,
                                   0xfff8000000000001ULL, 0x7ff8000000000000ULL,
                                   0x36a0000000000000ULL, 0x3e70000000000000ULL,
                                   0x3e70000000000001ULL, 0x43e0000000000000ULL,
                                   0xc3e0000000000000ULL, 0xc3e0000000000001ULL};
      for (const std::uint64_t r : raw) append(out, r);
      break;
    }
  }
  return out;
}

bool is_nan(const std::uint8_t* p, DType t) {
  switch (t) {
    case DType::f16: {
      std::uint16_t b = 0;
      std::memcpy(&b, p, 2);
      return (b & 0x7c00U) == 0x7c00U && (b & 0x03ffU) != 0;
    }
    case DType::bf16: {
      std::uint16_t b = 0;
      std::memcpy(&b, p, 2);
      return (b & 0x7f80U) == 0x7f80U && (b & 0x007fU) != 0;
    }
    case DType::f32: {
      float f = 0;
      std::memcpy(&f, p, 4);
      return f != f;
    }
    case DType::f64: {
      double d = 0;
      std::memcpy(&d, p, 8);
      return d != d;
    }
    default:
      return false;
  }
}

std::string hex(const std::uint8_t* p, std::size_t n) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setfill('0');
  for (std::size_t i = n; i > 0; --i) os << std::setw(2) << static_cast<int>(p[i - 1]);
  return os.str();
}

struct Pair {
  DType from;
  DType to;
};

void PrintTo(const Pair& p, std::ostream* os) {
  *os << ferry::dtype_name(p.from) << " to " << ferry::dtype_name(p.to);
}

std::vector<Pair> all_pairs() {
  std::vector<Pair> out;
  for (const DType f : kTypes) {
    for (const DType t : kTypes) out.push_back({f, t});
  }
  return out;
}

std::string pair_name(const ::testing::TestParamInfo<Pair>& info) {
  return std::string(ferry::dtype_name(info.param.from)) + "_to_" +
         std::string(ferry::dtype_name(info.param.to));
}

/// Compares element by element; NaN sources are reported apart, since a NaN payload is where
/// two correct-looking implementations most easily differ.
::testing::AssertionResult same_elements(const std::vector<std::uint8_t>& src, DType from,
                                         const std::uint8_t* expected, const std::uint8_t* actual,
                                         DType to, std::size_t count) {
  const std::size_t in = ferry::dtype_size(from);
  const std::size_t out = ferry::dtype_size(to);
  std::size_t value_mismatches = 0;
  std::size_t nan_mismatches = 0;
  std::ostringstream os;
  int shown = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (std::memcmp(expected + i * out, actual + i * out, out) == 0) continue;
    const bool nan_source = is_nan(src.data() + i * in, from);
    (nan_source ? nan_mismatches : value_mismatches)++;
    if (shown++ < 8) {
      os << "\n  element " << i << ": source " << hex(src.data() + i * in, in) << " -> cpu "
         << hex(expected + i * out, out) << ", gpu " << hex(actual + i * out, out)
         << (nan_source ? " (NaN source)" : "");
    }
  }
  if (value_mismatches + nan_mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << value_mismatches << " elements from numbers and " << nan_mismatches
         << " from NaNs differ of " << count << os.str();
}

class GpuConvert : public CudaParamTest<Pair> {};

TEST_P(GpuConvert, MatchesCpuConvertBitForBit) {
  const Pair p = GetParam();
  const std::vector<std::uint8_t> src = source_bytes(p.from);
  const std::size_t count = src.size() / ferry::dtype_size(p.from);
  const Tensor host =
      Tensor::from_bytes(src.data(), src.size(), {static_cast<std::int64_t>(count)}, p.from);

  std::vector<std::uint8_t> expected(count * ferry::dtype_size(p.to));
  ferry::convert(src.data(), p.from, expected.data(), p.to, count);

  // Blocking copy, then the conversion kernel.
  const Tensor gpu = host.to(Device::cuda()).to(p.to);
  EXPECT_EQ(gpu.device(), Device::cuda(0));
  EXPECT_EQ(gpu.dtype(), p.to);
  const Tensor back = gpu.cpu();
  ASSERT_EQ(back.nbytes(), expected.size());
  EXPECT_TRUE(same_elements(src, p.from, expected.data(),
                            static_cast<const std::uint8_t*>(back.data()), p.to, count))
      << "to(cuda).to(dtype)";

  // The fused form from pinned memory, non-blocking.
  const Tensor fused = host.pin_memory().to(Device::cuda(), p.to, /*non_blocking=*/true).cpu();
  EXPECT_TRUE(same_elements(src, p.from, expected.data(),
                            static_cast<const std::uint8_t*>(fused.data()), p.to, count))
      << "to(cuda, dtype, non_blocking)";
}

TEST_P(GpuConvert, LargeTensorMatchesCpuConvert) {
  // The special values repeated past a million elements: many blocks, one launch.
  const Pair p = GetParam();
  const std::vector<std::uint8_t> one = source_bytes(p.from);
  std::vector<std::uint8_t> src;
  while (src.size() / ferry::dtype_size(p.from) < (std::size_t{1} << 20) + 7) {
    src.insert(src.end(), one.begin(), one.end());
  }
  const std::size_t count = src.size() / ferry::dtype_size(p.from);
  const Tensor host =
      Tensor::from_bytes(src.data(), src.size(), {static_cast<std::int64_t>(count)}, p.from);
  std::vector<std::uint8_t> expected(count * ferry::dtype_size(p.to));
  ferry::convert(src.data(), p.from, expected.data(), p.to, count);
  const Tensor back = host.to(Device::cuda()).to(p.to).cpu();
  ASSERT_EQ(back.nbytes(), expected.size());
  EXPECT_TRUE(same_elements(src, p.from, expected.data(),
                            static_cast<const std::uint8_t*>(back.data()), p.to, count));
}

INSTANTIATE_TEST_SUITE_P(AllPairs, GpuConvert, ::testing::ValuesIn(all_pairs()), pair_name);

}  // namespace
