#include "image_limits.hpp"

#include <fcntl.h>
#include <spng.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// Seconds of `reps` passes of f() (after a warm-up one): their median.
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

}  // namespace

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
