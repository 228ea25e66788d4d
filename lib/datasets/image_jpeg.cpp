// The image decoder's JPEGs: TurboJPEG, scaled down while decoding where the output allows.

#include <turbojpeg.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "datasets/image_internal.hpp"

namespace ferry::detail::image {
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

}  // namespace

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

}  // namespace ferry::detail::image

namespace ferry::detail {

using namespace image;

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

}  // namespace ferry::detail
