#include "datasets/image_decode.hpp"

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>

#include "core/checked.hpp"
#include "datasets/file_io.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

[[noreturn]] void fail(std::string_view name, const std::string& why) {
  throw DataError(std::string(name) + ": " + why);
}

// A buffer that is never zeroed: one per thread and purpose, so decoding reuses the same memory
// image after image. It grows as needed (by half again, up to kScratchKeepBytes, so that slowly
// growing sizes do not reallocate each time), and trim() releases it when one large image made
// it larger than what is worth keeping.
class Scratch {
 public:
  std::uint8_t* get(std::size_t n) {
    if (n > capacity_) {
      const std::size_t grown = std::max(n, std::min(capacity_ + capacity_ / 2, kScratchKeepBytes));
      data_.reset();  // before allocating the new one: the peak holds one buffer, not two
      capacity_ = 0;
      data_ = std::make_unique_for_overwrite<std::uint8_t[]>(grown);
      capacity_ = grown;
    }
    return data_.get();
  }
  void trim(std::size_t keep) noexcept {
    if (capacity_ > keep) {
      data_.reset();
      capacity_ = 0;
    }
  }
  std::size_t capacity() const noexcept { return capacity_; }

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

// Releases what one large image left in this thread's buffers (see kScratchKeepBytes).
void trim_scratch() noexcept {
  file_scratch().trim(kScratchKeepBytes);
  pixel_scratch().trim(kScratchKeepBytes);
  resize_scratch().trim(kScratchKeepBytes);
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
  ~JpegDecoder() { reset(); }
  tjhandle get() {
    if (handle_ == nullptr) {
      handle_ = tjInitDecompress();
      if (handle_ == nullptr) throw std::bad_alloc();  // it fails only without memory
    }
    return handle_;
  }
  // Drops the handle, for a fresh one next time. TurboJPEG 2.1's tjDecompressHeader3() leaves
  // libjpeg mid-header when it fails (it does not abort the decompressor), so the next image
  // on this thread would fail too ("two SOI markers").
  void reset() noexcept {
    if (handle_ != nullptr) tjDestroy(handle_);
    handle_ = nullptr;
  }

 private:
  tjhandle handle_ = nullptr;
};

JpegDecoder& jpeg_decoder() {
  thread_local JpegDecoder decoder;
  return decoder;
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

[[noreturn]] void fail_too_large(std::string_view name, const char* format, std::int64_t width,
                                 std::int64_t height, std::int64_t max_pixels) {
  fail(name, std::string(format) + " of " + std::to_string(width) + " x " + std::to_string(height) +
                 " pixels, more than max_pixels (" + std::to_string(max_pixels) + ")");
}

// The header's size, before anything is allocated for it: within 1 .. max_pixels pixels.
void check_size(std::int64_t width, std::int64_t height, std::int64_t max_pixels,
                std::string_view name, const char* format) {
  if (width < 1 || height < 1) {
    fail(name, std::string("corrupt ") + format + " header: " + std::to_string(width) + " x " +
                   std::to_string(height) + " pixels");
  }
  const std::optional<std::int64_t> pixels = try_mul<std::int64_t>(width, height);
  if (!pixels || *pixels > max_pixels) fail_too_large(name, format, width, height, max_pixels);
}

// Bytes of `pixels` pixels (width × height) of `channels` bytes each, in this thread's scratch.
std::uint8_t* pixel_buffer(int width, int height, int channels, std::string_view name) {
  const std::string what = std::string(name) + ": decoded image";
  return pixel_scratch().get(checked_mul<std::size_t, DataError>(
      checked_mul<std::size_t, DataError>(width, height, what), channels, what));
}

// An upper bound of stb_image_resize v0.97's working memory for one resize (its
// stbir__calculate_memory), in doubles so that nothing wraps: per axis 16 bytes for each
// contributor (an input pixel when shrinking, plus the filter's margins; an output pixel when
// enlarging), the decoded input row with those margins, and a ring of output rows as tall as
// the vertical filter, plus two more rows. Its own sizes are ints, which a bound within
// kMaxResizeBytes keeps far from overflowing.
double resize_bytes(int in_w, int in_h, double region_w, double region_h, int out_w, int out_h,
                    int channels) {
  // Input pixels that one output pixel's triangle filter reaches.
  const auto reach = [](double scale) { return scale > 1 ? 2.0 : std::ceil(2 / scale); };
  const auto contributors = [&](double scale, int in, int out) {
    return scale > 1 ? out : in + 2 * std::floor(reach(scale) / 2);
  };
  const double sx = out_w / region_w;
  const double sy = out_h / region_h;
  const double pixel = 4.0 * channels;  // floats
  return 16 * (contributors(sx, in_w, out_w) + contributors(sy, in_h, out_h)) +
         (in_w + 2 * std::floor(reach(sx) / 2)) * pixel + out_w * pixel * (reach(sy) + 3);
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
void place(const Decoded& d, const ImagePlan& p, const ImageOptions& o, std::uint8_t* out,
           std::string_view name) {
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
    const double need = resize_bytes(bw, bh, rx1 - rx0, ry1 - ry0, win_w, win_h, c);
    if (!(need <= static_cast<double>(kMaxResizeBytes))) {
      fail(name, "resizing " + std::to_string(bw) + " x " + std::to_string(bh) + " pixels to " +
                     std::to_string(win_w) + " x " + std::to_string(win_h) + " needs about " +
                     std::to_string(static_cast<std::uint64_t>(std::min(need, 1e19))) +
                     " bytes of working memory, more than the " + std::to_string(kMaxResizeBytes) +
                     " ImageFolder allows");
    }
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

// After any failed TurboJPEG call: the error, and a fresh handle for the next image.
[[noreturn]] void jpeg_fail(tjhandle tj, std::string_view name, const char* what) {
  const std::string why = tjGetErrorStr2(tj);
  jpeg_decoder().reset();
  const bool truncated = why.find("Premature end") != std::string::npos;
  fail(name, (truncated ? std::string("truncated JPEG") : std::string(what)) + ": " + why);
}

int scaled(int size, JpegScale s) {
  return static_cast<int>((std::int64_t{size} * s.num + s.denom - 1) / s.denom);
}

void decode_jpeg(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                 std::uint8_t* out, std::string_view name) {
  tjhandle tj = jpeg_decoder().get();
  const auto size = static_cast<unsigned long>(bytes.size());
  int width = 0;
  int height = 0;
  int subsampling = 0;
  int colorspace = 0;
  if (tjDecompressHeader3(tj, bytes.data(), size, &width, &height, &subsampling, &colorspace) !=
      0) {
    jpeg_fail(tj, name, "corrupt JPEG header");
  }
  check_size(width, height, o.max_pixels, name, "JPEG");
  // Each scan of a progressive JPEG is a pass over the whole image: count them first.
  const std::size_t scans = jpeg_scan_count(bytes);
  if (scans > static_cast<std::size_t>(o.max_jpeg_scans)) {
    fail(name, "JPEG of " + std::to_string(scans) + " scans, more than max_jpeg_scans (" +
                   std::to_string(o.max_jpeg_scans) + ")");
  }
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
  // w × h is within max_pixels (it is at most the source's size), so count_px fits.
  std::uint8_t* px = pixel_buffer(w, h, cmyk ? 4 : o.channels, name);
  const std::size_t count_px = static_cast<std::size_t>(w) * static_cast<std::size_t>(h);
  // TJFLAG_STOPONWARNING: a warning (premature end of data, a corrupt Huffman code) fails.
  if (tjDecompress2(tj, bytes.data(), size, px, w, 0, h, format, TJFLAG_STOPONWARNING) != 0) {
    jpeg_fail(tj, name, "corrupt JPEG");
  }
  if (cmyk) cmyk_to(px, count_px, o.channels);
  place({px, w, h, static_cast<double>(scale.num) / scale.denom}, plan, o, out, name);
}

struct SpngFree {
  void operator()(spng_ctx* ctx) const noexcept { spng_ctx_free(ctx); }
};

[[noreturn]] void png_fail(std::string_view name, int code, const char* what) {
  if (code == SPNG_ECHUNK_LIMITS) {
    // Ancillary chunks over kPngChunkBytes are skipped unread; these are the ones kept.
    fail(name, "PNG ancillary chunks over the limits (" + std::to_string(kPngChunkCacheBytes) +
                   " bytes of them kept, or libspng's count): " + spng_strerror(code));
  }
  fail(name, std::string(code == SPNG_EOF || code == SPNG_IO_EOF ? "truncated PNG" : what) + ": " +
                 spng_strerror(code));
}

std::uint32_t big_endian32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

void decode_png(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                std::uint8_t* out, std::string_view name) {
  const std::unique_ptr<spng_ctx, SpngFree> ctx(spng_ctx_new(0));
  if (ctx == nullptr) throw std::bad_alloc();
  // libspng's own limits, so that a hostile header or chunk is refused as it is read: a side
  // over max_pixels (or 2^24, which keeps the resizer's row sizes small), one ancillary chunk
  // and all of them kept. The pixel count is checked below.
  const auto side = static_cast<std::uint32_t>(std::min<std::int64_t>(o.max_pixels, 1 << 24));
  int rc = spng_set_image_limits(ctx.get(), side, side);
  if (rc == 0) rc = spng_set_chunk_limits(ctx.get(), kPngChunkBytes, kPngChunkCacheBytes);
  if (rc == 0) rc = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  spng_ihdr ihdr{};
  if (rc == 0) rc = spng_get_ihdr(ctx.get(), &ihdr);
  if ((rc == SPNG_EUSER_WIDTH || rc == SPNG_EUSER_HEIGHT) && bytes.size() >= 24) {
    // The sides libspng refused, from IHDR (the chunk right after the signature): named as
    // any image over the limits is.
    const std::int64_t width = big_endian32(bytes.data() + 16);
    const std::int64_t height = big_endian32(bytes.data() + 20);
    const std::optional<std::int64_t> pixels = try_mul<std::int64_t>(width, height);
    if (!pixels || *pixels > o.max_pixels) fail_too_large(name, "PNG", width, height, o.max_pixels);
    fail(name, "PNG of " + std::to_string(width) + " x " + std::to_string(height) +
                   " pixels, a side over the " + std::to_string(side) + " ImageFolder decodes");
  }
  if (rc != 0) png_fail(name, rc, "corrupt PNG header");
  check_size(ihdr.width, ihdr.height, o.max_pixels, name, "PNG");
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
  const int format_channels = format == SPNG_FMT_G8 ? 1 : format == SPNG_FMT_RGB8 ? 3 : 4;
  std::uint8_t* px = pixel_buffer(width, height, format_channels, name);
  if (bytes_out != static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
                       static_cast<std::size_t>(format_channels)) {
    fail(name, "corrupt PNG: libspng sizes it " + std::to_string(bytes_out) + " bytes");
  }
  rc = spng_decode_image(ctx.get(), px, bytes_out, format, flags);
  if (rc != 0) png_fail(name, rc, "corrupt PNG");
  const std::size_t count = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  if (o.channels == 1 && !gray_source) rgb_to_gray(px, count);
  const ImagePlan plan = plan_image(width, height, o, seed);
  place({px, width, height, 1.0}, plan, o, out, name);
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
  if (o.max_pixels < 1 || o.max_pixels > kMaxPixelsLimit) {
    throw ConfigError(w + ": max_pixels must be 1 to " + std::to_string(kMaxPixelsLimit) +
                      ", got " + std::to_string(o.max_pixels));
  }
  if (o.max_jpeg_scans < 1) {
    throw ConfigError(w + ": max_jpeg_scans must be at least 1, got " +
                      std::to_string(o.max_jpeg_scans));
  }
  if (o.height < 1 || o.width < 1) {
    throw ConfigError(w + ": height and width must be at least 1, got " + std::to_string(o.height) +
                      " x " + std::to_string(o.width));
  }
  if (std::int64_t{o.height} * o.width > o.max_pixels) {  // ints: no overflow in 64 bits
    throw ConfigError(w + ": height x width, " + std::to_string(o.height) + " x " +
                      std::to_string(o.width) + ", is more than max_pixels (" +
                      std::to_string(o.max_pixels) + ")");
  }
  if (o.channels != 1 && o.channels != 3 && o.channels != 4) {
    throw ConfigError(w + ": channels must be 1 (gray), 3 (RGB) or 4 (RGBA), got " +
                      std::to_string(o.channels));
  }
  if (o.geometry != Geometry::resize_then_center_crop &&
      o.geometry != Geometry::random_resized_crop && o.geometry != Geometry::resize) {
    throw ConfigError(w + ": unknown geometry " + std::to_string(static_cast<int>(o.geometry)));
  }
  if (o.resize < 0 || o.resize > (1 << 20)) {
    throw ConfigError(w + ": resize must be 0 (automatic) or a side of at most 2^20 pixels, got " +
                      std::to_string(o.resize));
  }
  if (o.resize != 0 && o.geometry != Geometry::resize_then_center_crop) {
    throw ConfigError(
        w + ": resize (" + std::to_string(o.resize) +
        ") applies to Geometry::resize_then_center_crop only; leave it 0 for " +
        (o.geometry == Geometry::resize ? "Geometry::resize" : "Geometry::random_resized_crop"));
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

std::size_t max_file_bytes(const ImageOptions& options) {
  return checked_add(checked_mul(options.max_pixels, 8, "ImageFolder: max_pixels"),
                     kPngChunkCacheBytes, "ImageFolder: max_pixels");
}

std::size_t jpeg_scan_count(std::span<const std::uint8_t> bytes) noexcept {
  const std::uint8_t* const end = bytes.data() + bytes.size();
  const std::uint8_t* p = bytes.data() + std::min<std::size_t>(bytes.size(), 2);  // after SOI
  std::size_t scans = 0;
  while (p < end) {
    // A marker: 0xFF, any number of 0xFF fill bytes, then its code. Bytes before it are
    // garbage that libjpeg skips (with a warning, which fails the decode anyway).
    p = static_cast<const std::uint8_t*>(std::memchr(p, 0xff, static_cast<std::size_t>(end - p)));
    if (p == nullptr) break;
    while (p < end && *p == 0xff) ++p;
    if (p == end) break;
    const std::uint8_t code = *p++;
    if (code == 0xd9) break;                                                       // EOI
    if (code == 0x00 || code == 0x01 || (code >= 0xd0 && code <= 0xd8)) continue;  // no length
    if (end - p < 2) break;
    const std::size_t length = std::size_t{p[0]} << 8 | p[1];  // counts itself, not the code
    if (length > static_cast<std::size_t>(end - p)) break;     // libjpeg: premature end
    // A length below 2 skips nothing after itself in libjpeg (its skip_variable), which then
    // reads the next marker: so does this walk, never counting fewer scans than libjpeg reads.
    p += std::max<std::size_t>(length, 2);
    if (code != 0xda) continue;
    // SOS: its entropy-coded data runs to the next marker, where 0xFF 0x00 (a stuffed 0xFF) and
    // restart markers RST0..7 do not end it.
    ++scans;
    while (p < end) {
      const auto* ff =
          static_cast<const std::uint8_t*>(std::memchr(p, 0xff, static_cast<std::size_t>(end - p)));
      if (ff == nullptr) return scans;
      const std::uint8_t* q = ff;
      while (q < end && *q == 0xff) ++q;
      if (q == end) return scans;
      if (*q == 0x00 || (*q >= 0xd0 && *q <= 0xd7)) {
        p = q + 1;
      } else {
        p = ff;  // the marker ending the scan, read by the loop above
        break;
      }
    }
  }
  return scans;
}

std::size_t decode_scratch_bytes() noexcept {
  return file_scratch().capacity() + pixel_scratch().capacity() + resize_scratch().capacity();
}

void decode_image(std::span<const std::uint8_t> bytes, const ImageOptions& options,
                  std::uint64_t seed, std::uint8_t* out, std::string_view name) {
  // However the decode ends, a buffer one large image grew is not kept.
  struct Trim {
    Trim() = default;
    Trim(const Trim&) = delete;
    Trim& operator=(const Trim&) = delete;
    ~Trim() { trim_scratch(); }
  } const trim;
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
                                              std::string_view name, std::size_t max_bytes) {
  static const std::string what_fits = "an image within max_pixels takes (8 bytes a pixel, plus " +
                                       std::to_string(kPngChunkCacheBytes) + " of chunks)";
  try {
    const std::span<const std::byte> bytes = read_file(
        path, FileLabel{{}, name}, max_bytes, what_fits,
        [](std::size_t n) { return reinterpret_cast<std::byte*>(file_scratch().get(n)); });
    return {reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()};
  } catch (...) {
    file_scratch().trim(kScratchKeepBytes);  // a failed read keeps no large buffer either
    throw;
  }
}

}  // namespace ferry::detail
