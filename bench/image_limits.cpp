#include "image_limits.hpp"

// clang-format off
#include <cstdio>  // jpeglib.h uses size_t and FILE without including their headers
#include <jpeglib.h>
// clang-format on
#include <fcntl.h>
#include <spng.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csetjmp>
#include <cstdint>
#include <ctime>
#include <stdexcept>
#include <string>

namespace bench {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

volatile std::uint64_t g_limit_sink = 0;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Seconds of `reps` passes of f() (after a warm-up one), wall time as the loader's rate is
// timed (a busy machine slows both alike; bench/images profiles in CPU time): their median.
template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> s;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    if (r > 0) {
      s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return median_of(s);
}

// The least a file costs: open, fstat for its size, one read into `buffer`, close.
std::size_t read_into(const fs::path& p, Bytes& buffer) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + p.string());
  struct stat st {};
  ::fstat(fd, &st);
  const auto size = static_cast<std::size_t>(st.st_size);
  if (buffer.size() < size) buffer.resize(size);
  const ssize_t n = ::read(fd, buffer.data(), size);
  ::close(fd);
  if (n != static_cast<ssize_t>(size)) throw std::runtime_error("cannot read " + p.string());
  return size;
}

std::vector<Bytes> read_all(const std::vector<fs::path>& files) {
  std::vector<Bytes> out;
  Bytes buffer;
  for (const fs::path& p : files) {
    const std::size_t n = read_into(p, buffer);
    out.emplace_back(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(n));
  }
  return out;
}

double thread_cpu_now() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// libjpeg's errors jump back to decode_crop()'s setjmp (valid files only are benchmarked).
struct JpegErrors {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

extern "C" void on_limit_jpeg_error(j_common_ptr c) {
  std::longjmp(reinterpret_cast<JpegErrors*>(c->err)->jump, 1);  // NOLINT(cert-err52-cpp)
}

// The largest power-of-two reduction (8, 4, 2 or 1) that keeps a w × h crop at least `out`
// pixels on both sides.
int crop_denominator(int w, int h, int out) {
  int d = 8;
  while (d > 1 && (w < out * d || h < out * d)) d /= 2;
  return d;
}

// Decodes the crop `b` of `jpeg` at 1/d into `pixels`; false on a libjpeg error. No C++ object
// with a destructor lives in this frame (the longjmp crosses it).
bool decode_crop(jpeg_decompress_struct* c, const Bytes& jpeg, const CropBox& b, int d,
                 Bytes& pixels) {
  if (setjmp(reinterpret_cast<JpegErrors*>(c->err)->jump) != 0) {  // NOLINT(cert-err52-cpp)
    jpeg_abort_decompress(c);
    return false;
  }
  jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(c, TRUE);
  c->out_color_space = JCS_RGB;
  c->dct_method = JDCT_ISLOW;
  c->scale_num = 1;
  c->scale_denom = static_cast<unsigned>(d);
  jpeg_start_decompress(c);
  const auto x0 = static_cast<JDIMENSION>(b.x / d);
  const auto x1 =
      std::min<JDIMENSION>(c->output_width, static_cast<JDIMENSION>((b.x + b.width + d - 1) / d));
  const auto y0 = static_cast<JDIMENSION>(b.y / d);
  const auto y1 =
      std::min<JDIMENSION>(c->output_height, static_cast<JDIMENSION>((b.y + b.height + d - 1) / d));
  JDIMENSION x = x0;
  JDIMENSION width = x1 - x0;
  if (width < c->output_width) jpeg_crop_scanline(c, &x, &width);
  const std::size_t stride = static_cast<std::size_t>(width) * 3;
  if (pixels.size() < stride * (y1 - y0)) pixels.resize(stride * (y1 - y0));
  if (y0 > 0) jpeg_skip_scanlines(c, y0);
  while (c->output_scanline < y1) {
    JSAMPROW row = pixels.data() + (c->output_scanline - y0) * stride;
    jpeg_read_scanlines(c, &row, 1);
  }
  jpeg_abort_decompress(c);  // the rows below the crop are never read
  return true;
}

// Entropy-decodes the whole of `jpeg` (jpeg_read_coefficients: Huffman decoding into the DCT
// coefficients, no IDCT, upsampling or color conversion): the floor of any decode that reads the
// image's last rows. False on a libjpeg error.
bool entropy_decode(jpeg_decompress_struct* c, const Bytes& jpeg) {
  if (setjmp(reinterpret_cast<JpegErrors*>(c->err)->jump) != 0) {  // NOLINT(cert-err52-cpp)
    jpeg_abort_decompress(c);
    return false;
  }
  jpeg_mem_src(c, jpeg.data(), static_cast<unsigned long>(jpeg.size()));
  jpeg_read_header(c, TRUE);
  jvirt_barray_ptr* coefficients = jpeg_read_coefficients(c);
  g_limit_sink = g_limit_sink + (coefficients != nullptr ? 1 : 0);
  jpeg_abort_decompress(c);
  return true;
}

}  // namespace

