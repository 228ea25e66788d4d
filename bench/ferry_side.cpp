// bench/ferry_side: ferry's half of bench/compare. One workload per process, one JSON line of
// results on stdout (the driver reads the last line that starts with '{').
//
//   ferry_side inmem  --data DIR  [--size N]   Fashion-MNIST train (IDX .gz files in DIR) as a
//                                              TensorDataset: "image" u8 [28, 28], "label" i64;
//                                              --size repeats (or cuts) it to N samples
//   ferry_side png    --data ROOT              ImageFolder 28 x 28 x 1, Geometry::resize,
//                                              Normalize{}: "image" f32 [1, 28, 28]
//   ferry_side jpeg   --data ROOT              ImageFolder 224 x 224 x 3, resize 256 then the
//                                              central crop, Normalize{}: f32 [3, 224, 224]
//   ferry_side rrc    --data ROOT              ImageFolder 224 x 224 x 3, RandomResizedCrop(224)
//                                              (scale 0.08-1, ratio 3/4-4/3) + flip, Normalize{}
//   ferry_side csv    --data FILE              CsvDataset::open (timed) + the epochs
//   ferry_side shards-png  --data DIR          WebDataset of DIR's *.tar (samples/make_shards),
//   ferry_side shards-jpeg --data DIR          images decoded as png / jpeg above: "cls" i64,
//                                              "png" or "jpg" f32 [C, H, W]; open (index) timed
//   ferry_side limits --fmnist DIR [--png ROOT] [--jpeg ROOT] [--csv FILE] [--rrc ROOT]
//
// Loader options: --workers N (2) --batch N (256) --prefetch N (4) --seed S (42); device cpu,
// shuffled, autotune off (--autotune: on). --warmup N (1) untimed epochs, then --epochs N (1) timed
// ones: the JSON gives each epoch's seconds and their median. --rss-epochs adds the resident set
// size after every epoch (the driver's check that memory does not grow with epochs).
//
// --check DUMP: no timing; the first 3 batches of an unshuffled epoch are summed (float64, per
// field, in memory order) and the first 64 samples of each are written to DUMP as raw bytes,
// for the driver to compare with the other side's.
//
// limits: what the hardware allows for each workload, measured here and now:
//   gather  one thread gathers Fashion-MNIST's 784-byte rows (and 8-byte labels) in shuffled
//           order into a batch buffer laid out as the loader's: bytes/s and samples/s;
//   png     the PNG files opened and read one by one, plus libspng's decode of their bytes
//           (bench/image_limits.hpp), on one thread: images/s per core, times the cores; beside
//           it ferry's own rate with one worker (ImageFolder, normalize included);
//   jpeg    libjpeg-turbo's decode of the whole of each JPEG (TurboJPEG, RGB, from memory), on
//           one thread, times the cores; and ferry's one-worker rate (decode, crop, resize,
//           normalize);
//   parse   std::from_chars over the CSV file's fields on one thread: MB/s, times the cores;
//   rrc     the training crop (bench/image_limits.hpp, jpeg_crop_limit): for each JPEG of ROOT the
//           box ferry's RandomResizedCrop draws for seed = its index (ferry::detail::plan_image),
//           decoded by libjpeg alone (only the crop, DCT-scaled while it stays >= 224), against
//           TurboJPEG's full decode, both in thread CPU seconds; beside them ferry's decode_image
//           of the same boxes (u8, resized to 224, flipped) on one thread, and ferry's
//           one-worker loader (Normalize{} included) per CPU second of the process.
// Every timed workload also reports the process's CPU seconds per epoch (user + system).

#include <sys/resource.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "datasets/image/image_decode.hpp"  // plan_image: ferry's own crop boxes
#include "ferry/ferry.hpp"
#include "image_limits.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kCheckBatches = 3;                 // batches summed and compared by the driver
constexpr std::size_t kDumpSamples = 64;         // of each, written to the dump
constexpr std::size_t kLimitPngImages = 10'000;  // PNG decode limit: at most this many images

constexpr const char* kUsage =
    "usage: ferry_side inmem|png|jpeg|rrc|csv|shards-png|shards-jpeg --data PATH [--size N]\n"
    "                  [--workers N] [--batch N] [--prefetch N] [--epochs N] [--warmup N]\n"
    "                  [--seed S] [--rss-epochs] [--autotune] [--check DUMP]\n"
    "       ferry_side limits [--fmnist DIR] [--png ROOT] [--jpeg ROOT] [--csv FILE] [--rrc ROOT]\n"
    "                  [--reps N]";

