// make_image_folder: writes Fashion-MNIST out as PNG (or JPEG) files in class folders and as CSV
// files, the inputs of ImageFolder (image_throughput, train_images) and CsvDataset (train_csv),
// so that those run on real data.
//
//   make_image_folder [--data DIR] [--out DIR] [--limit N] [--split train|test|both]
//                     [--png-only | --csv-only] [--jpeg SIZE [--quality Q]]
//
// For each split (train: 60,000 images, test: 10,000) it writes
//   OUT/<split>/<id>_<class>/<index>.png   28x28 grayscale PNGs, encoded by libspng;
//   OUT/<split>.csv                        "label,p0,...,p783" and one row per image.
// With --jpeg WxH (or --jpeg SIDE for a square), the images are grayscale JPEGs instead
// (<index>.jpg, encoded by libjpeg-turbo's TurboJPEG at --quality, default 90), each scaled up
// bilinearly from 28x28 to W x H: a loader reading them back at 28x28 then has a real decode,
// resize and crop to do (train_images compares ferry's with a reference).
// The class folders are named "0_T-shirt_top" ... "9_Ankle_boot": ImageFolder numbers classes in
// sorted name order, and the id prefix makes that order the label ids'. The index (the image's
// position in the IDX file) is zero-padded, so that listing a folder gives file order.
//
// The IDX files are read with ferry::IdxDataset, which keeps all pixels in memory; the PNGs are
// encoded and written on all cores with oneTBB's parallel_for, and the CSV's rows are formatted
// in parallel blocks and written in order.

#include <spng.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <turbojpeg.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using common::Clock;
using common::seconds_since;

// Fashion-MNIST's classes, by label id, as folder names.
constexpr std::array<const char*, 10> kClassFolders = {
    "0_T-shirt_top", "1_Trouser", "2_Pullover", "3_Dress", "4_Coat",
    "5_Sandal",      "6_Shirt",   "7_Sneaker",  "8_Bag",   "9_Ankle_boot"};

struct Split {
  const char* name;
  const char* images;
  const char* labels;
};
constexpr std::array<Split, 2> kSplits = {{
    {"train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"},
    {"test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"},
}};

// How the images are written: 28x28 PNGs, or JPEGs scaled up to width x height.
struct ImageFormat {
  bool jpeg = false;
  int width = 28, height = 28;  // the JPEGs' size
  int quality = 90;             // the JPEG quality, 1..100
};

