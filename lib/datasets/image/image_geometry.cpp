// The image decoder's geometry: where the output's pixels come from (torchvision's Resize +
// CenterCrop, RandomResizedCrop, or a plain resize), and the resize that puts them there
// (image_resample.cpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/checked.hpp"
#include "datasets/image/image_internal.hpp"
#include "datasets/image/image_resample.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::image {
namespace {

// splitmix64: the augmentation's only source of randomness, seeded by the sample's seed.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [lo, hi).
  double uniform(double lo, double hi) noexcept {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }
  // Uniform in [lo, hi] (the modulo's bias is below 2^-40 for image sizes).
  std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept {
    const auto span = static_cast<std::uint64_t>(hi - lo) + 1;
    return lo + static_cast<std::int64_t>(next() % span);
  }

 private:
  std::uint64_t state_;
};

// Python's round(): to nearest, ties to even (the default rounding mode).
std::int64_t round_even(double v) { return static_cast<std::int64_t>(std::nearbyint(v)); }

// One axis of torchvision's Resize + CenterCrop: a source of `src` pixels resized to `resized`,
// of which the central `out` are kept (padded with zeros on both sides when out > resized).
void center_axis(std::int64_t src, std::int64_t resized, int out, double& s0, double& s1, int& o0,
                 int& o1) {
  std::int64_t offset = 0;  // of output pixel 0 in the resized image
  if (out > resized) {
    offset = -((out - resized) / 2);  // CenterCrop pads (out - resized) // 2 before
  } else {
    // int(round((resized - out) / 2.0)): Python rounds a half to even.
    const std::int64_t d = resized - out;
    offset = d / 2 + ((d % 2 == 1 && (d / 2) % 2 == 1) ? 1 : 0);
  }
  o0 = static_cast<int>(std::max<std::int64_t>(0, -offset));
  o1 = static_cast<int>(std::min<std::int64_t>(out, resized - offset));
  // In doubles: exact for the sizes of real images, and no overflow for absurd ones.
  s0 = static_cast<double>(offset + o0) * static_cast<double>(src) / static_cast<double>(resized);
  s1 = static_cast<double>(offset + o1) * static_cast<double>(src) / static_cast<double>(resized);
}

void plan_center_crop(int width, int height, const ImageOptions& o, ImagePlan& p) {
  // The automatic size, max(height, width) × 8 / 7 rounded: up to 2^28 × 8, so in 64 bits.
  const std::int64_t size =
      o.resize > 0
          ? o.resize
          : checked_add<std::int64_t>(
                checked_mul<std::int64_t>(std::max(o.height, o.width), 8, "ImageFolder: resize"), 3,
                "ImageFolder: resize") /
                7;
  const int short_side = std::min(width, height);
  const int long_side = std::max(width, height);
  // torchvision: int(size * long / short), a true division then truncation. (At most
  // 2^29 × 2^24: exact in 64 bits, and in the double it is divided as.)
  const auto long_resized = static_cast<std::int64_t>(
      static_cast<double>(checked_mul<std::int64_t>(size, long_side, "ImageFolder: resize")) /
      static_cast<double>(short_side));
  const std::int64_t resized_w = width <= height ? size : long_resized;
  const std::int64_t resized_h = width <= height ? long_resized : size;
  center_axis(width, resized_w, o.width, p.x0, p.x1, p.out_x0, p.out_x1);
  center_axis(height, resized_h, o.height, p.y0, p.y1, p.out_y0, p.out_y1);
}

// torchvision's RandomResizedCrop.get_params with scale (0.08, 1) and ratio (3/4, 4/3).
void plan_random_crop(int width, int height, SplitMix64& rng, ImagePlan& p) {
  const double area = static_cast<double>(width) * height;
  const double log_lo = std::log(3.0 / 4.0);
  const double log_hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(0.08, 1.0);
    const double aspect = std::exp(rng.uniform(log_lo, log_hi));
    const std::int64_t w = round_even(std::sqrt(target * aspect));
    const std::int64_t h = round_even(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const std::int64_t top = rng.between(0, height - h);
      const std::int64_t left = rng.between(0, width - w);
      p.x0 = static_cast<double>(left);
      p.y0 = static_cast<double>(top);
      p.x1 = static_cast<double>(left + w);
      p.y1 = static_cast<double>(top + h);
      return;
    }
  }
  // The central crop, its aspect clamped to the ratio range.
  const double in_ratio = static_cast<double>(width) / height;
  std::int64_t w = width;
  std::int64_t h = height;
  if (in_ratio < 3.0 / 4.0) {
    h = std::clamp<std::int64_t>(round_even(static_cast<double>(w) / (3.0 / 4.0)), 1, height);
  } else if (in_ratio > 4.0 / 3.0) {
    w = std::clamp<std::int64_t>(round_even(static_cast<double>(h) * (4.0 / 3.0)), 1, width);
  }
  const std::int64_t top = (height - h) / 2;
  const std::int64_t left = (width - w) / 2;
  p.x0 = static_cast<double>(left);
  p.y0 = static_cast<double>(top);
  p.x1 = static_cast<double>(left + w);
  p.y1 = static_cast<double>(top + h);
}

}  // namespace