struct Args {
  std::string workload;
  fs::path data;
  std::size_t size = 0;  // inmem: samples (0: the dataset's own 60,000)
  int workers = 2;
  std::size_t batch = 256;
  int prefetch = 4;
  int epochs = 1;
  int warmup = 1;
  std::uint64_t seed = 42;
  bool rss_epochs = false;
  bool autotune = false;  // --autotune: the loader's default, workers and prefetch where it starts
  fs::path check;         // non-empty: check mode
  // limits
  fs::path fmnist, png, jpeg, csv, rrc;
  int reps = 3;
};

/// A non-negative integer argument. \throws std::invalid_argument otherwise.
std::uint64_t number(std::string_view option, std::string_view text) {
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw std::invalid_argument(std::string(option) + " needs a number, not \"" +
                                std::string(text) + "\"");
  }
  return v;
}

Args parse(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument(kUsage);
  Args a;
  a.workload = argv[1];
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(arg) + " needs a value");
      return argv[++i];
    };
    const auto count = [&](std::uint64_t min) {
      const std::uint64_t v = number(arg, value());
      if (v < min) throw std::invalid_argument(std::string(arg) + " is too small");
      return v;
    };
    if (arg == "--data") {
      a.data = value();
    } else if (arg == "--size") {
      a.size = count(1);
    } else if (arg == "--workers") {
      a.workers = static_cast<int>(count(1));
    } else if (arg == "--batch") {
      a.batch = count(1);
    } else if (arg == "--prefetch") {
      a.prefetch = static_cast<int>(count(1));
    } else if (arg == "--epochs") {
      a.epochs = static_cast<int>(count(1));
    } else if (arg == "--warmup") {
      a.warmup = static_cast<int>(count(0));
    } else if (arg == "--seed") {
      a.seed = count(0);
    } else if (arg == "--rss-epochs") {
      a.rss_epochs = true;
    } else if (arg == "--autotune") {
      a.autotune = true;
    } else if (arg == "--check") {
      a.check = value();
    } else if (arg == "--fmnist") {
      a.fmnist = value();
    } else if (arg == "--png") {
      a.png = value();
    } else if (arg == "--jpeg") {
      a.jpeg = value();
    } else if (arg == "--csv") {
      a.csv = value();
    } else if (arg == "--rrc") {
      a.rrc = value();
    } else if (arg == "--reps") {
      a.reps = static_cast<int>(count(1));
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg) + "\n" + kUsage);
    }
  }
  return a;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

/// getrusage's ru_maxrss (KiB), in MB. On Linux it is not this program's own peak alone: exec
/// keeps the larger of it and the peak of the memory image it replaced (the parent's, after a
/// fork or vfork), so a child of a big driver reports at least the driver's size.
double ru_maxrss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / 1e6;
}

/// Peak resident set size of this program's own memory, in MB: VmHWM of /proc/self/status
/// (ru_maxrss where that cannot be read).
double peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmHWM:") {
      double kib = 0;
      in >> kib;
      return kib * 1024.0 / 1e6;
    }
    in.ignore(1 << 20, '\n');
  }
  return ru_maxrss_mb();
}

/// This process's CPU seconds so far, user + system, all threads.
double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/// Resident set size now, in MB (/proc/self/statm, second field, in pages).
double current_rss_mb() {
  std::ifstream in("/proc/self/statm");
  std::uint64_t total = 0, resident = 0;
  if (!(in >> total >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1e6;
}

// ---- JSON output ----------------------------------------------------------------------------

/// Builds one JSON object, member by member.
class Json {
 public:
  Json& num(std::string_view key, double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return raw(key, buf);
  }
  Json& integer(std::string_view key, std::uint64_t v) { return raw(key, std::to_string(v)); }
  Json& str(std::string_view key, std::string_view v) { return raw(key, quote(v)); }
  Json& nums(std::string_view key, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      char buf[40];
      std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", v[i]);
      s += buf;
    }
    return raw(key, s + "]");
  }
  /// `value` is JSON text already.
  Json& raw(std::string_view key, std::string_view value) {
    if (!body_.empty()) body_ += ',';
    body_ += quote(key);
    body_ += ':';
    body_ += value;
    return *this;
  }
  std::string text() const { return "{" + body_ + "}"; }

  static std::string quote(std::string_view s) {
    std::string out = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  }

 private:
  std::string body_;
};

std::string list(const std::vector<std::string>& items) {
  std::string s = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += ',';
    s += items[i];
  }
  return s + "]";
}

