// bench/tables: a numeric table read from Parquet (ParquetDataset) and from an Arrow IPC file
// (ArrowDataset) against the same rows in memory (TensorDataset), through the same loader
// (issue #35's targets: Arrow >= 0.8, Parquet >= 0.5 of in memory).
//
// The data: N rows (1,000,000; --quick 200,000; --rows) of 10 f32 columns f0..f9 and 10 i64
// columns i0..i9, a field per column. bench/table/write_numeric.js writes them with an
// independent writer (apache-arrow + parquet-wasm: Parquet snappy in row groups of 65,536 rows,
// and the Arrow IPC file format, uncompressed, in record batches of as many) into
// --data DIR (default /tmp/ferry-bench-tables) when the file there is not of N rows; the
// in-memory twin is computed here from the same formulas, and before timing the two are
// compared: every row's every value, in order, through a loader.
//
// Configurations, each read one epoch at a time by its own ferry::Loader (batch 256, shuffled,
// seed 42, workers 2, prefetch 4, autotune off, device cpu; --workers, --batch):
//   memory            the TensorDataset;
//   parquet           the Parquet file, fully shuffled: its decoded row groups (120 MB for 1M
//                     rows) fit ParquetDataset's 512 MiB cache, so each is decoded once;
//   parquet window 4  the same with shuffle_window 4 (row groups four at a time, shuffled
//                     within): what a table larger than the cache would use;
//   arrow             the Arrow file, fully shuffled: memory-mapped, values copied from the
//                     mapping.
// Each figure is the median of R epochs (7; --quick 3; --reps) after a warm-up round (its
// first epoch decodes the file; "1st epoch ms" reports that cold epoch, from a fresh dataset).
// The configurations alternate in every round, round r starting with configuration r mod 4.
// Columns: epoch wall time (median), samples/s, "x / memory" the ratio of the medians,
// "paired" the median of the rounds' own ratios, "CPU ms" the process's CPU time per epoch.
// With --python, the same file from Python (bench/py/tables_side.py, ferry's module from
// --python-path, default the build's python/): ferry.ParquetDataset through ferry.Loader, and what
// a user without ferry has, pandas reading the CSV twin (Debian's pandas has no Parquet reader)
// into a torch TensorDataset read by DataLoader(batch 256, shuffle, 2 workers, persistent); that
// side reads only the first 200,000 rows (samples/s does not depend on the length past that; an
// epoch of 1M rows there takes minutes).
// With --images N, an HF-style image table: N JPEGs of 500 x 375 (bench/py/make_data.py's
// jpeg_folder, in --data DIR/jpeg) written by bench/table/write_images.js as Parquet (struct
// image{bytes, path} and label, uncompressed, row groups of 100 rows), read by ParquetDataset
// with TableOptions::images against the same folder read by ImageFolder, the same ImageOptions
// (resize 256, center crop 224), batch 64, shuffled, workers 2, autotune off: every image
// compared byte for byte first, then R epochs each, alternating (target >= 0.95).
// Then the memory of opening: the process's resident memory before and after open() of a fresh
// ParquetDataset (nothing read), against the file's size and its row groups.
//
// Usage: tables [--quick] [--rows N] [--reps N] [--workers W] [--batch N] [--data DIR]
//               [--python [--python-path DIR]] [--images N]

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_dirs.hpp"
#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr std::size_t kColumns = 10;  // of each type
constexpr std::size_t kGroupRows = 65536;
constexpr double kTarget = 0.5;  // Parquet
constexpr double kArrowTarget = 0.8;

constexpr const char* kUsage =
    "usage: tables [--quick] [--rows N] [--reps N] [--workers W] [--batch N] [--data DIR] "
    "[--python [--python-path DIR]] [--images N]";

struct Options {
  std::size_t rows = 0;  // 0: the mode's default
  int reps = 0;
  int workers = 2;
  std::size_t batch = 256;
  bool quick = false;
  fs::path data = "/tmp/ferry-bench-tables";
  bool python = false;
  std::size_t images = 0;  // 0: no image table
  std::string python_path = ferry::bench::binary_dir() + "/python";
};

// The values bench/table/write_numeric.js writes.
float value_f(std::size_t r, std::size_t c) {
  return static_cast<float>((r * (c + 3)) % 1000) * 0.25f - static_cast<float>(c);
}
std::int64_t value_i(std::size_t r, std::size_t c) {
  return static_cast<std::int64_t>(r) * static_cast<std::int64_t>(c + 1) -
         7 * static_cast<std::int64_t>(c);
}

// "f3", "i7" (appended, not concatenated: GCC 12 warns wrongly on `"f" + std::to_string(c)`).
std::string column_name(char type, std::size_t c) {
  std::string name(1, type);
  name.append(std::to_string(c));
  return name;
}

