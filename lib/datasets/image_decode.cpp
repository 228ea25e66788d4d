#include "datasets/image_decode.hpp"

#include <fcntl.h>
#include <spng.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <system_error>

#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

[[noreturn]] void fail(std::string_view name, const std::string& why) {
  throw DataError("ImageFolder: " + std::string(name) + ": " + why);
}

// A buffer that only grows and is never zeroed: one per thread and purpose, so decoding reuses
// the same memory image after image.
class Scratch {
 public:
  std::uint8_t* get(std::size_t n) {
    if (n > capacity_) {
      const std::size_t grown = std::max(n, capacity_ + capacity_ / 2);
      data_.reset();  // before allocating the new one: the peak holds one buffer, not two
      capacity_ = 0;
      data_ = std::make_unique_for_overwrite<std::uint8_t[]>(grown);
      capacity_ = grown;
    }
    return data_.get();
  }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t capacity_ = 0;
};

Scratch& file_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& pixel_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

Scratch& resize_scratch() {
  thread_local Scratch scratch;
  return scratch;
}

// stb_image_resize takes its working memory (one block a call) from the thread's scratch.
void* resize_memory(std::size_t size, void* scratch) {
  return static_cast<Scratch*>(scratch)->get(size);
}

}  // namespace
}  // namespace ferry::detail

// stb_image_resize is compiled here, private to this file (STB_IMAGE_RESIZE_STATIC), rather than
// called in Debian's libstb: that build keeps assert() on, and v0.97's coefficient sanity checks
// fail spuriously for the triangle filter at common ratios (437 -> 292, 161 -> 112: sums of
// weights off by float error, which it then normalizes away; outputs stay within rounding of an
// exact antialiased triangle filter), which would abort the process. Here they are off, and its
// memory comes from the scratch above, so resizing allocates nothing in steady state.
#define STBIR_ASSERT(x) ((void)0)
#define STBIR_MALLOC(size, context) ::ferry::detail::resize_memory(size, context)
#define STBIR_FREE(ptr, context) ((void)(ptr), (void)(context))
#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image_resize.h>

namespace ferry::detail {
namespace {

// This thread's TurboJPEG decompressor (a handle must not be used by two threads at once).
class JpegDecoder {
 public:
  JpegDecoder() = default;
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  ~JpegDecoder() {
    if (handle_ != nullptr) tjDestroy(handle_);
  }
  tjhandle get() {
    if (handle_ == nullptr) {
      handle_ = tjInitDecompress();
      if (handle_ == nullptr) throw std::bad_alloc();  // it fails only without memory
    }
    return handle_;
  }

 private:
  tjhandle handle_ = nullptr;
};

tjhandle jpeg_decoder() {
  thread_local JpegDecoder decoder;
  return decoder.get();
}

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

bool near_integer(double v) { return std::abs(v - std::round(v)) < 1e-9; }

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
  const int size = o.resize > 0 ? o.resize : (std::max(o.height, o.width) * 8 + 3) / 7;
  const int short_side = std::min(width, height);
  const int long_side = std::max(width, height);
  // torchvision: int(size * long / short), a true division then truncation.
  // (At most 2^20 × 2^24 / 1: no overflow in 64 bits.)
  const auto long_resized = static_cast<std::int64_t>(
      static_cast<double>(std::int64_t{size} * long_side) / static_cast<double>(short_side));
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

void check_size(std::int64_t width, std::int64_t height, std::string_view name,
                const char* format) {
  if (width < 1 || height < 1) {
    fail(name, std::string("corrupt ") + format + " header: " + std::to_string(width) + " x " +
                   std::to_string(height) + " pixels");
  }
  if (width * height > kMaxImagePixels) {
    fail(name, std::string(format) + " of " + std::to_string(width) + " x " +
                   std::to_string(height) + " pixels, more than the " +
                   std::to_string(kMaxImagePixels) + " ImageFolder decodes");
  }
}

// ITU-R 601 luma, as PIL's convert("L"): (299 R + 587 G + 114 B) / 1000, rounded (so gray
// stays exactly gray).
std::uint8_t luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<std::uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
}

// RGB (3 bytes a pixel) to gray, in place.
void rgb_to_gray(std::uint8_t* px, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) px[i] = luma(px[3 * i], px[3 * i + 1], px[3 * i + 2]);
}

