// bench/images: ImageFolder's decoding rate, and how much of it the loader delivers.
//
// Two folders are generated, deterministically (in a temporary folder, or --dir):
//   jpeg: N ImageNet-like 500 × 375 photos (TurboJPEG, quality 90, 4:2:0; smooth gradients,
//         shaded and textured shapes, mild noise, so that a file weighs about what a photo does) in
//         8 classes, read as Resize(256) + CenterCrop(224), 3 channels;
//   png:  M MNIST-like 28 × 28 gray PNGs (strokes on black) in 10 classes, read at their own
//         size (no resize), 1 channel.
// For each, three figures, each the median of R runs after a warm-up, the runs of the three
// interleaved so that a noisy stretch of the machine hits all alike:
//   (a) the single-core limit: one thread reads each file's bytes and decodes, resizes and
//       crops it through ImageFolder's own functions (lib/datasets/image/image_decode.hpp),
//       images/s;
//   (b) ferry::Loader over ImageFolder, workers = 1 and 2, batch 64, device cpu, shuffle, one
//       epoch, images/s;
//   and the ratio (b, workers = 2) / (2 × a), whose target is 0.85 (two workers should give
//   twice one core's rate, less the loader's own cost). It needs two idle cores; on a shared
//   machine the CPU-time ratio (CPU seconds of (a) over those of (b), all threads) tells the
//   loader's own cost apart from cores taken by other work.
// Then, per folder, where one thread's time goes (thread CPU µs per image): the file read,
// ferry's decode from memory, the resize alone, and the machine's limit (bench/image_limits.hpp:
// libjpeg-turbo's full decode; open + read + libspng).
// The files are read from the page cache (they were just written, and the warm-up reads them).
// With --normalize the loader also normalizes, on its workers after each read (u8 HWC to f32
// CHW: ImageNet's mean/std for the JPEGs, Normalize{} for the PNGs), as a training loop that
// asks for floats; the one-core pass (a) stays decoding only.
//
// With --rrc the JPEGs are read as training reads them, RandomResizedCrop(224) + flip (ferry's
// random_resized_crop, the sample's index as its seed), and the profile adds the training crop's
// ceiling (bench/image_limits.hpp, jpeg_crop_limit: libjpeg alone decoding only each crop) for
// the same boxes.
//
// Usage: images [--quick] [--normalize] [--rrc] [--dir PATH] [--jpegs N] [--pngs M] [--reps R]
//   defaults N = 512, M = 10000, R = 5; --quick: N = 128, M = 2000, R = 3. With --dir the
//   folders are kept (and reused when they hold the expected number of files).

#include <spng.h>
#include <sys/resource.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "datasets/image/image_decode.hpp"
#include "datasets/image/image_internal.hpp"
#include "datasets/image/image_resample_avx2.hpp"
#include "ferry/ferry.hpp"
#include "image_limits.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;

constexpr double kTarget = 0.85;
constexpr std::size_t kBatch = 64;

struct Args {
  bool quick = false;
  bool normalize = false;
  bool rrc = false;
  std::string dir;
  int jpegs = 0, pngs = 0, reps = 0;  // 0: the mode's default
};

constexpr const char* kUsage =
    "usage: images [--quick] [--normalize] [--rrc] [--dir PATH] [--jpegs N] [--pngs M] "
    "[--reps R]";

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
      return argv[++i];
    };
    if (arg == "--quick") {
      a.quick = true;
    } else if (arg == "--normalize") {
      a.normalize = true;
    } else if (arg == "--rrc") {
      a.rrc = true;
    } else if (arg == "--dir") {
      a.dir = value();
    } else if (arg == "--jpegs") {
      a.jpegs = std::stoi(value());
    } else if (arg == "--pngs") {
      a.pngs = std::stoi(value());
    } else if (arg == "--reps") {
      a.reps = std::stoi(value());
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg));
    }
  }
  if (a.jpegs == 0) a.jpegs = a.quick ? 128 : 512;
  if (a.pngs == 0) a.pngs = a.quick ? 2000 : 10000;
  if (a.reps == 0) a.reps = a.quick ? 3 : 5;
  if (a.jpegs < 1 || a.pngs < 1 || a.reps < 1) throw std::invalid_argument(kUsage);
  return a;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// splitmix64, for reproducible pictures.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1.0p-53;
  }

 private:
  std::uint64_t state_;
};