void write_file(const fs::path& path, const void* data, std::size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// ---- PNG ------------------------------------------------------------------------------------

void check_spng(int error, const fs::path& path) {
  if (error != 0) {
    throw std::runtime_error("encoding " + path.string() + ": " + spng_strerror(error));
  }
}

// Encodes one 8-bit grayscale image as a PNG file and returns the file's size.
std::size_t write_png(const fs::path& path, const std::uint8_t* pixels, std::uint32_t width,
                      std::uint32_t height) {
  const std::unique_ptr<spng_ctx, decltype(&spng_ctx_free)> ctx(spng_ctx_new(SPNG_CTX_ENCODER),
                                                                &spng_ctx_free);
  if (!ctx) throw std::runtime_error("spng_ctx_new failed");
  check_spng(spng_set_option(ctx.get(), SPNG_ENCODE_TO_BUFFER, 1), path);

  spng_ihdr header{};
  header.width = width;
  header.height = height;
  header.bit_depth = 8;
  header.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
  check_spng(spng_set_ihdr(ctx.get(), &header), path);
  check_spng(spng_encode_image(ctx.get(), pixels, std::size_t{width} * height, SPNG_FMT_PNG,
                               SPNG_ENCODE_FINALIZE),
             path);

  // The encoded file, in a buffer that libspng allocated and the caller frees.
  std::size_t size = 0;
  int error = 0;
  const std::unique_ptr<void, decltype(&std::free)> png(
      spng_get_png_buffer(ctx.get(), &size, &error), &std::free);
  check_spng(error, path);
  write_file(path, png.get(), size);
  return size;
}

// ---- JPEG -----------------------------------------------------------------------------------

// A gray image of width x height scaled to out_width x out_height: bilinear interpolation
// between pixel centres (the edges' pixels repeat outward), rounded to bytes.
std::vector<std::uint8_t> scale_up(const std::uint8_t* pixels, std::size_t width,
                                   std::size_t height, std::size_t out_width,
                                   std::size_t out_height) {
  // Output position i of n on a source axis of `size` pixels: the two pixels around it and the
  // second one's weight.
  struct Tap {
    std::size_t lo, hi;
    double t;
  };
  const auto tap = [](std::size_t i, std::size_t n, std::size_t size) {
    const double s = std::clamp(
        (static_cast<double>(i) + 0.5) * static_cast<double>(size) / static_cast<double>(n) - 0.5,
        0.0, static_cast<double>(size - 1));
    const auto lo = static_cast<std::size_t>(s);
    return Tap{lo, std::min(lo + 1, size - 1), s - static_cast<double>(lo)};
  };
  std::vector<std::uint8_t> out(out_width * out_height);
  for (std::size_t y = 0; y < out_height; ++y) {
    const Tap ty = tap(y, out_height, height);
    for (std::size_t x = 0; x < out_width; ++x) {
      const Tap tx = tap(x, out_width, width);
      const auto at = [&](std::size_t row, std::size_t col) {
        return static_cast<double>(pixels[row * width + col]);
      };
      const double top = at(ty.lo, tx.lo) * (1 - tx.t) + at(ty.lo, tx.hi) * tx.t;
      const double bottom = at(ty.hi, tx.lo) * (1 - tx.t) + at(ty.hi, tx.hi) * tx.t;
      out[y * out_width + x] =
          static_cast<std::uint8_t>(std::lround(top * (1 - ty.t) + bottom * ty.t));
    }
  }
  return out;
}

// A TurboJPEG compressor and an output buffer of tjBufSize() bytes, TurboJPEG's bound on any
// JPEG of width x height: made once for the images of one thread's range, never reallocated.
class JpegEncoder {
 public:
  JpegEncoder(int width, int height)
      : handle_(tjInitCompress()),
        capacity_(tjBufSize(width, height, TJSAMP_GRAY)),
        buffer_(tjAlloc(static_cast<int>(capacity_))) {
    if (handle_ == nullptr || buffer_ == nullptr) throw std::runtime_error("TurboJPEG failed");
  }
  JpegEncoder(const JpegEncoder&) = delete;
  JpegEncoder& operator=(const JpegEncoder&) = delete;
  ~JpegEncoder() {
    tjFree(buffer_);
    if (handle_ != nullptr) tjDestroy(handle_);
  }

  // Encodes one 8-bit grayscale image of the size given at construction as a JPEG file and
  // returns the file's size.
  std::size_t write(const fs::path& path, const std::uint8_t* pixels, int width, int height,
                    int quality) {
    auto size = capacity_;  // in: the buffer's size; out: the JPEG's
    if (tjCompress2(handle_, pixels, width, 0, height, TJPF_GRAY, &buffer_, &size, TJSAMP_GRAY,
                    quality, TJFLAG_NOREALLOC) != 0) {
      throw std::runtime_error("encoding " + path.string() + ": " + tjGetErrorStr2(handle_));
    }
    write_file(path, buffer_, size);
    return size;
  }

 private:
  tjhandle handle_;
  unsigned long capacity_;  // NOLINT(google-runtime-int): TurboJPEG's type
  unsigned char* buffer_;
};

// ---- the class folders ----------------------------------------------------------------------

// Writes images [0, count) of `set` to root/<class folder>/<index>.png (or .jpg, scaled up, as
// `format` says); returns the bytes written. Old class folders are removed first, so that a
// smaller --limit or another format leaves no stale files.
std::uint64_t write_images(const ferry::IdxDataset& set, std::size_t count, const fs::path& root,
                           const ImageFormat& format) {
  for (const char* folder : kClassFolders) {
    fs::remove_all(root / folder);
    fs::create_directories(root / folder);
  }
  const auto width = static_cast<std::uint32_t>(set.cols());
  const auto height = static_cast<std::uint32_t>(set.rows());
  const std::size_t pixels = std::size_t{width} * height;
  const std::size_t digits = std::to_string(count == 0 ? 0 : count - 1).size();
  const char* extension = format.jpeg ? ".jpg" : ".png";

  std::atomic<std::uint64_t> bytes{0};
  // oneTBB splits [0, count) into ranges and runs them on its worker threads; an exception in
  // one is rethrown here.
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(0, count), [&](const tbb::blocked_range<std::size_t>& range) {
        std::unique_ptr<JpegEncoder> jpeg;
        if (format.jpeg) jpeg = std::make_unique<JpegEncoder>(format.width, format.height);
        std::uint64_t written = 0;
        for (std::size_t i = range.begin(); i != range.end(); ++i) {
          std::string name = std::to_string(i);
          name.insert(0, digits - name.size(), '0');
          name += extension;
          const fs::path path = root / kClassFolders.at(set.labels()[i]) / name;
          const std::uint8_t* image = &set.pixels()[i * pixels];
          if (!format.jpeg) {
            written += write_png(path, image, width, height);
            continue;
          }
          const std::vector<std::uint8_t> large =
              scale_up(image, width, height, static_cast<std::size_t>(format.width),
                       static_cast<std::size_t>(format.height));
          written += jpeg->write(path, large.data(), format.width, format.height, format.quality);
        }
        bytes += written;
      });
  return bytes;
}