// Adobe's inverted CMYK (what libjpeg returns for CMYK and YCCK JPEGs: 255 is no ink) to
// `channels`, in place: R = C' K' / 255 and so on, as PIL does.
void cmyk_to(std::uint8_t* px, std::size_t count, int channels) {
  for (std::size_t i = 0; i < count; ++i) {
    const unsigned k = px[4 * i + 3];
    const unsigned r = (px[4 * i] * k + 127) / 255;
    const unsigned g = (px[4 * i + 1] * k + 127) / 255;
    const unsigned b = (px[4 * i + 2] * k + 127) / 255;
    if (channels == 1) {
      px[i] = luma(r, g, b);
    } else {
      // Pixel i's bytes start at or before pixel i's CMYK bytes: writing forwards is safe.
      std::uint8_t* to = px + i * static_cast<std::size_t>(channels);
      to[0] = static_cast<std::uint8_t>(r);
      to[1] = static_cast<std::uint8_t>(g);
      to[2] = static_cast<std::uint8_t>(b);
      if (channels == 4) to[3] = 255;
    }
  }
}

// A decoded image: `width` × `height` pixels of the requested channels, `scale` of its pixels
// per source pixel (below 1 when TurboJPEG scaled it down).
struct Decoded {
  const std::uint8_t* pixels = nullptr;
  int width = 0, height = 0;
  double scale = 1;
};

// Applies the plan: copies the window straight when it maps pixel for pixel, else resizes
// only the source region the window needs (plus the filter's reach) with stb_image_resize's
// triangle filter, which widens with the downscale factor: torchvision's antialiased bilinear.
void place(const Decoded& d, const ImagePlan& p, const ImageOptions& o, std::uint8_t* out) {
  const int c = o.channels;
  const std::size_t out_row = static_cast<std::size_t>(o.width) * static_cast<std::size_t>(c);
  const std::size_t src_row = static_cast<std::size_t>(d.width) * static_cast<std::size_t>(c);
  if (p.out_x0 != 0 || p.out_y0 != 0 || p.out_x1 != o.width || p.out_y1 != o.height) {
    std::memset(out, 0, out_row * static_cast<std::size_t>(o.height));
  }
  const int win_w = p.out_x1 - p.out_x0;
  const int win_h = p.out_y1 - p.out_y0;
  std::uint8_t* dst = out + static_cast<std::size_t>(p.out_y0) * out_row +
                      static_cast<std::size_t>(p.out_x0) * static_cast<std::size_t>(c);
  const double rx0 = p.x0 * d.scale;
  const double ry0 = p.y0 * d.scale;
  const double rx1 = std::min(p.x1 * d.scale, static_cast<double>(d.width));
  const double ry1 = std::min(p.y1 * d.scale, static_cast<double>(d.height));
  if (near_integer(rx0) && near_integer(ry0) && std::abs(rx1 - rx0 - win_w) < 1e-9 &&
      std::abs(ry1 - ry0 - win_h) < 1e-9) {
    const auto x = static_cast<std::size_t>(std::lround(rx0));
    const auto y = static_cast<std::size_t>(std::lround(ry0));
    const std::size_t bytes = static_cast<std::size_t>(win_w) * static_cast<std::size_t>(c);
    for (std::size_t row = 0; row < static_cast<std::size_t>(win_h); ++row) {
      std::memcpy(dst + row * out_row,
                  d.pixels + (y + row) * src_row + x * static_cast<std::size_t>(c), bytes);
    }
  } else {
    // The filter reaches 1 output pixel, i.e. up to in/out source pixels, either side.
    const int margin_x = static_cast<int>(std::ceil(2 * std::max(1.0, (rx1 - rx0) / win_w))) + 2;
    const int margin_y = static_cast<int>(std::ceil(2 * std::max(1.0, (ry1 - ry0) / win_h))) + 2;
    const int bx0 = std::max(0, static_cast<int>(std::floor(rx0)) - margin_x);
    const int by0 = std::max(0, static_cast<int>(std::floor(ry0)) - margin_y);
    const int bx1 = std::min(d.width, static_cast<int>(std::ceil(rx1)) + margin_x);
    const int by1 = std::min(d.height, static_cast<int>(std::ceil(ry1)) + margin_y);
    const int bw = bx1 - bx0;
    const int bh = by1 - by0;
    const std::uint8_t* src = d.pixels + static_cast<std::size_t>(by0) * src_row +
                              static_cast<std::size_t>(bx0) * static_cast<std::size_t>(c);
    const int ok = stbir_resize_region(
        src, bw, bh, static_cast<int>(src_row), dst, win_w, win_h, static_cast<int>(out_row),
        STBIR_TYPE_UINT8, c, c == 4 ? 3 : STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP,
        STBIR_EDGE_CLAMP, STBIR_FILTER_TRIANGLE, STBIR_FILTER_TRIANGLE, STBIR_COLORSPACE_LINEAR,
        &resize_scratch(), static_cast<float>((rx0 - bx0) / bw),
        static_cast<float>((ry0 - by0) / bh), static_cast<float>((rx1 - bx0) / bw),
        static_cast<float>((ry1 - by0) / bh));
    if (ok == 0) {  // only for arguments it cannot take, which the plan never gives
      throw std::logic_error("ImageFolder: cannot resize " + std::to_string(bw) + " x " +
                             std::to_string(bh) + " to " + std::to_string(win_w) + " x " +
                             std::to_string(win_h));
    }
  }
  if (p.flip) {
    const auto w = static_cast<std::size_t>(o.width);
    const auto cc = static_cast<std::size_t>(c);
    for (std::size_t y = 0; y < static_cast<std::size_t>(o.height); ++y) {
      std::uint8_t* row = out + y * out_row;
      for (std::size_t x = 0; x < w / 2; ++x) {
        std::swap_ranges(row + x * cc, row + (x + 1) * cc, row + (w - 1 - x) * cc);
      }
    }
  }
}