std::string shape_json(const std::vector<std::int64_t>& shape) {
  std::vector<std::string> dims;
  dims.reserve(shape.size());
  for (const std::int64_t d : shape) dims.push_back(std::to_string(d));
  return list(dims);
}

/// numpy's name of a dtype, which the Python side prints too.
const char* numpy_dtype(ferry::DType t) {
  switch (t) {
    case ferry::DType::u8:
      return "uint8";
    case ferry::DType::u16:
      return "uint16";
    case ferry::DType::u32:
      return "uint32";
    case ferry::DType::i32:
      return "int32";
    case ferry::DType::i64:
      return "int64";
    case ferry::DType::f16:
      return "float16";
    case ferry::DType::bf16:
      return "bfloat16";
    case ferry::DType::f32:
      return "float32";
    case ferry::DType::f64:
      return "float64";
    case ferry::DType::i8:
      return "int8";
    case ferry::DType::i16:
      return "int16";
    case ferry::DType::u64:
      return "uint64";
  }
  return "?";
}

// ---- batches --------------------------------------------------------------------------------

/// Keeps the consumer's reads alive.
volatile std::uint64_t g_sink = 0;

/// What the timed consumer does with a batch: read one byte of each field.
void touch(const ferry::Batch& b, std::size_t fields) {
  for (std::size_t f = 0; f < fields; ++f) {
    g_sink = g_sink + *static_cast<const unsigned char*>(b.at(f).data());
  }
}

/// The sum of a tensor's elements as float64, in memory order.
double sum(const ferry::Tensor& t) {
  const auto n = static_cast<std::size_t>(t.numel());
  double s = 0;
  const auto add_all = [&](const auto* p) {
    for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(p[i]);
  };
  switch (t.dtype()) {
    case ferry::DType::u8:
      add_all(t.data<std::uint8_t>());
      break;
    case ferry::DType::u16:
      add_all(t.data<std::uint16_t>());
      break;
    case ferry::DType::u32:
      add_all(t.data<std::uint32_t>());
      break;
    case ferry::DType::i32:
      add_all(t.data<std::int32_t>());
      break;
    case ferry::DType::i64:
      add_all(t.data<std::int64_t>());
      break;
    case ferry::DType::f32:
      add_all(t.data<float>());
      break;
    case ferry::DType::f64:
      add_all(t.data<double>());
      break;
    case ferry::DType::i8:
      add_all(t.data<std::int8_t>());
      break;
    case ferry::DType::i16:
      add_all(t.data<std::int16_t>());
      break;
    case ferry::DType::u64:
      add_all(t.data<std::uint64_t>());
      break;
    case ferry::DType::f16:
    case ferry::DType::bf16: {
      const ferry::Tensor wide = t.to(ferry::DType::f32);
      add_all(wide.data<float>());
      break;
    }
  }
  return s;
}

/// Checksums of the first batches of an epoch, and (in check mode) their first samples' bytes.
struct Checksums {
  std::vector<std::string> entries;  // JSON objects
  std::vector<std::string> layout;   // JSON objects: where each dump block lies
  std::ofstream* dump = nullptr;
  std::uint64_t offset = 0;

  void add(const ferry::Batch& b, const std::vector<std::string>& names) {
    std::vector<std::string> fields;
    for (std::size_t f = 0; f < names.size(); ++f) {
      const ferry::Tensor& t = b.at(f);
      fields.push_back(Json()
                           .str("name", names[f])
                           .str("dtype", numpy_dtype(t.dtype()))
                           .raw("shape", shape_json(t.shape()))
                           .num("sum", sum(t))
                           .text());
      if (dump != nullptr) {
        const std::size_t rows = static_cast<std::size_t>(t.shape(0));
        const std::size_t keep = std::min(rows, kDumpSamples);
        const std::size_t bytes = t.nbytes() / rows * keep;
        dump->write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(bytes));
        std::vector<std::int64_t> shape = t.shape();
        shape[0] = static_cast<std::int64_t>(keep);
        layout.push_back(Json()
                             .integer("batch", b.number())
                             .str("name", names[f])
                             .str("dtype", numpy_dtype(t.dtype()))
                             .raw("shape", shape_json(shape))
                             .integer("offset", offset)
                             .integer("nbytes", bytes)
                             .text());
        offset += bytes;
      }
    }
    entries.push_back(Json().integer("batch", b.number()).raw("fields", list(fields)).text());
  }
};