std::uint8_t clamp8(double v) {
  return static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
}

// A 500 × 375 RGB picture: a two-colour gradient with a fine wave, a dozen shaded and textured
// discs and boxes, mild noise.
Bytes photo(std::uint64_t seed, int width, int height) {
  Rng rng(seed);
  double from[3], to[3];
  for (int c = 0; c < 3; ++c) {
    from[c] = rng.uniform(0, 255);
    to[c] = rng.uniform(0, 255);
  }
  const double angle = rng.uniform(0, 6.283);
  const double dx = std::cos(angle) / width;
  const double dy = std::sin(angle) / height;
  const double wx = rng.uniform(-1.2, 1.2);  // a fine wave over the background (grass, sand)
  const double wy = rng.uniform(-1.2, 1.2);
  const double wave = rng.uniform(10, 30);
  std::vector<double> px(static_cast<std::size_t>(width * height * 3));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double t = std::clamp(0.5 + (x - width / 2.0) * dx + (y - height / 2.0) * dy, 0.0, 1.0);
      for (int c = 0; c < 3; ++c) {
        px[static_cast<std::size_t>((y * width + x) * 3 + c)] =
            from[c] + (to[c] - from[c]) * t + wave * std::sin(wx * x + wy * y + c);
      }
    }
  }
  const int shapes = 8 + static_cast<int>(rng.next() % 8);
  for (int s = 0; s < shapes; ++s) {
    const bool disc = rng.next() % 2 == 0;
    const double cx = rng.uniform(0, width);
    const double cy = rng.uniform(0, height);
    const double rx = rng.uniform(15, 120);
    const double ry = disc ? rx : rng.uniform(15, 120);
    double color[3];
    for (double& c : color) c = rng.uniform(0, 255);
    const double shade = rng.uniform(-1.5, 1.5);  // a gradient across the shape
    // and a texture (fabric, foliage): a fine wave of random direction, period 4-20 pixels
    const double fx = rng.uniform(-1.5, 1.5);
    const double fy = rng.uniform(-1.5, 1.5);
    const double amp = rng.uniform(5, 35);
    const int x0 = std::max(0, static_cast<int>(cx - rx));
    const int x1 = std::min(width, static_cast<int>(cx + rx) + 1);
    const int y0 = std::max(0, static_cast<int>(cy - ry));
    const int y1 = std::min(height, static_cast<int>(cy + ry) + 1);
    for (int y = y0; y < y1; ++y) {
      for (int x = x0; x < x1; ++x) {
        const double u = (x - cx) / rx;
        const double v = (y - cy) / ry;
        if (disc && u * u + v * v > 1) continue;
        for (int c = 0; c < 3; ++c) {
          double& p = px[static_cast<std::size_t>((y * width + x) * 3 + c)];
          p = 0.2 * p + 0.8 * (color[c] + shade * 40 * u + amp * std::sin(fx * x + fy * y));
        }
      }
    }
  }
  Bytes out(px.size());
  for (std::size_t i = 0; i < px.size(); ++i) {
    const double noise = static_cast<double>(rng.next() % 57) - 28;  // ±28, uniform
    out[i] = clamp8(px[i] + noise);
  }
  return out;
}

