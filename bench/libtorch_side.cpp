// bench/libtorch_side: the libtorch C++ half of bench/compare's in-memory workload, written as a
// libtorch user writes it: a torch::data Dataset whose get(i) returns an Example of the i-th
// image and label (views into two tensors held in memory), the Stack collate, and
// torch::data::make_data_loader with a RandomSampler. One JSON line of results on stdout.
//
//   libtorch_side --data DIR [--workers N] [--batch N] [--epochs N] [--warmup N] [--check DUMP]
//
// DIR holds Fashion-MNIST's train-images-idx3-ubyte.gz and train-labels-idx1-ubyte.gz, read here
// with zlib (untimed). --warmup N (1) untimed epochs, then --epochs N (1) timed ones. --check
// DUMP: no timing; an unshuffled loader (SequentialSampler), the first 3 batches summed as float64
// per field, and the first 64 samples of each written to DUMP (see bench/ferry_side.cpp).

#include <sys/resource.h>
#include <torch/torch.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kCheckBatches = 3;
constexpr std::int64_t kDumpSamples = 64;

struct Args {
  std::filesystem::path data;
  std::size_t workers = 0;
  std::size_t batch = 256;
  int epochs = 1;
  int warmup = 1;
  std::string check;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument("usage: see bench/libtorch_side.cpp");
    const std::string value = argv[++i];
    if (arg == "--data") {
      a.data = value;
    } else if (arg == "--workers") {
      a.workers = std::stoul(value);
    } else if (arg == "--batch") {
      a.batch = std::stoul(value);
    } else if (arg == "--epochs") {
      a.epochs = std::stoi(value);
    } else if (arg == "--warmup") {
      a.warmup = std::stoi(value);
    } else if (arg == "--check") {
      a.check = value;
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg));
    }
  }
  if (a.data.empty()) throw std::invalid_argument("--data is required");
  return a;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
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

/// The whole of a gzipped file.
std::vector<std::uint8_t> gunzip(const std::filesystem::path& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path.string());
  std::vector<std::uint8_t> out;
  std::vector<std::uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      gzclose(f);
      throw std::runtime_error("cannot read " + path.string());
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
  }
  gzclose(f);
  return out;
}

std::int64_t big_endian(const std::vector<std::uint8_t>& b, std::size_t at) {
  return (std::int64_t{b.at(at)} << 24) | (std::int64_t{b.at(at + 1)} << 16) |
         (std::int64_t{b.at(at + 2)} << 8) | std::int64_t{b.at(at + 3)};
}

/// Fashion-MNIST train in memory: images u8 [N, 28, 28] and labels i64 [N].
class FashionMnist : public torch::data::datasets::Dataset<FashionMnist> {
 public:
  explicit FashionMnist(const std::filesystem::path& dir) {
    const auto images = gunzip(dir / "train-images-idx3-ubyte.gz");
    const auto labels = gunzip(dir / "train-labels-idx1-ubyte.gz");
    if (big_endian(images, 0) != 0x803 || big_endian(labels, 0) != 0x801) {
      throw std::runtime_error("not IDX files in " + dir.string());
    }
    const std::int64_t n = big_endian(images, 4);
    const std::int64_t rows = big_endian(images, 8);
    const std::int64_t cols = big_endian(images, 12);
    images_ = torch::from_blob(const_cast<std::uint8_t*>(images.data()) + 16, {n, rows, cols},
                               torch::kUInt8)
                  .clone();
    labels_ = torch::from_blob(const_cast<std::uint8_t*>(labels.data()) + 8, {n}, torch::kUInt8)
                  .to(torch::kInt64);
  }

  torch::data::Example<> get(std::size_t index) override {
    const auto i = static_cast<std::int64_t>(index);
    return {images_[i], labels_[i]};
  }
  torch::optional<std::size_t> size() const override {
    return static_cast<std::size_t>(images_.size(0));
  }

 private:
  torch::Tensor images_, labels_;
};

std::string shape_json(torch::IntArrayRef shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

const char* numpy_dtype(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kUInt8:
      return "uint8";
    case torch::kInt64:
      return "int64";
    case torch::kFloat32:
      return "float32";
    default:
      return "?";
  }
}