ferry::LoaderOptions loader_options(const Args& a, bool shuffle) {
  ferry::LoaderOptions o;
  o.autotune = a.autotune;  // off by default: the settings this bench states, fixed
  o.batch_size = a.batch;
  o.shuffle = shuffle;
  o.seed = a.seed;
  o.workers = a.workers;
  o.prefetch = a.prefetch;
  o.device = ferry::Device::cpu();
  return o;
}

std::vector<std::string> field_names(const ferry::Dataset& d) {
  std::vector<std::string> names;
  for (const ferry::FieldSpec& f : d.fields()) names.push_back(f.name);
  return names;
}

/// Seconds for epoch `e`, from epoch() until it is over and destroyed. The first
/// `checksum_batches` batches are summed into `sums` (not in the timed runs' hot path: the
/// driver asks for it in the warm-up epoch only).
double time_epoch(ferry::Loader& loader, std::uint64_t e, const std::vector<std::string>& names,
                  Checksums* sums, int checksum_batches) {
  const auto start = Clock::now();
  {
    ferry::Epoch epoch = loader.epoch(e);
    int n = 0;
    for (const ferry::Batch& b : epoch) {
      if (sums != nullptr && n < checksum_batches) sums->add(b, names);
      ++n;
      touch(b, names.size());
    }
  }
  return seconds_since(start);
}

/// Check mode: sums and dump of the first batches of an unshuffled epoch, as JSON members.
void check(const std::shared_ptr<const ferry::Dataset>& data, const Args& a, Json& out) {
  std::ofstream dump(a.check, std::ios::binary | std::ios::trunc);
  if (!dump) throw std::runtime_error("cannot write " + a.check.string());
  ferry::Loader loader(data, loader_options(a, false));
  const std::vector<std::string> names = field_names(*data);
  Checksums sums;
  sums.dump = &dump;
  {
    ferry::Epoch epoch = loader.epoch(0);
    for (const ferry::Batch& b : epoch) {
      sums.add(b, names);
      if (sums.entries.size() == kCheckBatches) break;
    }
  }
  out.raw("checksum", list(sums.entries))
      .str("dump", a.check.string())
      .raw("dump_layout", list(sums.layout));
}

/// The timed run: warm-up epochs (the first one's first batches summed), then the timed epochs.
/// With `parse_s` > 0 (the CSV workload, whose parsing is part of the work), samples/s counts
/// the parse and the first timed epoch together ("total_s"); the epochs alone are in
/// "epoch_samples_per_s".
void timed(const std::shared_ptr<const ferry::Dataset>& data, const Args& a, double parse_s,
           Json& out) {
  ferry::Loader loader(data, loader_options(a, true));
  const std::vector<std::string> names = field_names(*data);
  Checksums sums;
  std::uint64_t e = 0;
  for (int w = 0; w < a.warmup; ++w, ++e) {
    time_epoch(loader, e, names, w == 0 ? &sums : nullptr, kCheckBatches);
  }
  std::vector<double> seconds, rss, cpu;
  for (int r = 0; r < a.epochs; ++r, ++e) {
    const double cpu0 = process_cpu_s();
    seconds.push_back(
        time_epoch(loader, e, names, (a.warmup == 0 && r == 0) ? &sums : nullptr, kCheckBatches));
    cpu.push_back(process_cpu_s() - cpu0);
    if (a.rss_epochs) rss.push_back(current_rss_mb());
  }
  const double m = median(seconds);
  const auto n = static_cast<double>(data->size());
  out.integer("samples", data->size())
      .integer("batches_per_epoch", loader.batches_per_epoch())
      .num("epoch_s", m)
      .nums("epochs_s", seconds)
      .num("epoch_samples_per_s", n / m)
      .num("epoch_cpu_s", median(cpu))
      .num("samples_per_cpu_s", n / median(cpu));
  if (parse_s > 0) {
    const double total = parse_s + seconds.front();
    out.num("total_s", total).num("samples_per_s", n / total);
  } else {
    out.num("samples_per_s", n / m);
  }
  out.raw("checksum", list(sums.entries)).str("summary", loader.stats().summary());
  if (a.rss_epochs) out.nums("rss_mb_per_epoch", rss);
  out.num("rss_end_mb", current_rss_mb());  // the loader still alive
}

// ---- the workloads --------------------------------------------------------------------------