[[noreturn]] void jpeg_fail(tjhandle tj, std::string_view name, const char* what) {
  const std::string why = tjGetErrorStr2(tj);
  const bool truncated = why.find("Premature end") != std::string::npos;
  fail(name, (truncated ? std::string("truncated JPEG") : std::string(what)) + ": " + why);
}

int scaled(int size, JpegScale s) {
  return static_cast<int>((std::int64_t{size} * s.num + s.denom - 1) / s.denom);
}

void decode_jpeg(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                 std::uint8_t* out, std::string_view name) {
  tjhandle tj = jpeg_decoder();
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0;
  int height = 0;
  int subsampling = 0;
  int colorspace = 0;
  if (tjDecompressHeader3(tj, bytes.data(), size, &width, &height, &subsampling, &colorspace) !=
      0) {
    jpeg_fail(tj, name, "corrupt JPEG header");
  }
  check_size(width, height, name, "JPEG");
  const ImagePlan plan = plan_image(width, height, o, seed);
  JpegScale scale = pick_jpeg_scale((plan.out_x1 - plan.out_x0) / (plan.x1 - plan.x0),
                                    (plan.out_y1 - plan.out_y0) / (plan.y1 - plan.y0));
  const int w = scaled(width, scale);
  const int h = scaled(height, scale);
  // TurboJPEG takes the first (largest) factor whose image fits w × h: the same size as the
  // one picked, but a tiny image may get a larger factor, which the mapping must then use.
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors != nullptr && i < count; ++i) {
    const JpegScale f{factors[i].num, factors[i].denom};
    if (scaled(width, f) <= w && scaled(height, f) <= h) {
      scale = f;
      break;
    }
  }
  const bool cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
  const int format = cmyk              ? TJPF_CMYK
                     : o.channels == 1 ? TJPF_GRAY
                     : o.channels == 3 ? TJPF_RGB
                                       : TJPF_RGBA;
  const int pixel_bytes = cmyk ? 4 : o.channels;
  const std::size_t count_px = static_cast<std::size_t>(w) * static_cast<std::size_t>(h);
  std::uint8_t* px = pixel_scratch().get(count_px * static_cast<std::size_t>(pixel_bytes));
  // TJFLAG_STOPONWARNING: a warning (premature end of data, a corrupt Huffman code) fails.
  if (tjDecompress2(tj, bytes.data(), size, px, w, 0, h, format, TJFLAG_STOPONWARNING) != 0) {
    jpeg_fail(tj, name, "corrupt JPEG");
  }
  if (cmyk) cmyk_to(px, count_px, o.channels);
  place({px, w, h, static_cast<double>(scale.num) / scale.denom}, plan, o, out);
}

