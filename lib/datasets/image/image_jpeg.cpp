// The image decoder's JPEGs: libjpeg-turbo through the libjpeg API, decoding only what the
// output needs. The rows above the resize's reach are skipped (jpeg_skip_scanlines: entropy
// decoded, not transformed), the rows below it never read, the columns outside it cropped
// (jpeg_crop_scanline: no IDCT, upsampling or color conversion there), and the whole scaled in
// the DCT domain by 1/2, 1/4 or 1/8 where the output needs at most that.

// clang-format off
#include <cstddef>  // jpeglib.h uses size_t and FILE without including their headers
#include <cstdio>
#include <jerror.h>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "datasets/image/image_internal.hpp"

namespace ferry::detail::image {
namespace {

// libjpeg reports errors by calling error_exit, which must not return: it jumps back to the
// setjmp of the stage running (the functions below marked "Stage"), which report failure. No
// C++ object with a destructor lives in a stage's frame, and the jump never crosses C++ frames.
// Warnings (corrupt data libjpeg would paper over, a premature end) fail the same way.
struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg's pointer to it is a pointer to this
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void on_jpeg_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);  // NOLINT(cert-err52-cpp): libjpeg's error protocol
}

extern "C" void on_jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_jpeg_error(cinfo);  // a warning; trace messages (level >= 0) are ignored
}

// This thread's decompressor, made anew for each image (a decompressor must not be used by two
// threads at once). Not reused: libjpeg keeps the Huffman and quantization tables an image
// defines in the decompressor for the images after it (abbreviated streams), so an image that
// uses a table it does not define would decode with an earlier image's, or fail only after one.
class JpegDecoder {
 public:
  JpegDecoder() = default;
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
  ~JpegDecoder() {
    if (created_) jpeg_destroy_decompress(&cinfo_);
  }
  /// A decompressor that has seen no image.
  jpeg_decompress_struct* fresh() {
    if (created_) {
      jpeg_destroy_decompress(&cinfo_);
      created_ = false;
    }
    cinfo_.err = jpeg_std_error(&errors_.pub);
    errors_.pub.error_exit = on_jpeg_error;
    errors_.pub.emit_message = on_jpeg_message;
    if (!create(&cinfo_)) throw std::bad_alloc();  // it fails only without memory
    created_ = true;
    return &cinfo_;
  }
  const char* message() const noexcept { return errors_.message; }

 private:
  static bool create(jpeg_decompress_struct* c) {
    if (setjmp(reinterpret_cast<ErrorManager*>(c->err)->jump) != 0) return false;  // NOLINT
    jpeg_create_decompress(c);
    return true;
  }
  jpeg_decompress_struct cinfo_{};
  ErrorManager errors_{};
  bool created_ = false;
};

JpegDecoder& jpeg_decoder() {
  thread_local JpegDecoder decoder;
  return decoder;
}

std::jmp_buf& jump_of(j_decompress_ptr c) { return reinterpret_cast<ErrorManager*>(c->err)->jump; }

// Stage: the header (and nothing more) of `bytes`.
bool read_header(j_decompress_ptr c, const std::uint8_t* bytes, std::size_t size) {
  if (setjmp(jump_of(c)) != 0) return false;  // NOLINT(cert-err52-cpp)
  jpeg_mem_src(c, bytes, static_cast<unsigned long>(size));
  jpeg_read_header(c, TRUE);
  return true;
}

// Stage: starts decompressing (a progressive JPEG's scans are all read here) and crops the
// columns to [*x, *x + *width), which libjpeg widens to whole iMCUs.
bool start(j_decompress_ptr c, JDIMENSION* x, JDIMENSION* width) {
  if (setjmp(jump_of(c)) != 0) return false;  // NOLINT(cert-err52-cpp)
  jpeg_start_decompress(c);
  if (*width < c->output_width) jpeg_crop_scanline(c, x, width);
  return true;
}