/// Fashion-MNIST train as a TensorDataset of `size` samples (0: all 60,000; more repeats it).
std::shared_ptr<ferry::TensorDataset> fashion_mnist(const fs::path& dir, std::size_t size) {
  auto idx = ferry::IdxDataset::open(dir / "train-images-idx3-ubyte.gz",
                                     dir / "train-labels-idx1-ubyte.gz");
  const std::size_t have = idx->size();
  const std::size_t n = size == 0 ? have : size;
  const auto rows = static_cast<std::int64_t>(n);
  const std::size_t image_bytes = static_cast<std::size_t>(idx->rows() * idx->cols());
  ferry::Tensor images;
  if (n <= have) {
    // View the dataset's own pixels: no second copy in memory (the IdxDataset stays alive as
    // the tensor's owner).
    images = ferry::Tensor::wrap(const_cast<std::uint8_t*>(idx->pixels().data()),
                                 {rows, idx->rows(), idx->cols()}, ferry::DType::u8,
                                 ferry::Device::cpu(), false, idx);
  } else {
    images = ferry::Tensor::empty({rows, idx->rows(), idx->cols()}, ferry::DType::u8);
    auto* dst = images.data<std::uint8_t>();
    for (std::size_t i = 0; i < n; i += have) {
      const std::size_t count = std::min(have, n - i);
      std::memcpy(dst + i * image_bytes, idx->pixels().data(), count * image_bytes);
    }
  }
  ferry::Tensor labels = ferry::Tensor::empty({rows}, ferry::DType::i64);
  auto* lab = labels.data<std::int64_t>();
  for (std::size_t i = 0; i < n; ++i) lab[i] = idx->labels()[i % have];
  return std::make_shared<ferry::TensorDataset>(
      std::vector<std::pair<std::string, ferry::Tensor>>{{"image", images}, {"label", labels}});
}

ferry::ImageOptions png_options() {
  ferry::ImageOptions o;
  o.height = 28;
  o.width = 28;
  o.channels = 1;
  o.geometry = ferry::Geometry::resize;
  o.normalize = ferry::Normalize{};
  return o;
}

ferry::ImageOptions jpeg_options() {
  ferry::ImageOptions o;
  o.height = 224;
  o.width = 224;
  o.channels = 3;
  o.geometry = ferry::Geometry::resize_then_center_crop;
  o.resize = 256;
  o.normalize = ferry::Normalize{};
  return o;
}

/// RandomResizedCrop(224) (scale 0.08-1, ratio 3/4-4/3, torchvision's) + flip, as u8 HWC.
ferry::ImageOptions rrc_u8_options() {
  ferry::ImageOptions o;
  o.height = 224;
  o.width = 224;
  o.channels = 3;
  o.geometry = ferry::Geometry::random_resized_crop;
  o.random_flip = true;
  return o;
}

/// The same, normalized: f32 CHW, as a training loop reads it.
ferry::ImageOptions rrc_options() {
  ferry::ImageOptions o = rrc_u8_options();
  o.normalize = ferry::Normalize{};
  return o;
}

std::uint64_t file_bytes(const fs::path& p) { return fs::file_size(p); }

// The shards of a folder (its *.tar files, by name) as one WebDataset.
std::shared_ptr<const ferry::Dataset> shards(const fs::path& dir, const ferry::ImageOptions& o) {
  std::vector<fs::path> tars;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".tar") tars.push_back(e.path());
  }
  std::sort(tars.begin(), tars.end());
  ferry::WebDatasetOptions options;
  options.image = o;
  return ferry::WebDataset::open(tars, options);
}

/// Runs workload `a.workload` (not limits) and prints its JSON line.
void run_workload(const Args& a) {
  if (a.data.empty()) throw std::invalid_argument("--data is required\n" + std::string(kUsage));
  Json out;
  out.str("side", "ferry")
      .str("workload", a.workload)
      .str("ferry_version", ferry::kVersion)
      .integer("workers", static_cast<std::uint64_t>(a.workers))
      .integer("batch", a.batch)
      .integer("prefetch", static_cast<std::uint64_t>(a.prefetch));
  std::shared_ptr<const ferry::Dataset> data;
  const auto start = Clock::now();
  if (a.workload == "inmem") {
    data = fashion_mnist(a.data, a.size);
  } else if (a.workload == "png") {
    data = ferry::ImageFolder::open(a.data, png_options());
  } else if (a.workload == "jpeg") {
    data = ferry::ImageFolder::open(a.data, jpeg_options());
  } else if (a.workload == "rrc") {
    data = ferry::ImageFolder::open(a.data, rrc_options());
  } else if (a.workload == "shards-png" || a.workload == "shards-jpeg") {
    data = shards(a.data, a.workload == "shards-png" ? png_options() : jpeg_options());
  } else if (a.workload == "csv") {
    // Parsing is part of the workload: timed, and reported with the file's size.
    data = ferry::CsvDataset::open(a.data);
    out.integer("file_bytes", file_bytes(a.data));
  } else {
    throw std::invalid_argument("unknown workload " + a.workload + "\n" + kUsage);
  }
  const double open_s = seconds_since(start);
  out.num("open_s", open_s);
  if (a.check.empty()) {
    timed(data, a, a.workload == "csv" ? open_s : 0.0, out);
  } else {
    check(data, a, out);
  }
  out.num("peak_rss_mb", peak_rss_mb()).num("ru_maxrss_mb", ru_maxrss_mb());
  std::printf("%s\n", out.text().c_str());
}