struct SpngFree {
  void operator()(spng_ctx* ctx) const noexcept { spng_ctx_free(ctx); }
};

[[noreturn]] void png_fail(std::string_view name, int code, const char* what) {
  fail(name, std::string(code == SPNG_EOF || code == SPNG_IO_EOF ? "truncated PNG" : what) + ": " +
                 spng_strerror(code));
}

void decode_png(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                std::uint8_t* out, std::string_view name) {
  const std::unique_ptr<spng_ctx, SpngFree> ctx(spng_ctx_new(0));
  if (ctx == nullptr) throw std::bad_alloc();
  // Limits, so that a hostile header cannot ask for gigabytes: sides (the pixel count is
  // checked below), one ancillary chunk and all of them kept.
  int rc = spng_set_image_limits(ctx.get(), 1U << 24, 1U << 24);
  if (rc == 0) rc = spng_set_chunk_limits(ctx.get(), std::size_t{1} << 24, std::size_t{1} << 26);
  if (rc == 0) rc = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  spng_ihdr ihdr{};
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  if (rc != 0) png_fail(name, rc, "corrupt PNG header");
  check_size(ihdr.width, ihdr.height, name, "PNG");
  const auto width = static_cast<int>(ihdr.width);
  const auto height = static_cast<int>(ihdr.height);
  // spng expands palettes, low bit depths and 16 bits (to their high byte) itself; G8 takes
  // only gray of 8 bits or fewer, so other images come as RGB and are turned gray here.
  const bool gray_source = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8;
  int format = SPNG_FMT_RGB8;
  int flags = 0;
  if (o.channels == 1 && gray_source) {
    format = SPNG_FMT_G8;
  } else if (o.channels == 4) {
    format = SPNG_FMT_RGBA8;
    flags = SPNG_DECODE_TRNS;  // tRNS becomes alpha
  }
  std::size_t bytes_out = 0;
  rc = spng_decoded_image_size(ctx.get(), format, &bytes_out);
  if (rc != 0) png_fail(name, rc, "corrupt PNG");
  std::uint8_t* px = pixel_scratch().get(bytes_out);
  rc = spng_decode_image(ctx.get(), px, bytes_out, format, flags);
  if (rc != 0) png_fail(name, rc, "corrupt PNG");
  const std::size_t count = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  if (o.channels == 1 && !gray_source) rgb_to_gray(px, count);
  const ImagePlan plan = plan_image(width, height, o, seed);
  place({px, width, height, 1.0}, plan, o, out);
}

std::string hex_start(std::span<const std::uint8_t> bytes) {
  std::string out;
  char two[4];
  for (std::size_t i = 0; i < bytes.size() && i < 4; ++i) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned>(bytes[i]));
    if (!out.empty()) out += ' ';
    out += two;
  }
  return out;
}

}  // namespace

ImageFormat sniff_image(std::span<const std::uint8_t> bytes) noexcept {
  static constexpr std::uint8_t kJpeg[] = {0xff, 0xd8, 0xff};
  static constexpr std::uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= sizeof kJpeg && std::equal(std::begin(kJpeg), std::end(kJpeg), bytes.begin()))
    return ImageFormat::jpeg;
  if (bytes.size() >= sizeof kPng && std::equal(std::begin(kPng), std::end(kPng), bytes.begin()))
    return ImageFormat::png;
  return ImageFormat::unknown;
}