// ---- CSV ------------------------------------------------------------------------------------

// Rows [begin, end) of the CSV: the label, then the pixels, as decimal text.
std::string format_rows(const ferry::IdxDataset& set, std::size_t begin, std::size_t end) {
  const auto pixels = static_cast<std::size_t>(set.rows() * set.cols());
  std::string text;
  text.reserve((end - begin) * (pixels * 4 + 4));
  std::array<char, 4> digits{};
  const auto append = [&](unsigned value) {
    const auto result = std::to_chars(digits.data(), digits.data() + digits.size(), value);
    text.append(digits.data(), result.ptr);
  };
  for (std::size_t i = begin; i < end; ++i) {
    append(set.labels()[i]);
    const std::uint8_t* row = &set.pixels()[i * pixels];
    for (std::size_t p = 0; p < pixels; ++p) {
      text += ',';
      append(row[p]);
    }
    text += '\n';
  }
  return text;
}

// Writes images [0, count) of `set` as a CSV file; returns its size.
std::uint64_t write_csv(const ferry::IdxDataset& set, std::size_t count, const fs::path& path) {
  std::string header = "label";
  for (std::int64_t p = 0; p < set.rows() * set.cols(); ++p) header += ",p" + std::to_string(p);
  header += '\n';

  // Blocks of rows formatted in parallel, then written in order.
  constexpr std::size_t kRowsPerBlock = 1000;
  std::vector<std::string> blocks((count + kRowsPerBlock - 1) / kRowsPerBlock);
  tbb::parallel_for(std::size_t{0}, blocks.size(), [&](std::size_t b) {
    blocks[b] = format_rows(set, b * kRowsPerBlock, std::min(count, (b + 1) * kRowsPerBlock));
  });

  std::ofstream out(path, std::ios::binary);
  out << header;
  std::uint64_t bytes = header.size();
  for (const std::string& block : blocks) {
    out << block;
    bytes += block.size();
  }
  if (!out.flush()) throw std::runtime_error("cannot write " + path.string());
  return bytes;
}

// ---- command line ---------------------------------------------------------------------------

struct Options {
  fs::path data = "/usr/share/datasets/fashion-mnist";
  fs::path out = "fashion-mnist";
  std::size_t limit = std::numeric_limits<std::size_t>::max();
  std::string split = "both";
  bool images = true, csv = true;
  ImageFormat format;
};

constexpr const char* kUsage =
    "usage: make_image_folder [--data DIR] [--out DIR] [--limit N] [--split train|test|both]\n"
    "                         [--png-only | --csv-only] [--jpeg SIZE [--quality Q]]\n"
    "  --data DIR    folder with Fashion-MNIST's four .gz IDX files\n"
    "                (default /usr/share/datasets/fashion-mnist, from Debian's\n"
    "                dataset-fashion-mnist package)\n"
    "  --out DIR     where to write DIR/<split>/<class>/<index>.png and DIR/<split>.csv\n"
    "                (default ./fashion-mnist)\n"
    "  --limit N     only the first N images of each split (default all)\n"
    "  --split S     train, test or both (default both)\n"
    "  --png-only    write the image folders only (PNG, or JPEG with --jpeg)\n"
    "  --csv-only    write the CSV files only\n"
    "  --jpeg SIZE   write grayscale JPEGs (<index>.jpg) instead of PNGs, scaled up\n"
    "                bilinearly to SIZE: WxH (e.g. 72x56) or one side for a square\n"
    "  --quality Q   the JPEGs' quality, 1 to 100 (default 90)\n";