// ---- limits ---------------------------------------------------------------------------------

/// The first `count` samples of another dataset, spread evenly over it (every class).
class Spread final : public ferry::Dataset {
 public:
  Spread(std::shared_ptr<const ferry::Dataset> inner, std::size_t count)
      : inner_(std::move(inner)), count_(std::min(count, inner_->size())) {}
  std::size_t size() const override { return count_; }
  std::vector<ferry::FieldSpec> fields() const override { return inner_->fields(); }
  void read(std::size_t index, ferry::SampleRef out) const override {
    inner_->read(index * inner_->size() / count_, out);
  }

 private:
  std::shared_ptr<const ferry::Dataset> inner_;
  std::size_t count_;
};

/// One thread, shuffled order, 784 + 8 bytes per sample into a batch buffer with the loader's
/// layout (the label field at the next 256-byte boundary). Seconds per epoch, median of `reps`.
double gather_seconds(const ferry::TensorDataset& data, std::size_t batch, int reps) {
  const auto* images = static_cast<const std::byte*>(data.tensors()[0].data());
  const auto* labels = static_cast<const std::byte*>(data.tensors()[1].data());
  const std::size_t image_bytes = data.fields()[0].sample_bytes();
  const std::size_t label_bytes = data.fields()[1].sample_bytes();
  const std::size_t label_offset = (image_bytes * batch + 255) / 256 * 256;
  std::vector<std::byte> buffer(label_offset + label_bytes * batch);
  std::vector<std::uint64_t> order(data.size());
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  std::mt19937_64 rng(7);
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {  // the first run warms up
    std::shuffle(order.begin(), order.end(), rng);
    const auto start = Clock::now();
    for (std::size_t first = 0; first < order.size(); first += batch) {
      const std::size_t count = std::min(batch, order.size() - first);
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t index = order[first + i];
        std::memcpy(buffer.data() + i * image_bytes, images + index * image_bytes, image_bytes);
        std::memcpy(buffer.data() + label_offset + i * label_bytes, labels + index * label_bytes,
                    label_bytes);
      }
      g_sink = g_sink + static_cast<std::uint64_t>(buffer[0]);
    }
    if (r > 0) seconds.push_back(seconds_since(start));
  }
  return median(seconds);
}

/// Samples/s of one worker reading every sample of `data` in order, median of `reps` epochs
/// after a warm-up one.
double one_worker_rate(const std::shared_ptr<const ferry::Dataset>& data, int reps) {
  Args a;
  a.workers = 1;
  ferry::Loader loader(data, loader_options(a, false));
  const std::vector<std::string> names = field_names(*data);
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {
    const double s = time_epoch(loader, static_cast<std::uint64_t>(r), names, nullptr, 0);
    if (r > 0) seconds.push_back(s);
  }
  return static_cast<double>(data->size()) / median(seconds);
}