void check_image_options(const ImageOptions& o, std::string_view who) {
  const std::string w(who);
  if (o.height < 1 || o.width < 1) {
    throw ConfigError(w + ": height and width must be at least 1, got " + std::to_string(o.height) +
                      " x " + std::to_string(o.width));
  }
  if (std::int64_t{o.height} * o.width > kMaxImagePixels) {
    throw ConfigError(w + ": " + std::to_string(o.height) + " x " + std::to_string(o.width) +
                      " is more than " + std::to_string(kMaxImagePixels) + " pixels");
  }
  if (o.channels != 1 && o.channels != 3 && o.channels != 4) {
    throw ConfigError(w + ": channels must be 1 (gray), 3 (RGB) or 4 (RGBA), got " +
                      std::to_string(o.channels));
  }
  if (o.resize < 0 || o.resize > (1 << 20)) {
    throw ConfigError(w + ": resize must be 0 (automatic) or a side in pixels, got " +
                      std::to_string(o.resize));
  }
  if (o.geometry != Geometry::resize_then_center_crop &&
      o.geometry != Geometry::random_resized_crop && o.geometry != Geometry::resize) {
    throw ConfigError(w + ": unknown geometry " + std::to_string(static_cast<int>(o.geometry)));
  }
  if (!o.normalize) return;
  const Normalize& n = *o.normalize;
  const auto c = static_cast<std::size_t>(o.channels);
  for (const auto* values : {&n.mean, &n.std}) {
    const char* what = values == &n.mean ? "mean" : "std";
    if (values->size() != 1 && values->size() != c) {
      throw ConfigError(w + ": normalize." + what + " has " + std::to_string(values->size()) +
                        " values; give 1 or one per channel (" + std::to_string(c) + ")");
    }
    for (const float v : *values) {
      if (!std::isfinite(v)) throw ConfigError(w + ": normalize." + what + " is not finite");
    }
  }
  for (const float s : n.std) {
    if (s == 0.0f) throw ConfigError(w + ": normalize.std has a 0");
  }
  if (!std::isfinite(n.scale)) throw ConfigError(w + ": normalize.scale is not finite");
  if (n.dtype != DType::f32 && n.dtype != DType::f16 && n.dtype != DType::bf16) {
    throw ConfigError(w + ": normalize.dtype must be f32, f16 or bf16, got " +
                      std::string(dtype_name(n.dtype)));
  }
}

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

JpegScale pick_jpeg_scale(double need_x, double need_y) {
  const double need = std::max(need_x, need_y);
  if (!(need <= 0.5)) return {};
  JpegScale best{1, 2};  // enough, as need <= 1/2
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors != nullptr && i < count; ++i) {
    const double v = static_cast<double>(factors[i].num) / factors[i].denom;
    if (v >= need * (1 - 1e-12) && v < static_cast<double>(best.num) / best.denom) {
      best = {factors[i].num, factors[i].denom};
    }
  }
  return best;
}

void decode_image(std::span<const std::uint8_t> bytes, const ImageOptions& options,
                  std::uint64_t seed, std::uint8_t* out, std::string_view name) {
  switch (sniff_image(bytes)) {
    case ImageFormat::jpeg:
      decode_jpeg(bytes, options, seed, out, name);
      return;
    case ImageFormat::png:
      decode_png(bytes, options, seed, out, name);
      return;
    case ImageFormat::unknown:
      break;
  }
  if (bytes.empty()) fail(name, "empty file");
  fail(name, "not a JPEG or PNG (starts with " + hex_start(bytes) + ")");
}

std::span<const std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                              std::string_view name) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(name, "cannot open: " + std::system_category().message(errno));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } const closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(name, "cannot read: " + std::system_category().message(errno));
  if (S_ISDIR(st.st_mode)) fail(name, "cannot read: it is a folder");
  const auto size = static_cast<std::size_t>(std::max<off_t>(st.st_size, 0));
  std::uint8_t* data = file_scratch().get(std::max<std::size_t>(size, 1));
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, data + got, size - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(name, "cannot read: " + std::system_category().message(errno));
    }
    if (n == 0) break;  // shorter than it was: decoding tells whether what came is whole
    got += static_cast<std::size_t>(n);
  }
  return {data, got};
}

}  // namespace ferry::detail