std::shared_ptr<const ferry::Dataset> in_memory(std::size_t rows) {
  std::vector<std::pair<std::string, ferry::Tensor>> fields;
  for (std::size_t c = 0; c < kColumns; ++c) {
    std::vector<float> v(rows);
    for (std::size_t r = 0; r < rows; ++r) v[r] = value_f(r, c);
    fields.emplace_back(column_name('f', c),
                        ferry::Tensor::from(v, {static_cast<std::int64_t>(rows)}));
  }
  for (std::size_t c = 0; c < kColumns; ++c) {
    std::vector<std::int64_t> v(rows);
    for (std::size_t r = 0; r < rows; ++r) v[r] = value_i(r, c);
    fields.emplace_back(column_name('i', c),
                        ferry::Tensor::from(v, {static_cast<std::int64_t>(rows)}));
  }
  return std::make_shared<ferry::TensorDataset>(std::move(fields));
}

// Writes the files unless DIR holds a Parquet file of `rows` rows.
fs::path ensure_files(const Options& options, std::size_t rows) {
  const fs::path parquet = options.data / "numeric.parquet";
  if (fs::exists(parquet) && fs::exists(options.data / "numeric.arrow")) {
    try {
      if (ferry::ParquetDataset::open({parquet})->size() == rows) return parquet;
    } catch (const std::exception&) {  // rewritten below
    }
  }
  const std::string source = ferry::bench::source_dir();
  const std::string command = "NODE_PATH='" + source + "/tests/table/node_modules' node '" +
                              source + "/bench/table/write_numeric.js' '" + options.data.string() +
                              "' " + std::to_string(rows) + " " + std::to_string(kGroupRows);
  std::printf("writing the table: %s\n", command.c_str());
  std::fflush(stdout);
  if (std::system(command.c_str()) != 0) throw std::runtime_error("the writer failed");
  return parquet;
}

ferry::LoaderOptions loader_options(const Options& options, bool shuffle) {
  ferry::LoaderOptions o;
  o.batch_size = options.batch;
  o.shuffle = shuffle;
  o.seed = 42;
  o.workers = options.workers;
  o.prefetch = 4;
  o.autotune = false;
  o.device = ferry::Device::cpu();
  return o;
}

// Every row's every value, in order: the file against the twin. Exits 1 on a difference.
void check_same(const std::shared_ptr<const ferry::Dataset>& file,
                const std::shared_ptr<const ferry::Dataset>& memory, const Options& options) {
  ferry::Loader a(file, loader_options(options, false));
  ferry::Loader b(memory, loader_options(options, false));
  auto ea = a.epoch(0);
  auto eb = b.epoch(0);
  auto ia = ea.begin();
  auto ib = eb.begin();
  std::size_t rows = 0;
  for (; ia != ea.end() && ib != eb.end(); ++ia, ++ib) {
    for (const ferry::FieldSpec& field : memory->fields()) {
      const ferry::Tensor x = (*ia)[field.name];
      const ferry::Tensor y = (*ib)[field.name];
      if (x.dtype() != y.dtype() || x.nbytes() != y.nbytes() ||
          std::memcmp(x.data(), y.data(), x.nbytes()) != 0) {
        std::fprintf(stderr, "check: field %s differs in the batch of rows from %zu\n",
                     field.name.c_str(), rows);
        std::exit(1);
      }
    }
    rows += (*ia).size();
  }
  if (rows != memory->size() || ia != ea.end() || ib != eb.end()) {
    std::fprintf(stderr, "check: %zu rows compared of %zu\n", rows, memory->size());
    std::exit(1);
  }
  std::printf("check: all %zu rows x %zu fields identical to the other\n", rows,
              memory->fields().size());
}

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

struct Timing {
  double wall = 0, cpu = 0;
};

Timing run_epoch(ferry::Loader& loader, std::size_t epoch, const char* field = "f0") {
  const double cpu0 = cpu_seconds();
  const auto start = Clock::now();
  std::uint64_t touched = 0;
  for (const ferry::Batch& batch : loader.epoch(epoch)) {
    touched += *static_cast<const std::uint8_t*>(batch[field].data());
  }
  Timing t{std::chrono::duration<double>(Clock::now() - start).count(), cpu_seconds() - cpu0};
  if (touched == 0xFFFFFFFFFFFFFFFF) std::puts("");  // keeps the reads
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 == argc) throw std::invalid_argument(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--quick") {
      o.quick = true;
    } else if (flag == "--rows") {
      o.rows = std::stoull(value());
    } else if (flag == "--reps") {
      o.reps = std::stoi(value());
    } else if (flag == "--workers") {
      o.workers = std::stoi(value());
    } else if (flag == "--batch") {
      o.batch = std::stoull(value());
    } else if (flag == "--data") {
      o.data = value();
    } else if (flag == "--images") {
      o.images = std::stoull(value());
    } else if (flag == "--python") {
      o.python = true;
    } else if (flag == "--python-path") {
      o.python_path = value();
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.rows == 0) o.rows = o.quick ? 200000 : 1000000;
  if (o.reps == 0) o.reps = o.quick ? 3 : 7;
  return o;
}