/// {"name":...,"dtype":...,"shape":[...],"sum":...} of one field of a batch; the sum is float64
/// in memory order, as ferry_side computes it.
std::string field_json(const char* name, const torch::Tensor& t) {
  const torch::Tensor flat = t.contiguous().reshape({-1}).to(torch::kFloat64);
  const double* p = flat.data_ptr<double>();
  double sum = 0;
  for (std::int64_t i = 0; i < flat.numel(); ++i) sum += p[i];
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", sum);
  return std::string("{\"name\":\"") + name + "\",\"dtype\":\"" + numpy_dtype(t) +
         "\",\"shape\":" + shape_json(t.sizes()) + ",\"sum\":" + buf + "}";
}

volatile std::uint64_t g_sink = 0;

template <class Loader>
double time_epoch(Loader& loader) {
  const auto start = Clock::now();
  for (const auto& batch : loader) {
    g_sink = g_sink + static_cast<std::uint64_t>(batch.data.template data_ptr<std::uint8_t>()[0]);
  }
  return seconds_since(start);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const auto start = Clock::now();
    auto dataset = FashionMnist(a.data).map(torch::data::transforms::Stack<>());
    const std::size_t samples = *dataset.size();
    const double open_s = seconds_since(start);
    const auto options = torch::data::DataLoaderOptions().batch_size(a.batch).workers(a.workers);
    std::string out = "{\"side\":\"libtorch\",\"workload\":\"inmem\",\"torch_version\":\"" +
                      std::string(TORCH_VERSION) + "\",\"workers\":" + std::to_string(a.workers) +
                      ",\"batch\":" + std::to_string(a.batch);
    char buf[256];
    std::snprintf(buf, sizeof buf, ",\"open_s\":%.17g", open_s);
    out += buf;
    if (!a.check.empty()) {
      auto loader = torch::data::make_data_loader<torch::data::samplers::SequentialSampler>(
          std::move(dataset), options);
      std::ofstream dump(a.check, std::ios::binary | std::ios::trunc);
      std::string sums = "[", layout = "[";
      std::uint64_t offset = 0;
      int b = 0;
      for (const auto& batch : *loader) {
        if (b == kCheckBatches) break;
        if (b > 0) sums += ',';
        sums += "{\"batch\":" + std::to_string(b) + ",\"fields\":[" +
                field_json("image", batch.data) + "," + field_json("label", batch.target) + "]}";
        const std::pair<const char*, torch::Tensor> fields[] = {{"image", batch.data},
                                                                {"label", batch.target}};
        for (const auto& [name, t] : fields) {
          const torch::Tensor head = t.slice(0, 0, kDumpSamples).contiguous();
          const auto bytes = head.nbytes();
          dump.write(static_cast<const char*>(head.data_ptr()),
                     static_cast<std::streamsize>(bytes));
          if (layout.size() > 1) layout += ',';
          layout += "{\"batch\":" + std::to_string(b) + ",\"name\":\"" + name + "\",\"dtype\":\"" +
                    numpy_dtype(head) + "\",\"shape\":" + shape_json(head.sizes()) +
                    ",\"offset\":" + std::to_string(offset) +
                    ",\"nbytes\":" + std::to_string(bytes) + "}";
          offset += bytes;
        }
        ++b;
      }
      out += ",\"checksum\":" + sums + "],\"dump\":\"" + a.check + "\",\"dump_layout\":" + layout +
             "]";
    } else {
      auto loader = torch::data::make_data_loader<torch::data::samplers::RandomSampler>(
          std::move(dataset), options);
      for (int w = 0; w < a.warmup; ++w) time_epoch(*loader);
      std::vector<double> seconds;
      for (int e = 0; e < a.epochs; ++e) seconds.push_back(time_epoch(*loader));
      const double m = median(seconds);
      std::string list = "[";
      for (std::size_t i = 0; i < seconds.size(); ++i) {
        std::snprintf(buf, sizeof buf, "%s%.17g", i ? "," : "", seconds[i]);
        list += buf;
      }
      std::snprintf(buf, sizeof buf,
                    ",\"samples\":%zu,\"epoch_s\":%.17g,\"samples_per_s\":%.17g,\"epochs_s\":",
                    samples, m, static_cast<double>(samples) / m);
      out += buf + list + "]";
    }
    std::snprintf(buf, sizeof buf, ",\"peak_rss_mb\":%.17g,\"ru_maxrss_mb\":%.17g}", peak_rss_mb(),
                  ru_maxrss_mb());
    out += buf;
    std::printf("%s\n", out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "libtorch_side: %s\n", e.what());
    return 1;
  }
}