Fit& fit_image(const ImagePlan& p, const ImageOptions& o, double scale, int width, int height,
               std::string_view name) {
  thread_local Fit fit;
  const int win_w = p.out_x1 - p.out_x0;
  const int win_h = p.out_y1 - p.out_y0;
  const double rx0 = p.x0 * scale;
  const double ry0 = p.y0 * scale;
  const double rx1 = std::min(p.x1 * scale, static_cast<double>(width));
  const double ry1 = std::min(p.y1 * scale, static_cast<double>(height));
  const double need = resample_bytes(rx1 - rx0, ry1 - ry0, width, win_w, win_h, o.channels);
  if (!(need <= static_cast<double>(kMaxResizeBytes))) {
    fail(name, "resizing " + std::to_string(width) + " x " + std::to_string(height) +
                   " pixels to " + std::to_string(win_w) + " x " + std::to_string(win_h) +
                   " needs about " +
                   std::to_string(static_cast<std::uint64_t>(std::min(need, 1e19))) +
                   " bytes of working memory, more than the " + std::to_string(kMaxResizeBytes) +
                   " ImageFolder allows");
  }
  const Fit::Key x_key{rx0, rx1, width, win_w};
  const Fit::Key y_key{ry0, ry1, height, win_h};
  if (!(fit.x_key == x_key)) {
    fit.x_key = {};  // a plan that fails half-way is no plan
    plan_axis(rx0, rx1, width, win_w, fit.x);
    fit.x_key = x_key;
  }
  if (!(fit.y_key == y_key)) {
    fit.y_key = {};
    plan_axis(ry0, ry1, height, win_h, fit.y);
    fit.y_key = y_key;
  }
  return fit;
}

void place(const Decoded& d, const ImagePlan& p, const Fit& f, const ImageOptions& o,
           std::uint8_t* out) {
  const auto c = static_cast<std::size_t>(o.channels);
  const std::size_t out_row = static_cast<std::size_t>(o.width) * c;
  if (p.out_x0 != 0 || p.out_y0 != 0 || p.out_x1 != o.width || p.out_y1 != o.height) {
    std::memset(out, 0, out_row * static_cast<std::size_t>(o.height));
  }
  // A flip mirrors the whole output: the window lands mirrored too.
  const int x0 = p.flip ? o.width - p.out_x1 : p.out_x0;
  std::uint8_t* dst =
      out + static_cast<std::size_t>(p.out_y0) * out_row + static_cast<std::size_t>(x0) * c;
  const int in = d.channels != 0 ? d.channels : o.channels;
  resample(d.pixels, static_cast<std::size_t>(d.width) * static_cast<std::size_t>(in), d.left,
           d.top, in, o.channels, f.x, f.y, p.flip, dst, out_row);
}

}  // namespace ferry::detail::image

namespace ferry::detail {

using namespace image;

ImagePlan plan_image(int width, int height, const ImageOptions& o, std::uint64_t seed) {
  SplitMix64 rng(seed);
  ImagePlan p;
  p.flip = o.random_flip && (rng.next() >> 63) != 0;  // the first draw, whatever the geometry
  p.out_x1 = o.width;
  p.out_y1 = o.height;
  switch (o.geometry) {
    case Geometry::resize_then_center_crop:
      plan_center_crop(width, height, o, p);
      break;
    case Geometry::random_resized_crop:
      plan_random_crop(width, height, rng, p);
      break;
    case Geometry::resize:
      p.x1 = width;
      p.y1 = height;
      break;
  }
  return p;
}

}  // namespace ferry::detail