CropLimit jpeg_crop_limit(const std::vector<fs::path>& files, const std::vector<CropBox>& boxes,
                          int out, int reps) {
  if (files.size() != boxes.size()) throw std::invalid_argument("jpeg_crop_limit: one box a file");
  CropLimit lim;
  lim.images = files.size();
  const std::vector<Bytes> encoded = read_all(files);
  std::vector<int> denominators;
  for (const CropBox& b : boxes) {
    const int d = crop_denominator(b.width, b.height, out);
    denominators.push_back(d);
    ++lim.at_scale[d == 1 ? 0 : d == 2 ? 1 : d == 4 ? 2 : 3];
  }
  tjhandle tj = tjInitDecompress();
  jpeg_decompress_struct c{};
  JpegErrors errors{};
  c.err = jpeg_std_error(&errors.pub);
  errors.pub.error_exit = on_limit_jpeg_error;
  jpeg_create_decompress(&c);
  Bytes pixels;
  const auto full = [&] {
    for (const Bytes& jpeg : encoded) {
      int w = 0, h = 0, sub = 0, cs = 0;
      if (tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &sub, &cs) != 0) {
        throw std::runtime_error(tjGetErrorStr2(tj));
      }
      const auto size = static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3;
      if (pixels.size() < size) pixels.resize(size);
      if (tjDecompress2(tj, jpeg.data(), jpeg.size(), pixels.data(), w, 0, h, TJPF_RGB, 0) != 0) {
        throw std::runtime_error(tjGetErrorStr2(tj));
      }
      g_limit_sink = g_limit_sink + pixels[0];
    }
  };
  const auto crops = [&] {
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      if (!decode_crop(&c, encoded[i], boxes[i], denominators[i], pixels)) {
        throw std::runtime_error("libjpeg cannot decode " + files[i].string());
      }
      g_limit_sink = g_limit_sink + pixels[0];
    }
  };
  const auto entropy = [&] {
    for (std::size_t i = 0; i < encoded.size(); ++i) {
      if (!entropy_decode(&c, encoded[i])) {
        throw std::runtime_error("libjpeg cannot decode " + files[i].string());
      }
    }
  };
  std::vector<double> full_s, crop_s, entropy_s;
  for (int r = 0; r <= reps; ++r) {  // the first pass warms up
    const double t0 = thread_cpu_now();
    full();
    const double t1 = thread_cpu_now();
    crops();
    const double t2 = thread_cpu_now();
    entropy();
    const double t3 = thread_cpu_now();
    if (r > 0) {
      full_s.push_back(t1 - t0);
      crop_s.push_back(t2 - t1);
      entropy_s.push_back(t3 - t2);
    }
  }
  jpeg_destroy_decompress(&c);
  tjDestroy(tj);
  const double n = static_cast<double>(std::max<std::size_t>(files.size(), 1));
  lim.full_s = median_of(full_s) / n;
  lim.crop_s = median_of(crop_s) / n;
  lim.entropy_s = median_of(entropy_s) / n;
  return lim;
}

ImageLimit png_limit(const std::vector<fs::path>& files, int reps) {
  ImageLimit lim;
  lim.images = files.size();
  const double n = static_cast<double>(files.size());
  Bytes buffer;
  lim.read_s = median_seconds(reps,
                              [&] {
                                for (const fs::path& p : files)
                                  g_limit_sink = g_limit_sink + read_into(p, buffer);
                              }) /
               n;
  const std::vector<Bytes> encoded = read_all(files);
  Bytes pixels;
  lim.decode_s =
      median_seconds(reps,
                     [&] {
                       for (const Bytes& png : encoded) {
                         spng_ctx* ctx = spng_ctx_new(0);
                         spng_set_png_buffer(ctx, png.data(), png.size());
                         spng_ihdr ihdr{};
                         spng_get_ihdr(ctx, &ihdr);
                         const int fmt =
                             ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth <= 8
                                 ? SPNG_FMT_G8
                                 : SPNG_FMT_RGB8;
                         std::size_t size = 0;
                         spng_decoded_image_size(ctx, fmt, &size);
                         if (pixels.size() < size) pixels.resize(size);
                         const int rc = spng_decode_image(ctx, pixels.data(), size, fmt, 0);
                         spng_ctx_free(ctx);
                         if (rc != 0) throw std::runtime_error(spng_strerror(rc));
                         g_limit_sink = g_limit_sink + pixels[0];
                       }
                     }) /
      n;
  return lim;
}

ImageLimit jpeg_limit(const std::vector<fs::path>& files, int reps) {
  ImageLimit lim;
  lim.images = files.size();
  const std::vector<Bytes> encoded = read_all(files);
  tjhandle tj = tjInitDecompress();
  Bytes pixels;
  lim.decode_s =
      median_seconds(
          reps,
          [&] {
            for (const Bytes& jpeg : encoded) {
              int w = 0, h = 0, sub = 0, cs = 0;
              if (tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &sub, &cs) != 0) {
                throw std::runtime_error(tjGetErrorStr2(tj));
              }
              const auto size = static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3;
              if (pixels.size() < size) pixels.resize(size);
              if (tjDecompress2(tj, jpeg.data(), jpeg.size(), pixels.data(), w, 0, h, TJPF_RGB,
                                0) != 0) {
                throw std::runtime_error(tjGetErrorStr2(tj));
              }
              g_limit_sink = g_limit_sink + pixels[0];
            }
          }) /
      static_cast<double>(files.size());
  tjDestroy(tj);
  return lim;
}

}  // namespace bench