// Runs bench/py/tables_side.py SIDE on `rows` rows: its median samples/s over `reps` epochs.
double python_side(const Options& options, const std::string& side, std::size_t rows, int reps) {
  const std::string command = "PYTHONPATH='" + options.python_path + "' /usr/bin/python3 '" +
                              ferry::bench::source_dir() + "/bench/py/tables_side.py' " + side +
                              " '" + options.data.string() + "' " + std::to_string(rows) + " " +
                              std::to_string(reps);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  std::vector<double> epochs;
  char line[256];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    double seconds = 0;
    if (std::sscanf(line, "epoch %lf", &seconds) == 1) epochs.push_back(seconds);
  }
  if (pclose(pipe) != 0 || epochs.empty()) throw std::runtime_error(command + " failed");
  return static_cast<double>(rows) / median(epochs);
}

// The image table against the image folder (--images).
void run_images(const Options& options) {
  const fs::path folder = options.data / "jpeg";
  const fs::path table = options.data / "images.parquet";
  ferry::ImageOptions image;  // 224 x 224 RGB, resize 256 then center crop
  std::shared_ptr<const ferry::Dataset> from_folder;
  if (fs::exists(folder)) from_folder = ferry::ImageFolder::open(folder, image);
  if (!from_folder || from_folder->size() != options.images) {
    fs::remove_all(folder);
    const std::string make = "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '" +
                             ferry::bench::source_dir() +
                             "/bench/py'); import make_data; make_data.jpeg_folder('" +
                             folder.string() + "', " + std::to_string(options.images) + ")\"";
    std::printf("making the images: %s\n", make.c_str());
    std::fflush(stdout);
    if (std::system(make.c_str()) != 0) throw std::runtime_error("the image maker failed");
    fs::remove(table);
    from_folder = ferry::ImageFolder::open(folder, image);
  }
  if (!fs::exists(table)) {
    const std::string source = ferry::bench::source_dir();
    const std::string write = "NODE_PATH='" + source + "/tests/table/node_modules' node '" +
                              source + "/bench/table/write_images.js' '" + folder.string() + "' '" +
                              table.string() + "' 100";
    if (std::system(write.c_str()) != 0) throw std::runtime_error("write_images.js failed");
  }
  ferry::TableOptions columns;
  columns.images = {"image"};
  columns.image = image;
  const std::shared_ptr<const ferry::Dataset> from_table =
      ferry::ParquetDataset::open({table}, columns);
  Options batch64 = options;
  batch64.batch = 64;
  check_same(from_table, from_folder, batch64);
  ferry::Loader folder_loader(from_folder, loader_options(batch64, true));
  ferry::Loader table_loader(from_table, loader_options(batch64, true));
  run_epoch(folder_loader, 0, "image");
  run_epoch(table_loader, 0, "image");
  std::vector<double> folder_wall, table_wall, paired;
  for (int round = 0; round < options.reps; ++round) {
    const auto epoch = static_cast<std::size_t>(round) + 1;
    Timing f{}, t{};
    if (round % 2 == 0) {
      f = run_epoch(folder_loader, epoch, "image");
      t = run_epoch(table_loader, epoch, "image");
    } else {
      t = run_epoch(table_loader, epoch, "image");
      f = run_epoch(folder_loader, epoch, "image");
    }
    folder_wall.push_back(f.wall);
    table_wall.push_back(t.wall);
    paired.push_back(f.wall / t.wall);
  }
  const double n = static_cast<double>(options.images);
  const double ratio = median(folder_wall) / median(table_wall);
  std::printf(
      "\nimage table, %zu JPEGs 500x375 -> 224x224, batch 64, workers 2, %d rounds:\n"
      "ImageFolder %.0f images/s, ParquetDataset (HF image struct) %.0f images/s: %.2f "
      "(paired %.2f): target >= 0.95 %s\n",
      options.images, options.reps, n / median(folder_wall), n / median(table_wall), ratio,
      median(paired), ratio >= 0.95 ? "met" : "missed");
}