// Stage: rows [top, bottom) into `to` (`stride` bytes apart); the rest of the file is read
// (and checked) only when the rows reach the image's last.
bool read_rows(j_decompress_ptr c, JDIMENSION top, JDIMENSION bottom, std::uint8_t* to,
               std::size_t stride) {
  if (setjmp(jump_of(c)) != 0) return false;  // NOLINT(cert-err52-cpp)
  if (top > 0) jpeg_skip_scanlines(c, top);
  JSAMPROW rows[16];
  while (c->output_scanline < bottom) {
    const JDIMENSION first = c->output_scanline;
    const JDIMENSION n = std::min<JDIMENSION>(bottom - first, 16);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = to + (first - top + i) * stride;
    if (jpeg_read_scanlines(c, rows, n) == 0) return false;  // a suspending source: never
  }
  if (bottom == c->output_height) jpeg_finish_decompress(c);
  return true;
}

// Leaves the decompressor ready for the next image, however this one ended.
class Abort {
 public:
  explicit Abort(j_decompress_ptr c) : c_(c) {}
  Abort(const Abort&) = delete;
  Abort& operator=(const Abort&) = delete;
  ~Abort() { jpeg_abort_decompress(c_); }

 private:
  j_decompress_ptr c_;
};

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

// After a failed stage: its error. A header cut short is a corrupt header; pixel data cut
// short, a truncated JPEG.
[[noreturn]] void jpeg_fail(std::string_view name, const char* what, bool header = false) {
  const std::string why = jpeg_decoder().message();
  const bool truncated = !header && why.find("Premature end") != std::string::npos;
  fail(name, (truncated ? std::string("truncated JPEG") : std::string(what)) + ": " + why);
}

// Columns decoded beyond each side of those the resize reads (see decode_jpeg()).
constexpr int kCropMargin = 2;

int scaled(int size, JpegScale s) {
  return static_cast<int>((std::int64_t{size} * s.num + s.denom - 1) / s.denom);
}

}  // namespace

void decode_jpeg(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                 std::uint8_t* out, std::string_view name) {
  j_decompress_ptr c = jpeg_decoder().fresh();
  const Abort abort(c);
  if (!read_header(c, bytes.data(), bytes.size())) jpeg_fail(name, "corrupt JPEG header", true);
  const auto width = static_cast<int>(c->image_width);
  const auto height = static_cast<int>(c->image_height);
  check_size(width, height, o.max_pixels, name, "JPEG");
  // Each scan of a progressive JPEG is a pass over the whole image: count them first. The same
  // walk tells a file cut short, whichever rows the output reads.
  const JpegMarkers markers = jpeg_markers(bytes);
  if (markers.scans > static_cast<std::size_t>(o.max_jpeg_scans)) {
    fail(name, "JPEG of " + std::to_string(markers.scans) + " scans, more than max_jpeg_scans (" +
                   std::to_string(o.max_jpeg_scans) + ")");
  }
  if (!markers.ends) fail(name, "truncated JPEG: no end-of-image marker");
  const ImagePlan plan = plan_image(width, height, o, seed);
  const double cover = o.geometry == Geometry::random_resized_crop ? kRandomCropCover : kEvalCover;
  const JpegScale scale = pick_jpeg_scale((plan.out_x1 - plan.out_x0) / (plan.x1 - plan.x0),
                                          (plan.out_y1 - plan.out_y0) / (plan.y1 - plan.y0), cover);
  const int w = scaled(width, scale);
  const int h = scaled(height, scale);
  const Fit& fit = fit_image(plan, o, static_cast<double>(scale.num) / scale.denom, w, h, name);

  const bool cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  // RGB decoded as RGBX where the resize then runs faster (libjpeg-turbo writes either as fast).
  const bool rgbx = !cmyk && o.channels == 3 && packs_rgbx(fit.x, fit.y);
  c->out_color_space = cmyk              ? JCS_CMYK
                       : o.channels == 1 ? JCS_GRAYSCALE
                       : rgbx            ? JCS_EXT_RGBX
                       : o.channels == 3 ? JCS_RGB
                                         : JCS_EXT_RGBA;
  c->scale_num = static_cast<unsigned>(scale.num);
  c->scale_denom = static_cast<unsigned>(scale.denom);
  c->dct_method = JDCT_ISLOW;  // PIL's, and libjpeg's default
  // Two columns more each side: libjpeg's fancy upsampling treats the crop's edges as the
  // image's, so their outermost pixels differ from a full decode's.
  const int first = std::max(0, fit.x.lo - kCropMargin);
  const int last = std::min(w, fit.x.hi + kCropMargin);
  JDIMENSION x = static_cast<JDIMENSION>(first);
  JDIMENSION columns = static_cast<JDIMENSION>(last - first);
  if (!start(c, &x, &columns)) jpeg_fail(name, "corrupt JPEG");
  if (static_cast<int>(c->output_height) != h || static_cast<int>(x) > fit.x.lo ||
      static_cast<int>(x + columns) < fit.x.hi) {
    fail(name, "corrupt JPEG: libjpeg decodes it as " + std::to_string(c->output_width) + " x " +
                   std::to_string(c->output_height) + " pixels");
  }
  const int channels = cmyk || rgbx ? 4 : o.channels;
  // columns × the rows read: within the (scaled) image, so within max_pixels.
  const int rows = fit.y.hi - fit.y.lo;
  std::uint8_t* px = pixel_buffer(static_cast<int>(columns), rows, channels, name);
  const std::size_t stride = static_cast<std::size_t>(columns) * static_cast<std::size_t>(channels);
  if (!read_rows(c, static_cast<JDIMENSION>(fit.y.lo), static_cast<JDIMENSION>(fit.y.hi), px,
                 stride)) {
    jpeg_fail(name, "corrupt JPEG");
  }
  if (cmyk) {
    cmyk_to(px, static_cast<std::size_t>(columns) * static_cast<std::size_t>(rows), o.channels);
  }
  place({px, static_cast<int>(columns), static_cast<int>(x), fit.y.lo, rgbx ? 4 : 0}, plan, fit, o,
        out);
}

}  // namespace ferry::detail::image