// A 28 × 28 gray "digit": two or three thick strokes on black.
Bytes digit(std::uint64_t seed) {
  Rng rng(seed);
  Bytes px(28 * 28, 0);
  const int strokes = 2 + static_cast<int>(rng.next() % 2);
  for (int s = 0; s < strokes; ++s) {
    const double ax = rng.uniform(5, 23), ay = rng.uniform(4, 24);
    const double bx = rng.uniform(5, 23), by = rng.uniform(4, 24);
    for (int step = 0; step <= 40; ++step) {
      const double t = step / 40.0;
      const double x = ax + (bx - ax) * t;
      const double y = ay + (by - ay) * t;
      for (int yy = static_cast<int>(y) - 2; yy <= static_cast<int>(y) + 2; ++yy) {
        for (int xx = static_cast<int>(x) - 2; xx <= static_cast<int>(x) + 2; ++xx) {
          if (xx < 0 || yy < 0 || xx >= 28 || yy >= 28) continue;
          const double d = std::hypot(xx - x, yy - y);
          auto& p = px[static_cast<std::size_t>(yy * 28 + xx)];
          p = std::max(p, clamp8(255 * (1.6 - d / 1.4)));
        }
      }
    }
  }
  return px;
}

Bytes encode_jpeg(const Bytes& rgb, int width, int height) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (tjCompress2(tj, rgb.data(), width, 0, height, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0) !=
      0) {
    const std::string why = tjGetErrorStr2(tj);
    tjDestroy(tj);
    throw std::runtime_error("tjCompress2: " + why);
  }
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

