#pragma once

// Helpers shared by ferry's GPU tests (tests/cuda). They use ferry's public API only, so these
// tests compile in every build; without a usable GPU every test skips with CUDA's reason.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::cuda_testing {

/// Base fixture of every GPU test: skips, with the reason in CUDA's words, when no GPU is usable.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no usable GPU: " << cuda_unavailable_reason();
    }
  }
};

/// A parameterised CudaTest.
template <class Param>
class CudaParamTest : public CudaTest, public ::testing::WithParamInterface<Param> {};

/// `n` pseudo-random bytes (xorshift64*, seeded by `seed`): every run and machine gets the same
/// ones, and neighbouring offsets differ, so a shifted or truncated copy cannot pass.
inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::uint8_t> out(n);
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
  std::size_t i = 0;
  while (i < n) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    std::uint64_t word = x * 0x2545f4914f6cdd1dULL;
    for (int k = 0; k < 8 && i < n; ++k, ++i) {
      out[i] = static_cast<std::uint8_t>(word & 0xffU);
      word >>= 8;
    }
  }
  return out;
}

/// Success when the `n` bytes at `actual` equal those at `expected`; otherwise says where the
/// first difference is, and how many bytes differ.
inline ::testing::AssertionResult same_bytes(const void* expected, const void* actual,
                                             std::size_t n) {
  if (n == 0 || std::memcmp(expected, actual, n) == 0) return ::testing::AssertionSuccess();
  const auto* e = static_cast<const std::uint8_t*>(expected);
  const auto* a = static_cast<const std::uint8_t*>(actual);
  std::size_t first = n;
  std::size_t count = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (e[i] != a[i]) {
      if (first == n) first = i;
      ++count;
    }
  }
  return ::testing::AssertionFailure()
         << count << " of " << n << " bytes differ; the first at offset " << first
         << ": expected 0x" << std::hex << static_cast<int>(e[first]) << ", got 0x"
         << static_cast<int>(a[first]);
}

/// Success when two host tensors have the same shape, dtype and bytes.
inline ::testing::AssertionResult same_tensor(const Tensor& expected, const Tensor& actual) {
  if (!actual.device().is_cpu() || !expected.device().is_cpu()) {
    return ::testing::AssertionFailure()
           << "compare host tensors; got " << expected.device() << " and " << actual.device();
  }
  if (expected.shape() != actual.shape() || expected.dtype() != actual.dtype()) {
    std::ostringstream os;
    os << "expected " << dtype_name(expected.dtype()) << " [";
    for (const auto d : expected.shape()) os << d << ' ';
    os << "], got " << dtype_name(actual.dtype()) << " [";
    for (const auto d : actual.shape()) os << d << ' ';
    os << ']';
    return ::testing::AssertionFailure() << os.str();
  }
  return same_bytes(expected.data(), actual.data(), expected.nbytes());
}

/// A 1-D u8 host tensor holding `bytes`.
inline Tensor byte_tensor(const std::vector<std::uint8_t>& bytes) {
  return Tensor::from(bytes, {static_cast<std::int64_t>(bytes.size())});
}

/// u8 images [6, 5, 3] ("image", pixels pattern(90, index + 11)) that the loader normalizes (on
/// the GPU after the copy), and their index as "label" (i64).
class SmallImages : public Dataset {
 public:
  explicit SmallImages(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<FieldSpec> fields() const override {
    FieldSpec image{"image", DType::u8, {6, 5, 3}};
    Normalize norm;
    norm.mean = {0.485f, 0.456f, 0.406f};
    norm.std = {0.229f, 0.224f, 0.225f};
    image.normalize = norm;
    return {image, {"label", DType::i64, {}}};
  }
  void read(std::size_t index, SampleRef out) const override {
    const std::vector<std::uint8_t> px = pattern(90, index + 11);
    std::memcpy(out.data(0), px.data(), px.size());
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }

 private:
  std::size_t n_;
};

}  // namespace ferry::cuda_testing
