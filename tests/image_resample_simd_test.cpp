// The resampler's AVX2 kernels against its portable loops: for every kind of axis (1 to 9 taps
// and wider, upscales, identity, windows at the image's edges), both pass orders, RGBX to RGB
// and RGBX, flips, and sizes that leave partial blocks and vectors, the bytes out are
// the same. Skips where the CPU has no AVX2.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "datasets/image/image_resample.hpp"
#include "datasets/image/image_resample_avx2.hpp"

namespace {

using ferry::detail::image::plan_axis;
using ferry::detail::image::resample;
using ferry::detail::image::ResampleAxis;
using ferry::detail::image::set_resample_avx2;

struct Case {
  int width, height;      // the source
  double x0, x1, y0, y1;  // its box
  int out_w, out_h;
};

/// resample() of the whole case with the AVX2 kernels on or off. The source is allocated to
/// its exact size, so that a read past its end is a fault under ASan.
std::vector<std::uint8_t> run(const Case& c, int in, int channels, bool flip, bool avx2,
                              const std::vector<std::uint8_t>& pixels) {
  ResampleAxis ax;
  ResampleAxis ay;
  plan_axis(c.x0, c.x1, c.width, c.out_w, ax);
  plan_axis(c.y0, c.y1, c.height, c.out_h, ay);
  std::vector<std::uint8_t> src(
      pixels.begin(), pixels.begin() + static_cast<std::ptrdiff_t>(c.width) * c.height * in);
  const auto out_row = static_cast<std::size_t>(c.out_w) * static_cast<std::size_t>(channels);
  std::vector<std::uint8_t> out(out_row * static_cast<std::size_t>(c.out_h), 0xAB);
  const bool was = set_resample_avx2(avx2);
  resample(src.data(), static_cast<std::size_t>(c.width) * static_cast<std::size_t>(in), 0, 0, in,
           channels, ax, ay, flip, out.data(), out_row);
  set_resample_avx2(was);
  return out;
}

TEST(ResampleSimd, TheAvx2KernelsGiveThePortableLoopsBytes) {
  if (!set_resample_avx2(true)) {
    GTEST_SKIP() << "no AVX2 on this CPU (or not an x86-64 build)";
  }
  std::mt19937 rng(7);
  std::vector<std::uint8_t> pixels(600 * 500 * 4);
  for (auto& p : pixels) p = static_cast<std::uint8_t>(rng());
  const std::vector<Case> cases = {
      {500, 375, 0, 500, 0, 375, 341, 256},            // ImageNet's Resize(256): 3 taps
      {500, 375, 58.6, 441.4, 29.3, 345.7, 224, 224},  // its center crop, fractional box
      {500, 375, 0, 500, 0, 375, 224, 224},            // both axes down, unequal
      {600, 500, 0, 600, 0, 500, 100, 90},             // 13 and 12 taps
      {600, 500, 10, 590, 3, 497, 150, 140},           // 9 taps
      {64, 48, 0, 64, 0, 48, 200, 150},                // upscales: 2 taps
      {64, 48, 0, 64, 0, 48, 64, 48},                  // identity
      {64, 48, 0, 64, 0, 48, 64, 20},                  // columns kept, rows shrunk
      {64, 48, 0, 64, 0, 48, 20, 48},                  // rows kept, columns shrunk
      {7, 5, 0, 7, 0, 5, 3, 2},                        // tiny: every window near the end
      {3, 3, 0, 3, 0, 3, 1, 1},                        //
      {33, 31, 0.5, 32.5, 1.25, 30.75, 17, 19},        // odd sizes, the tails of the 32-byte loop
      {300, 8, 0, 300, 0, 8, 299, 3},                  // wide, few rows: the horizontal pass first
      {600, 500, 0, 600, 0, 500, 4, 3},                // over 64 taps: the portable loops
  };
  for (const Case& c : cases) {
    for (const int channels : {3, 4}) {
      for (const bool flip : {false, true}) {
        SCOPED_TRACE(std::to_string(c.width) + "x" + std::to_string(c.height) + " to " +
                     std::to_string(c.out_w) + "x" + std::to_string(c.out_h) + " channels " +
                     std::to_string(channels) + " flip " + std::to_string(flip));
        // RGBX in (both pass orders where the geometry picks them), and plain channels.
        for (const int in : {4, channels}) {
          const std::vector<std::uint8_t> portable = run(c, in, channels, flip, false, pixels);
          const std::vector<std::uint8_t> avx2 = run(c, in, channels, flip, true, pixels);
          ASSERT_EQ(portable.size(), avx2.size());
          std::size_t differ = 0;
          for (std::size_t i = 0; i < portable.size(); ++i) differ += portable[i] != avx2[i];
          EXPECT_EQ(differ, 0U) << "in " << in;
        }
      }
    }
  }
  // Gray: the vertical kernel alone on one channel.
  const Case c{500, 375, 0, 500, 0, 375, 341, 256};
  EXPECT_EQ(run(c, 1, 1, false, false, pixels), run(c, 1, 1, false, true, pixels));
}

}  // namespace