// "72x56" as width 72, height 56, or "64" as 64 x 64; each side 1 to 4096.
void parse_jpeg_size(const std::string& flag, const std::string& value, ImageFormat& format) {
  const std::size_t x = value.find('x');
  const std::uint64_t width = common::parse_number(flag, value.substr(0, x));
  const std::uint64_t height =
      x == std::string::npos ? width : common::parse_number(flag, value.substr(x + 1));
  if (width < 1 || width > 4096 || height < 1 || height > 4096) {
    throw std::invalid_argument(flag + " wants sides of 1 to 4096 pixels, not '" + value + "'");
  }
  format.jpeg = true;
  format.width = static_cast<int>(width);
  format.height = static_cast<int>(height);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--png-only") {
      options.csv = false;
      continue;
    }
    if (flag == "--csv-only") {
      options.images = false;
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--data") {
      options.data = value;
    } else if (flag == "--out") {
      options.out = value;
    } else if (flag == "--limit") {
      options.limit = common::parse_number(flag, value);
    } else if (flag == "--split") {
      options.split = value;
    } else if (flag == "--jpeg") {
      parse_jpeg_size(flag, value, options.format);
    } else if (flag == "--quality") {
      const std::uint64_t quality = common::parse_number(flag, value);
      if (quality < 1 || quality > 100) {
        throw std::invalid_argument("--quality wants 1 to 100, not '" + value + "'");
      }
      options.format.quality = static_cast<int>(quality);
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.split != "train" && options.split != "test" && options.split != "both") {
    throw std::invalid_argument("--split wants train, test or both, not '" + options.split + "'");
  }
  if (!options.images && !options.csv) {
    throw std::invalid_argument("--png-only and --csv-only leave nothing to write");
  }
  return options;
}

double megabytes(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }

int run(const Options& options) {
  const auto start = Clock::now();
  fs::create_directories(options.out);
  for (const Split& split : kSplits) {
    if (options.split != "both" && options.split != split.name) continue;

    // 1. The IDX files, read into memory: pixels() is [N, 28, 28] bytes, labels() [N].
    auto step = Clock::now();
    const auto set =
        ferry::IdxDataset::open(options.data / split.images, options.data / split.labels);
    const std::size_t count = std::min(options.limit, set->size());
    for (std::size_t i = 0; i < count; ++i) {
      if (set->labels()[i] >= kClassFolders.size()) {
        throw std::runtime_error("image " + std::to_string(i) + " of " + split.images +
                                 " has label " + std::to_string(set->labels()[i]) +
                                 ", not a Fashion-MNIST class 0..9");
      }
    }
    std::printf("%s: %zu of %zu images of %lldx%lld from %s (%.2f s)\n", split.name, count,
                set->size(), static_cast<long long>(set->rows()),
                static_cast<long long>(set->cols()), (options.data / split.images).c_str(),
                seconds_since(step));
    std::fflush(stdout);

    // 2. One PNG (or JPEG) per image, in its class folder.
    if (options.images) {
      step = Clock::now();
      const fs::path root = options.out / split.name;
      const std::uint64_t bytes = write_images(*set, count, root, options.format);
      const double seconds = seconds_since(step);
      std::string what = "PNGs";
      if (options.format.jpeg) {
        what = std::to_string(options.format.width);
        what += 'x';
        what += std::to_string(options.format.height);
        what += " JPEGs";
      }
      std::printf("  wrote %zu %s (%.1f MB) in %zu class folders of %s in %.2f s: %.0f images/s\n",
                  count, what.c_str(), megabytes(bytes), kClassFolders.size(), root.c_str(),
                  seconds, static_cast<double>(count) / seconds);
      std::fflush(stdout);
    }

    // 3. One CSV row per image.
    if (options.csv) {
      step = Clock::now();
      const fs::path path = options.out / (std::string(split.name) + ".csv");
      const std::uint64_t bytes = write_csv(*set, count, path);
      std::printf("  wrote %s (%zu rows, %.1f MB) in %.2f s\n", path.c_str(), count,
                  megabytes(bytes), seconds_since(step));
      std::fflush(stdout);
    }
  }
  std::printf("done in %.2f s\n", seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_image_folder: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(options);
  } catch (const ferry::DataError& e) {
    std::fprintf(stderr,
                 "make_image_folder: %s\n"
                 "Fashion-MNIST is in Debian's dataset-fashion-mnist package "
                 "(apt-get install dataset-fashion-mnist), or pass --data DIR.\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_image_folder: %s\n", e.what());
    return 1;
  }
}