int run(const Options& options) {
  const fs::path parquet = ensure_files(options, options.rows);
  const auto memory = in_memory(options.rows);
  const std::shared_ptr<const ferry::Dataset> file = ferry::ParquetDataset::open({parquet});
  check_same(file, memory, options);
  const fs::path arrow_path = options.data / "numeric.arrow";
  const std::shared_ptr<const ferry::Dataset> arrow = ferry::ArrowDataset::open({arrow_path});
  check_same(arrow, memory, options);

  struct Config {
    std::string name;
    std::shared_ptr<const ferry::Dataset> data;
    std::size_t window;
  };
  std::vector<Config> configs = {{"memory", memory, 0},
                                 {"parquet", file, 0},
                                 {"parquet window 4", file, 4},
                                 {"arrow", arrow, 0}};
  // Cold first epochs, each from a fresh dataset.
  std::vector<double> cold(configs.size());
  for (std::size_t k = 1; k < configs.size(); ++k) {
    ferry::LoaderOptions o = loader_options(options, true);
    o.shuffle_window = configs[k].window;
    std::shared_ptr<const ferry::Dataset> data;
    if (configs[k].name == "arrow") {
      data = ferry::ArrowDataset::open({arrow_path});
    } else {
      data = ferry::ParquetDataset::open({parquet});
    }
    ferry::Loader fresh(data, o);
    cold[k] = run_epoch(fresh, 0).wall;
  }
  std::vector<std::unique_ptr<ferry::Loader>> loaders;
  for (const Config& c : configs) {
    ferry::LoaderOptions o = loader_options(options, true);
    o.shuffle_window = c.window;
    loaders.push_back(std::make_unique<ferry::Loader>(c.data, o));
    run_epoch(*loaders.back(), 0);  // warm-up
  }
  std::vector<std::vector<double>> wall(configs.size()), cpu(configs.size());
  for (int round = 0; round < options.reps; ++round) {
    for (std::size_t j = 0; j < configs.size(); ++j) {
      const std::size_t k = (static_cast<std::size_t>(round) + j) % configs.size();
      const Timing t = run_epoch(*loaders[k], static_cast<std::size_t>(round) + 1);
      wall[k].push_back(t.wall);
      cpu[k].push_back(t.cpu);
    }
  }
  std::printf("\n%zu rows x %zu fields (f32 and i64), batch %zu, workers %d, %d rounds\n",
              options.rows, memory->fields().size(), options.batch, options.workers, options.reps);
  std::printf("%-18s %9s %12s %10s %8s %8s %12s\n", "", "epoch ms", "samples/s", "x / memory",
              "paired", "CPU ms", "1st epoch ms");
  const double memory_rate = static_cast<double>(options.rows) / median(wall[0]);
  for (std::size_t k = 0; k < configs.size(); ++k) {
    std::vector<double> paired;
    for (std::size_t r = 0; r < wall[k].size(); ++r) paired.push_back(wall[0][r] / wall[k][r]);
    const double rate = static_cast<double>(options.rows) / median(wall[k]);
    std::printf("%-18s %9.1f %12.0f %10.2f %8.2f %8.1f %12s\n", configs[k].name.c_str(),
                median(wall[k]) * 1e3, rate, rate / memory_rate, median(paired),
                median(cpu[k]) * 1e3,
                k == 0 ? "" : std::to_string(static_cast<int>(cold[k] * 1e3)).c_str());
  }
  const double ratio = median(wall[0]) / median(wall[1]);
  std::printf("parquet / memory %.2f: target >= %.1f %s\n", ratio, kTarget,
              ratio >= kTarget ? "met" : "missed");
  const double arrow_ratio = median(wall[0]) / median(wall[3]);
  std::printf("arrow / memory %.2f: target >= %.1f %s\n", arrow_ratio, kArrowTarget,
              arrow_ratio >= kArrowTarget ? "met" : "missed");

  if (options.python) {
    const double ferry_py = python_side(options, "ferry", options.rows, 3);
    const std::size_t torch_rows = std::min<std::size_t>(options.rows, 200000);
    const double torch_py = python_side(options, "torch", torch_rows, 2);
    std::printf(
        "Python: ferry.ParquetDataset + ferry.Loader %.0f samples/s; pandas (CSV twin) + torch "
        "DataLoader, 2 workers, %zu rows: %.0f samples/s; ferry / DataLoader %.1f\n",
        ferry_py, torch_rows, torch_py, ferry_py / torch_py);
  }

  if (options.images != 0) run_images(options);

  const std::size_t before = resident_bytes();
  const auto opened = ferry::ParquetDataset::open({parquet});
  const std::size_t after = resident_bytes();
  std::printf(
      "open: %.1f MB file, %zu row groups, resident memory +%.2f MB (%.1f KB a row group)\n",
      static_cast<double>(fs::file_size(parquet)) / 1e6, opened->num_row_groups(),
      static_cast<double>(after - before) / 1e6,
      static_cast<double>(after - before) / 1e3 / static_cast<double>(opened->num_row_groups()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tables: %s\n%s\n", e.what(), kUsage);
    return 2;
  }
}