namespace ferry::detail {

using namespace image;

JpegScale pick_jpeg_scale(double need_x, double need_y, double cover) {
  // The smallest factor whose image still covers the output `cover` times over: the resize
  // after it then shrinks by that much or more, and its filter, not the DCT's, shapes the
  // pixels. Twice over (kEvalCover) keeps the output within 1.0 u8 level of the whole image
  // resized on real photos (at 1x to 2x, up to 3 levels); random crops take 1.5
  // (kRandomCropCover): outputs move only for crops the scaled image covers 1.5 to 2 times.
  const double need = cover * std::max(need_x, need_y);
  for (const int denom : {8, 4, 2}) {
    if (need <= (1 + 1e-12) / denom) return {1, denom};
  }
  return {};
}

std::size_t jpeg_scan_count(std::span<const std::uint8_t> bytes) noexcept {
  return jpeg_markers(bytes).scans;
}

JpegMarkers jpeg_markers(std::span<const std::uint8_t> bytes) noexcept {
  const std::uint8_t* const end = bytes.data() + bytes.size();
  const std::uint8_t* p = bytes.data() + std::min<std::size_t>(bytes.size(), 2);  // after SOI
  JpegMarkers m;
  std::size_t& scans = m.scans;
  while (p < end) {
    // A marker: 0xFF, any number of 0xFF fill bytes, then its code. Bytes before it are
    // garbage that libjpeg skips (with a warning, which fails the decode anyway).
    p = static_cast<const std::uint8_t*>(std::memchr(p, 0xff, static_cast<std::size_t>(end - p)));
    if (p == nullptr) break;
    while (p < end && *p == 0xff) ++p;
    if (p == end) break;
    const std::uint8_t code = *p++;
    if (code == 0xd9) {  // EOI
      m.ends = true;
      break;
    }
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
      if (ff == nullptr) return m;
      const std::uint8_t* q = ff;
      while (q < end && *q == 0xff) ++q;
      if (q == end) return m;
      if (*q == 0x00 || (*q >= 0xd0 && *q <= 0xd7)) {
        p = q + 1;
      } else {
        p = ff;  // the marker ending the scan, read by the loop above
        break;
      }
    }
  }
  return m;
}

}  // namespace ferry::detail