/// Bytes/s of std::from_chars over every field of a CSV file in memory, on one thread: floats
/// for all but the last column, an integer for the last; the values are stored as a parser
/// into memory would. The header line is skipped but counted in the bytes.
double parse_rate(const fs::path& path, int reps) {
  std::string text(static_cast<std::size_t>(fs::file_size(path)), '\0');
  std::ifstream in(path, std::ios::binary);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in || text.empty()) throw std::runtime_error("cannot read " + path.string());
  const std::size_t header_end = text.find('\n') + 1;
  const std::size_t columns =
      static_cast<std::size_t>(
          std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(header_end), ',')) +
      1;
  const std::size_t lines = static_cast<std::size_t>(
      std::count(text.begin() + static_cast<std::ptrdiff_t>(header_end), text.end(), '\n'));
  std::vector<float> features(lines * (columns - 1));
  std::vector<std::int64_t> labels(lines);
  std::vector<double> seconds;
  for (int r = 0; r <= reps; ++r) {
    const auto start = Clock::now();
    const char* p = text.data() + header_end;
    const char* const end = text.data() + text.size();
    float* f = features.data();
    std::int64_t* l = labels.data();
    while (p < end) {
      for (std::size_t c = 0; c + 1 < columns; ++c) {
        const auto r1 = std::from_chars(p, end, *f++);
        if (r1.ec != std::errc()) throw std::runtime_error("parse_rate: not a number");
        p = r1.ptr + 1;  // past the ','
      }
      const auto r2 = std::from_chars(p, end, *l++);
      if (r2.ec != std::errc()) throw std::runtime_error("parse_rate: not an integer");
      p = r2.ptr;
      while (p < end && (*p == '\r' || *p == '\n')) ++p;
    }
    g_sink = g_sink + static_cast<std::uint64_t>(features.back() > 0) +
             static_cast<std::uint64_t>(labels.back());
    if (r > 0) seconds.push_back(seconds_since(start));
  }
  return static_cast<double>(text.size()) / median(seconds);
}