Bytes encode_png_gray(const Bytes& gray, int width, int height) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<std::uint32_t>(width);
  ihdr.height = static_cast<std::uint32_t>(height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
  spng_set_ihdr(ctx, &ihdr);
  const int rc =
      spng_encode_image(ctx, gray.data(), gray.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  std::size_t len = 0;
  int err = 0;
  auto* buf = rc == 0 ? static_cast<std::uint8_t*>(spng_get_png_buffer(ctx, &len, &err)) : nullptr;
  spng_ctx_free(ctx);
  if (buf == nullptr) throw std::runtime_error(std::string("spng: ") + spng_strerror(rc));
  Bytes out(buf, buf + len);
  std::free(buf);  // spng's malloc'd buffer
  return out;
}

void write_file(const fs::path& p, const Bytes& bytes) {
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

std::size_t count_files(const fs::path& root) {
  std::size_t n = 0;
  if (!fs::is_directory(root)) return 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) n += e.is_regular_file() ? 1U : 0U;
  return n;
}

// Writes the folders (unless --dir already holds them); returns the mean JPEG size in bytes.
double generate(const fs::path& root, int jpegs, int pngs) {
  std::uintmax_t jpeg_bytes = 0;
  if (count_files(root / "jpeg") != static_cast<std::size_t>(jpegs)) {
    fs::remove_all(root / "jpeg");
    for (int i = 0; i < jpegs; ++i) {
      const fs::path dir = root / "jpeg" / ("class_" + std::to_string(i % 8));
      fs::create_directories(dir);
      write_file(dir / ("img_" + std::to_string(i) + ".jpg"),
                 encode_jpeg(photo(static_cast<std::uint64_t>(i), 500, 375), 500, 375));
    }
  }
  for (const auto& e : fs::recursive_directory_iterator(root / "jpeg")) {
    if (e.is_regular_file()) jpeg_bytes += e.file_size();
  }
  if (count_files(root / "png") != static_cast<std::size_t>(pngs)) {
    fs::remove_all(root / "png");
    for (int i = 0; i < pngs; ++i) {
      const fs::path dir = root / "png" / ("digit_" + std::to_string(i % 10));
      if (i < 10) fs::create_directories(dir);
      write_file(dir / (std::to_string(i) + ".png"),
                 encode_png_gray(digit(static_cast<std::uint64_t>(i) + 1'000'003), 28, 28));
    }
  }
  return static_cast<double>(jpeg_bytes) / jpegs;
}

struct Row {
  std::string name;
  std::size_t images = 0;
  double single = 0, loader1 = 0, loader2 = 0;
  double cpu_efficiency = 0;  // CPU time of the one-thread pass / the loader's (workers = 2)
};

// CPU seconds of this process so far, all threads.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Images per second of wall time, and CPU seconds spent, of one run of `f`.
struct Run {
  double rate = 0, cpu = 0;
};
template <class F>
Run timed(std::size_t n, F f) {
  const double c0 = cpu_seconds();
  const auto t0 = Clock::now();
  f();
  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  return {static_cast<double>(n) / wall, cpu_seconds() - c0};
}

Row measure(const std::string& name, const fs::path& root, const ferry::ImageOptions& o, int reps) {
  const auto ds = ferry::ImageFolder::open(root, o);
  const std::size_t n = ds->size();
  Bytes out(static_cast<std::size_t>(o.height * o.width * o.channels));
  auto single = [&] {
    return timed(n, [&] {
      for (std::size_t i = 0; i < n; ++i) {
        const fs::path& p = ds->path(i);
        ferry::detail::decode_image(ferry::detail::read_file_bytes(p, p.native()), o, i, out.data(),
                                    p.native());
      }
    });
  };
  auto make = [&](int workers) {
    ferry::LoaderOptions lo;
    lo.autotune = false;  // the settings this bench states, fixed
    lo.batch_size = kBatch;
    lo.shuffle = true;
    lo.seed = 1;
    lo.device = ferry::Device::cpu();
    lo.workers = workers;
    return std::make_unique<ferry::Loader>(ds, lo);
  };
  const auto w1 = make(1);
  const auto w2 = make(2);
  auto epoch = [&](ferry::Loader& loader, std::uint64_t e) {
    return timed(n, [&] {
      std::size_t got = 0;
      for (const ferry::Batch& b : loader.epoch(e)) got += b.size();
      if (got != n) throw std::runtime_error(name + ": an epoch delivered " + std::to_string(got));
    });
  };
  single();  // warm-up: page cache, thread buffers
  epoch(*w1, 0);
  epoch(*w2, 0);
  std::vector<double> s, a, b, cpu;
  for (int r = 0; r < reps; ++r) {
    const Run one = single();
    const Run l1 = epoch(*w1, static_cast<std::uint64_t>(r) + 1);
    const Run l2 = epoch(*w2, static_cast<std::uint64_t>(r) + 1);
    s.push_back(one.rate);
    a.push_back(l1.rate);
    b.push_back(l2.rate);
    cpu.push_back(one.cpu / l2.cpu);
    std::fprintf(stderr,
                 "  %s run %d: single %.0f, workers=1 %.0f, workers=2 %.0f images/s; CPU s: "
                 "single %.3f, workers=2 %.3f\n",
                 name.c_str(), r + 1, one.rate, l1.rate, l2.rate, one.cpu, l2.cpu);
  }
  return {name, n, median(s), median(a), median(b), median(cpu)};
}

// Where one thread's time goes, per image (CPU µs of the thread, medians of `reps` passes): the
// file read alone (open, fstat, read: ImageFolder's read_file_bytes), ferry's decode from memory
// (the cropped decode and the resize), the resize alone (fit + resample of an image decoded
// beforehand, over the first 64 files), and the machine's limit (bench/image_limits.hpp): libspng's
// decode after open + read, or libjpeg-turbo's decode of the whole image.
void profile(const std::string& name, const fs::path& root, const ferry::ImageOptions& o, int reps,
             bool jpeg) {
  const auto ds = ferry::ImageFolder::open(root, o);
  const std::size_t n = ds->size();
  std::vector<fs::path> files;
  std::vector<Bytes> encoded;
  for (std::size_t i = 0; i < n; ++i) {
    files.push_back(ds->path(i));
    const auto bytes = ferry::detail::read_file_bytes(files.back(), "bench");
    encoded.emplace_back(bytes.begin(), bytes.end());
  }
  Bytes out(static_cast<std::size_t>(o.height * o.width * o.channels));
  // This thread's CPU time, not wall time: on a shared machine, time sliced away from it does not
  // count (caches shared with other work still do).
  const auto thread_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  const auto per_image = [&](std::size_t count, auto f) {
    std::vector<double> s;
    for (int r = 0; r <= reps; ++r) {
      const double t0 = thread_seconds();
      f();
      if (r > 0) s.push_back(thread_seconds() - t0);
    }
    return median(s) / static_cast<double>(count) * 1e6;
  };
  const double read = per_image(n, [&] {
    for (const fs::path& p : files) (void)ferry::detail::read_file_bytes(p, "bench");
  });
  const auto decode_all = [&] {
    for (std::size_t i = 0; i < n; ++i) {
      ferry::detail::decode_image(encoded[i], o, i, out.data(), "bench");
    }
  };
  const double decode = per_image(n, decode_all);
  // The resize alone, on whole images decoded beforehand (as the PNG path resizes).
  const std::size_t some = std::min<std::size_t>(n, 64);
  std::vector<Bytes> decoded;
  std::vector<std::pair<int, int>> sizes;
  tjhandle tj = tjInitDecompress();
  for (std::size_t i = 0; i < some && jpeg; ++i) {
    int w = 0, h = 0, sub = 0, cs = 0;
    tjDecompressHeader3(tj, encoded[i].data(), encoded[i].size(), &w, &h, &sub, &cs);
    Bytes px(static_cast<std::size_t>(w * h * o.channels));
    tjDecompress2(tj, encoded[i].data(), encoded[i].size(), px.data(), w, 0, h,
                  o.channels == 1 ? TJPF_GRAY : TJPF_RGB, 0);
    decoded.push_back(std::move(px));
    sizes.emplace_back(w, h);
  }
  tjDestroy(tj);
  const auto resize_some = [&] {
    namespace im = ferry::detail::image;
    for (std::size_t i = 0; i < some; ++i) {
      const auto [w, h] = sizes[i];
      const ferry::detail::ImagePlan plan = ferry::detail::plan_image(w, h, o, i);
      const im::Fit& fit = im::fit_image(plan, o, 1.0, w, h, "bench");
      im::place({decoded[i].data(), w, 0, 0}, plan, fit, o, out.data());
    }
  };
  const double resize = !jpeg ? 0.0 : per_image(some, resize_some);
  // The same two without the resampler's AVX2 kernels (its portable loops), where it has them.
  double decode_portable = 0;
  double resize_portable = 0;
  const bool avx2 = ferry::detail::image::set_resample_avx2(false);
  if (avx2 && jpeg) {
    decode_portable = per_image(n, decode_all);
    resize_portable = per_image(some, resize_some);
  }
  ferry::detail::image::set_resample_avx2(avx2);
  const bench::ImageLimit lim =
      jpeg ? bench::jpeg_limit(files, reps) : bench::png_limit(files, reps);
  // The training crop's ceiling for the boxes the decode above drew (random_resized_crop only).
  double crop_ceiling = 0;
  if (jpeg && o.geometry == ferry::Geometry::random_resized_crop) {
    std::vector<bench::CropBox> boxes;
    tjhandle t = tjInitDecompress();
    for (std::size_t i = 0; i < n; ++i) {
      int w = 0, h = 0, sub = 0, cs = 0;
      tjDecompressHeader3(t, encoded[i].data(), encoded[i].size(), &w, &h, &sub, &cs);
      const ferry::detail::ImagePlan p = ferry::detail::plan_image(w, h, o, i);
      const auto x0 = static_cast<int>(p.x0);
      const auto y0 = static_cast<int>(p.y0);
      boxes.push_back({x0, y0, static_cast<int>(p.x1) - x0, static_cast<int>(p.y1) - y0});
    }
    tjDestroy(t);
    crop_ceiling = bench::jpeg_crop_limit(files, boxes, o.width, reps).crop_s * 1e6;
  }
  std::printf(
      "\nWhere one thread's time goes, %s (%zu images, thread CPU µs per image, medians of "
      "%d):\n\n",
      name.c_str(), n, reps);
  std::printf("| stage | µs/image |\n|---|---:|\n");
  std::printf("| file read (open + fstat + read, ImageFolder's) | %.1f |\n", read);
  std::printf("| ferry decode from memory (%s) | %.1f |\n",
              jpeg ? "cropped libjpeg decode + resize" : "PNG decode + copy", decode);
  if (jpeg) {
    std::printf("| of which the resize (alone, on whole decoded images) | %.1f |\n", resize);
    if (avx2) {
      std::printf("| the same decode, resize without AVX2 (portable loops) | %.1f |\n",
                  decode_portable);
      std::printf("| the resize alone without AVX2 | %.1f |\n", resize_portable);
    }
    std::printf("| limit: libjpeg-turbo full-image decode (TurboJPEG, RGB) | %.1f |\n",
                lim.decode_s * 1e6);
    if (crop_ceiling > 0) {
      std::printf("| ceiling: libjpeg decoding only the crop (DCT-scaled while >= %d) | %.1f |\n",
                  o.width, crop_ceiling);
    }
  } else {
    std::printf("| limit: open + read (%.1f) + libspng decode (%.1f) | %.1f |\n", lim.read_s * 1e6,
                lim.decode_s * 1e6, (lim.read_s + lim.decode_s) * 1e6);
  }
  std::printf("| ferry per file, one thread: read + decode | %.1f |\n", read + decode);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse(argc, argv);
    const bool temporary = args.dir.empty();
    const fs::path root =
        temporary ? fs::temp_directory_path() / ("ferry_bench_images_" + std::to_string(::getpid()))
                  : fs::path(args.dir);
    fs::create_directories(root);
    std::string command = argv[0];
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    std::printf("command: %s\n", command.c_str());
    std::printf("hardware threads: %u\n\n", std::thread::hardware_concurrency());

    const auto g0 = Clock::now();
    const double mean_jpeg = generate(root, args.jpegs, args.pngs);
    std::fprintf(stderr, "generated in %.1f s; mean JPEG %.1f KB\n",
                 std::chrono::duration<double>(Clock::now() - g0).count(), mean_jpeg / 1024);

    ferry::ImageOptions imagenet;  // Resize(256) + CenterCrop(224), RGB
    if (args.rrc) {                // RandomResizedCrop(224) + flip
      imagenet.geometry = ferry::Geometry::random_resized_crop;
      imagenet.random_flip = true;
    }
    const std::string jpeg_name =
        args.rrc ? "jpeg 500x375 -> RandomResizedCrop 224x224x3" : "jpeg 500x375 -> 224x224x3";
    ferry::ImageOptions mnist;
    mnist.height = mnist.width = 28;
    mnist.channels = 1;
    mnist.geometry = ferry::Geometry::resize;  // the source size already: no resize
    if (args.normalize) {
      imagenet.normalize = ferry::Normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
      mnist.normalize = ferry::Normalize{};
    }
    std::vector<Row> rows;
    rows.push_back(measure(jpeg_name, root / "jpeg", imagenet, args.reps));
    rows.push_back(measure("png 28x28 -> 28x28x1", root / "png", mnist, args.reps));
    profile(jpeg_name, root / "jpeg", imagenet, args.reps, true);
    profile("png 28x28 -> 28x28x1", root / "png", mnist, args.reps, false);
    if (temporary) fs::remove_all(root);

    std::printf("Medians of %d runs (JPEG files: %.1f KB on average, quality 90, 4:2:0).\n\n",
                args.reps, mean_jpeg / 1024);
    std::printf(
        "| folder | images | (a) one core, img/s | loader workers=1, img/s | (b) loader "
        "workers=2, img/s | b / (2 a) | CPU: a / b |\n|---|---:|---:|---:|---:|---:|---:|\n");
    bool ok = true;
    for (const Row& r : rows) {
      const double ratio = r.loader2 / (2 * r.single);
      ok = ok && ratio >= kTarget;
      std::printf("| %s | %zu | %.0f | %.0f | %.0f | %.2f | %.2f |\n", r.name.c_str(), r.images,
                  r.single, r.loader1, r.loader2, ratio, r.cpu_efficiency);
    }
    std::printf(
        "\nCPU: a / b: CPU seconds of the one-thread pass over those of the loader's epoch "
        "(workers = 2, all threads), median of the runs' ratios: 1 means the loader costs no CPU "
        "of its own; unlike b / (2 a) it holds on a machine whose cores are busy with other "
        "work.\ntarget: b / (2 a) >= %.2f: %s\n",
        kTarget, ok ? "met" : "NOT met");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "images: %s\n%s\n", e.what(), kUsage);
    return 1;
  }
}
