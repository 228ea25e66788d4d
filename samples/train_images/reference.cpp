// samples/train_images/reference.cpp: see reference.hpp.

#include "train_images/reference.hpp"

#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

namespace reference {

namespace {

// The largest side accepted: far more than the sample's images, and small enough that
// width x height bytes are a modest allocation.
constexpr int kMaxSide = 8192;

std::vector<unsigned char> read_file(const std::filesystem::path& file) {
  std::ifstream in(file,
                   std::ios::binary | std::ios::ate);  // opened at the end: tellg() is the size
  const std::streamoff size = in.tellg();
  if (!in || size <= 0 || size > std::streamoff{1} << 30) {
    throw std::runtime_error(file.string() + ": cannot read (or empty, or over 1 GiB)");
  }
  std::vector<unsigned char> bytes(static_cast<std::size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    throw std::runtime_error(file.string() + ": cannot read");
  }
  return bytes;
}

// One output pixel's window on a source axis: its first source index and the weights of the
// source pixels from there.
struct Taps {
  std::size_t first = 0;
  std::vector<double> weights;
};

// PIL's bilinear filter: a triangle of support 1.
double triangle(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// The windows of `out` output pixels on a source axis of `in` pixels, as PIL's Resample.c
// precomputes them for the bilinear filter: output pixel i is centred at (i + 0.5) * scale in
// the source; when shrinking, the filter is widened by the scale factor (antialiasing); the
// window's ends are (int)(centre -/+ support + 0.5), clamped to the axis; weights sum to 1.
std::vector<Taps> bilinear_taps(std::size_t in, std::size_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;
  std::vector<Taps> taps(out);
  for (std::size_t i = 0; i < out; ++i) {
    const double centre = (static_cast<double>(i) + 0.5) * scale;
    // C's (int) truncates toward zero; a negative start is clamped to 0 either way.
    const double lo = std::max(0.0, std::trunc(centre - support + 0.5));
    const double hi = std::min(static_cast<double>(in), std::trunc(centre + support + 0.5));
    Taps& t = taps[i];
    t.first = static_cast<std::size_t>(lo);
    double sum = 0.0;
    for (double x = lo; x < hi; x += 1.0) {
      t.weights.push_back(triangle((x - centre + 0.5) / filter_scale));
      sum += t.weights.back();
    }
    if (sum != 0.0) {
      for (double& w : t.weights) w /= sum;
    }
  }
  return taps;
}

// Python's round() of a non-negative half-integer or integer: a half goes to the even side.
std::size_t round_half_even(double v) { return static_cast<std::size_t>(std::nearbyint(v)); }

}  // namespace

GrayImage decode_jpeg_file(const std::filesystem::path& file) {
  const std::vector<unsigned char> jpeg = read_file(file);
  const std::unique_ptr<void, decltype(&tjDestroy)> tj(tjInitDecompress(), &tjDestroy);
  if (tj == nullptr) throw std::runtime_error("tjInitDecompress failed");
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
  if (tjDecompressHeader3(tj.get(), jpeg.data(), jpeg.size(), &width, &height, &subsampling,
                          &colorspace) != 0) {
    throw std::runtime_error(file.string() + ": " + tjGetErrorStr2(tj.get()));
  }
  if (width < 1 || height < 1 || width > kMaxSide || height > kMaxSide) {
    throw std::runtime_error(file.string() + ": " + std::to_string(width) + "x" +
                             std::to_string(height) + " is not a size this sample takes");
  }
  GrayImage image;
  image.width = static_cast<std::size_t>(width);
  image.height = static_cast<std::size_t>(height);
  image.pixels.resize(image.width * image.height);
  // Flags 0: libjpeg's accurate integer IDCT (JDCT_ISLOW), as PIL decodes.
  if (tjDecompress2(tj.get(), jpeg.data(), jpeg.size(), image.pixels.data(), width, 0, height,
                    TJPF_GRAY, 0) != 0) {
    throw std::runtime_error(file.string() + ": " + tjGetErrorStr2(tj.get()));
  }
  return image;
}

std::vector<std::uint8_t> resize_then_center_crop(const GrayImage& image, std::size_t resize,
                                                  std::size_t out_height, std::size_t out_width) {
  // torchvision's Resize(int): int(resize * long / short), a true division then truncation.
  const std::size_t short_side = std::min(image.width, image.height);
  const std::size_t long_side = std::max(image.width, image.height);
  const auto long_resized = static_cast<std::size_t>(static_cast<double>(resize * long_side) /
                                                     static_cast<double>(short_side));
  const std::size_t resized_w = image.width <= image.height ? resize : long_resized;
  const std::size_t resized_h = image.width <= image.height ? long_resized : resize;
  if (out_width > resized_w || out_height > resized_h) {
    throw std::invalid_argument("the crop is larger than the resized image");
  }
  const std::size_t left = round_half_even(static_cast<double>(resized_w - out_width) / 2.0);
  const std::size_t top = round_half_even(static_cast<double>(resized_h - out_height) / 2.0);

  const std::vector<Taps> columns = bilinear_taps(image.width, resized_w);
  const std::vector<Taps> rows = bilinear_taps(image.height, resized_h);

  // The horizontal pass over every source row, for the crop's columns only: [height, out_width].
  std::vector<double> across(image.height * out_width, 0.0);
  for (std::size_t y = 0; y < image.height; ++y) {
    const std::uint8_t* row = &image.pixels[y * image.width];
    for (std::size_t x = 0; x < out_width; ++x) {
      const Taps& t = columns[left + x];
      double sum = 0.0;
      for (std::size_t k = 0; k < t.weights.size(); ++k) sum += t.weights[k] * row[t.first + k];
      across[y * out_width + x] = sum;
    }
  }
  // The vertical pass for the crop's rows, rounded to bytes once.
  std::vector<std::uint8_t> out(out_height * out_width);
  for (std::size_t y = 0; y < out_height; ++y) {
    const Taps& t = rows[top + y];
    for (std::size_t x = 0; x < out_width; ++x) {
      double sum = 0.0;
      for (std::size_t k = 0; k < t.weights.size(); ++k) {
        sum += t.weights[k] * across[(t.first + k) * out_width + x];
      }
      out[y * out_width + x] = static_cast<std::uint8_t>(std::clamp(std::round(sum), 0.0, 255.0));
    }
  }
  return out;
}

}  // namespace reference