/// One worker's rate over `data` in order, per CPU second of this process (the loader's thread
/// and the worker's): median of `reps` epochs after a warm-up one.
double one_worker_cpu_rate(const std::shared_ptr<const ferry::Dataset>& data, int reps) {
  Args a;
  a.workers = 1;
  ferry::Loader loader(data, loader_options(a, false));
  const std::vector<std::string> names = field_names(*data);
  std::vector<double> cpu;
  for (int r = 0; r <= reps; ++r) {
    const double c0 = process_cpu_s();
    time_epoch(loader, static_cast<std::uint64_t>(r), names, nullptr, 0);
    if (r > 0) cpu.push_back(process_cpu_s() - c0);
  }
  return static_cast<double>(data->size()) / median(cpu);
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// The training crop's ceiling against the full decode and ferry (see the top of the file).
std::string rrc_limits(const fs::path& root, int reps, unsigned cores) {
  const ferry::ImageOptions o = rrc_u8_options();
  auto folder = ferry::ImageFolder::open(root, rrc_options());
  std::vector<fs::path> files;
  std::vector<std::vector<std::byte>> bytes;
  std::vector<bench::CropBox> boxes;
  double pixels = 0;
  std::vector<double> ferry_scales(4, 0.0);  // crops ferry decodes at 1/1, 1/2, 1/4, 1/8
  tjhandle tj = tjInitDecompress();
  for (std::size_t i = 0; i < folder->size(); ++i) {
    files.push_back(folder->path(i));
    std::ifstream in(files.back(), std::ios::binary);
    std::vector<char> b{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    int w = 0, h = 0, sub = 0, cs = 0;
    if (tjDecompressHeader3(tj, reinterpret_cast<const unsigned char*>(b.data()), b.size(), &w, &h,
                            &sub, &cs) != 0) {
      throw std::runtime_error(files.back().string() + ": not a JPEG");
    }
    pixels += static_cast<double>(w) * h;
    const ferry::detail::ImagePlan p = ferry::detail::plan_image(w, h, o, i);
    const int denom =
        ferry::detail::pick_jpeg_scale(o.width / (p.x1 - p.x0), o.height / (p.y1 - p.y0),
                                       ferry::detail::kRandomCropCover)
            .denom;
    ferry_scales[denom == 1 ? 0 : denom == 2 ? 1 : denom == 4 ? 2 : 3] += 1;
    const auto x0 = static_cast<int>(std::floor(p.x0));
    const auto y0 = static_cast<int>(std::floor(p.y0));
    boxes.push_back(
        {x0, y0, static_cast<int>(std::ceil(p.x1)) - x0, static_cast<int>(std::ceil(p.y1)) - y0});
    const auto* first = reinterpret_cast<const std::byte*>(b.data());
    bytes.emplace_back(first, first + b.size());
  }
  tjDestroy(tj);
  const bench::CropLimit lim = bench::jpeg_crop_limit(files, boxes, o.width, reps);
  // ferry's own decode of the same boxes on this thread: decode_image (crop, resize, flip).
  std::vector<std::uint8_t> out(std::size_t{224} * 224 * 3);  // rrc_u8_options()
  std::vector<double> cpu;
  for (int r = 0; r <= reps; ++r) {
    const double c0 = thread_cpu_s();
    for (std::size_t i = 0; i < bytes.size(); ++i) {
      ferry::decode_image(bytes[i], o, i, out, "rrc");
      g_sink = g_sink + out[0];
    }
    if (r > 0) cpu.push_back(thread_cpu_s() - c0);
  }
  const double n = static_cast<double>(bytes.size());
  const double ferry_decode_s = median(cpu) / n;
  const double one_worker = one_worker_cpu_rate(folder, reps);
  return Json()
      .integer("images", bytes.size())
      .num("mean_megapixels", pixels / n / 1e6)
      .integer("cores", cores)
      .nums("crops_at_scale_1_2_4_8",
            {static_cast<double>(lim.at_scale[0]), static_cast<double>(lim.at_scale[1]),
             static_cast<double>(lim.at_scale[2]), static_cast<double>(lim.at_scale[3])})
      .nums("ferry_crops_at_scale_1_2_4_8", ferry_scales)
      .num("full_decode_per_cpu_s", 1 / lim.full_s)
      .num("crop_ceiling_per_cpu_s", 1 / lim.crop_s)
      .num("entropy_only_per_cpu_s", 1 / lim.entropy_s)
      .num("ferry_decode_per_cpu_s", 1 / ferry_decode_s)
      .num("ferry_one_worker_per_cpu_s", one_worker)
      .num("full_decode_x_cores", cores / lim.full_s)
      .num("crop_ceiling_x_cores", cores / lim.crop_s)
      .text();
}

void run_limits(const Args& a) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  Json out;
  out.str("side", "ferry").str("workload", "limits").integer("cores", cores);
  if (!a.fmnist.empty()) {
    const auto data = fashion_mnist(a.fmnist, 0);
    const double s = gather_seconds(*data, a.batch, std::max(a.reps, 5) * 4);
    const double sample_bytes =
        static_cast<double>(data->fields()[0].sample_bytes() + data->fields()[1].sample_bytes());
    const double samples_s = static_cast<double>(data->size()) / s;
    out.raw("gather", Json()
                          .num("epoch_s", s)
                          .num("samples_per_s", samples_s)
                          .num("gb_per_s", samples_s * sample_bytes / 1e9)
                          .num("bytes_per_sample", sample_bytes)
                          .text());
  }
  // The machine's limit (bench/image_limits.hpp) per core, times the cores; beside it, ferry's
  // own rate with one worker (decode, resize, normalize, the loader).
  const auto decode = [&](const char* key, const fs::path& root, const ferry::ImageOptions& o,
                          std::size_t limit) {
    if (root.empty()) return;
    auto folder = ferry::ImageFolder::open(root, o);
    auto data = std::make_shared<Spread>(folder, limit);
    std::vector<fs::path> files;
    for (std::size_t i = 0; i < data->size(); ++i) {
      files.push_back(folder->path(i * folder->size() / data->size()));
    }
    const bench::ImageLimit lim = std::string_view(key) == "png" ? bench::png_limit(files, a.reps)
                                                                 : bench::jpeg_limit(files, a.reps);
    const double one_worker = one_worker_rate(data, a.reps);
    out.raw(key, Json()
                     .integer("images", data->size())
                     .num("read_us", lim.read_s * 1e6)
                     .num("decode_us", lim.decode_s * 1e6)
                     .num("per_core_samples_per_s", lim.per_core())
                     .num("samples_per_s", lim.per_core() * cores)
                     .num("ferry_one_worker_samples_per_s", one_worker)
                     .text());
  };
  decode("png", a.png, png_options(), kLimitPngImages);
  decode("jpeg", a.jpeg, jpeg_options(), static_cast<std::size_t>(-1));
  if (!a.rrc.empty()) out.raw("rrc", rrc_limits(a.rrc, a.reps, cores));
  if (!a.csv.empty()) {
    const double per_core = parse_rate(a.csv, a.reps);
    out.raw("parse", Json()
                         .integer("file_bytes", file_bytes(a.csv))
                         .num("per_core_mb_per_s", per_core / 1e6)
                         .num("mb_per_s", per_core * cores / 1e6)
                         .text());
  }
  out.num("peak_rss_mb", peak_rss_mb()).num("ru_maxrss_mb", ru_maxrss_mb());
  std::printf("%s\n", out.text().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    if (a.workload == "limits") {
      run_limits(a);
    } else {
      run_workload(a);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ferry_side: %s\n", e.what());
    return 1;
  }
}
