// bench/csv: how fast CsvDataset::open() parses a numeric CSV file, against the speed of
// std::from_chars alone on the same bytes.
//
// The file: N rows (500,000; --quick 100,000) of 32 floats with 4 decimals ("-12.3456") and an
// integer label 0..9, with a header, written deterministically (xorshift) into a temporary
// directory (or --dir, where it is kept).
//
// 1. from_chars limit: one thread parses every field of the file (the rows after the header)
//    with std::from_chars into a float and steps over the separator after it, nothing else.
// 2. open(), 1 thread: CsvDataset::open() inside a oneTBB task_arena of one thread.
// 3. open(), all cores: CsvDataset::open() in the default arena.
// 4. epoch: open() and then one epoch through ferry::Loader (batch 256, shuffle, workers 2,
//    device cpu), the consumer reading one float of each batch.
//
// 5. categorical, 1 thread, and 6. categorical, all cores: open() of a table of the same rows
//    and columns in which 4 of the 32 feature columns are text, read as CsvOptions::categorical:
//    10, 1,000, 10,000 and 100,000 distinct words of 4 to 10 letters, drawn uniformly (the
//    hardest case for the dictionaries' caches). Reported beside the numeric table's open() as
//    a ratio of rows per second (the goal: at least 0.8 of numeric).
//
// Each figure is the median of R runs (5; --quick 3; --reps) after a warm-up round that also
// brings the file into the page cache; the four measurements are interleaved in every round.
// Besides wall time, 1 and 2 are timed by the CPU time of the thread that does all their work
// (CLOCK_THREAD_CPUTIME_ID): on a shared machine, time spent preempted does not count against
// them, and "per core" is MB per CPU-second. "vs limit", the ratio of the two throughputs, is
// how close open() comes to std::from_chars alone.
//
// Usage: csv [--quick] [--rows N] [--reps N] [--dir DIR] [--only 1..6]
//   --only runs one measurement (to profile it), without the table.

#include <oneapi/tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kColumns = 32;
constexpr std::size_t kClasses = 10;
constexpr std::size_t kBatch = 256;
constexpr double kTargetMBps = 300;  // parsing, per core
constexpr const char* kUsage =
    "usage: csv [--quick] [--rows N] [--reps N] [--dir DIR] [--only 1..6]";
// The categorical table's text columns (in place of the numeric columns kTextAt[k]) and their
// distinct words.
constexpr std::size_t kTextColumns = 4;
constexpr std::size_t kTextAt[kTextColumns] = {3, 11, 19, 27};
constexpr std::size_t kDistinct[kTextColumns] = {10, 1000, 10000, 100000};

struct Options {
  bool quick = false;
  std::size_t rows = 0;  // 0: the default of the mode
  int reps = 0;          // 0: the default of the mode
  std::string dir;       // "": a temporary directory, removed at the end
  int only = 0;          // 1..6: run only that measurement; 0: all
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--rows" && i + 1 < argc) {
      o.rows = std::strtoull(argv[++i], nullptr, 10);
      if (o.rows == 0) throw std::invalid_argument("--rows needs a positive count");
    } else if (arg == "--reps" && i + 1 < argc) {
      o.reps = std::atoi(argv[++i]);
      if (o.reps < 1) throw std::invalid_argument("--reps needs a positive count");
    } else if (arg == "--only" && i + 1 < argc) {
      o.only = std::atoi(argv[++i]);
      if (o.only < 1 || o.only > 6) throw std::invalid_argument("--only takes 1 to 6");
    } else if (arg == "--dir" && i + 1 < argc) {
      o.dir = argv[++i];
    } else if (arg == "--help" || arg == "-h") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg) + "; " + kUsage);
    }
  }
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

/// A measurement's wall time and its thread's CPU time, in seconds.
struct Timing {
  double wall = 0;
  double cpu = 0;
};

/// Starts timing; stop() gives the Timing since.
struct Stopwatch {
  Clock::time_point wall = Clock::now();
  double cpu = thread_cpu_seconds();
  Timing stop() const { return {seconds_since(wall), thread_cpu_seconds() - cpu}; }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "?";
  return one + " " + five + " " + fifteen;
}

/// The benchmark's file, as text: a header, then `rows` rows.
std::string make_csv(std::size_t rows) {
  std::string out;
  out.reserve(rows * (kColumns * 9 + 3) + 512);
  for (std::size_t c = 0; c < kColumns; ++c) {
    out += 'f';
    out += std::to_string(c);
    out += ',';
  }
  out += "label\n";
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  char buf[32];
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < kColumns; ++c) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      // -99.9999 .. 99.9999 in steps of 0.0001.
      const auto k = static_cast<std::int64_t>(x % 1999999) - 999999;
      const auto res = std::to_chars(buf, buf + sizeof buf, static_cast<double>(k) / 1e4,
                                     std::chars_format::fixed, 4);
      out.append(buf, res.ptr);
      out += ',';
    }
    out += std::to_string((x >> 32) % kClasses);
    out += '\n';
  }
  return out;
}

/// "t" and column c's number: the name of a text column (not "t" + std::to_string(c): GCC 12
/// warns wrongly of an overlap there).
std::string text_column(std::size_t c) {
  std::string out = "t";
  out += std::to_string(c);
  return out;
}

/// `n` distinct words of 4 to 10 lowercase letters, from `seed`.
std::vector<std::string> make_words(std::size_t n, std::uint64_t seed) {
  std::vector<std::string> words;
  std::set<std::string> seen;
  std::uint64_t x = seed;
  while (words.size() < n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::string w(4 + x % 7, 'a');
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] = static_cast<char>('a' + (x >> (8 + 2 * i)) % 26);
    }
    if (seen.insert(w).second) words.push_back(std::move(w));
  }
  return words;
}

/// The categorical benchmark's file: the numeric one's shape, with kTextColumns columns of
/// words in place of numbers.
std::string make_categorical_csv(std::size_t rows) {
  std::vector<std::vector<std::string>> words;
  for (std::size_t k = 0; k < kTextColumns; ++k) words.push_back(make_words(kDistinct[k], k + 1));
  std::string out;
  out.reserve(rows * (kColumns * 9 + 3) + 512);
  for (std::size_t c = 0; c < kColumns; ++c) {
    const auto* at = std::find(std::begin(kTextAt), std::end(kTextAt), c);
    out += at != std::end(kTextAt) ? "t" : "f";
    out += std::to_string(c);
    out += ',';
  }
  out += "label\n";
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  char buf[32];
  for (std::size_t r = 0; r < rows; ++r) {
    std::size_t text = 0;
    for (std::size_t c = 0; c < kColumns; ++c) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      if (text < kTextColumns && kTextAt[text] == c) {
        out += words[text][(x >> 11) % kDistinct[text]];
        ++text;
      } else {
        const auto k = static_cast<std::int64_t>(x % 1999999) - 999999;
        const auto res = std::to_chars(buf, buf + sizeof buf, static_cast<double>(k) / 1e4,
                                       std::chars_format::fixed, 4);
        out.append(buf, res.ptr);
      }
      out += ',';
    }
    out += std::to_string((x >> 32) % kClasses);
    out += '\n';
  }
  return out;
}

ferry::CsvOptions categorical_options() {
  ferry::CsvOptions o;
  o.label = ferry::Column::name("label");
  for (const std::size_t c : kTextAt) o.categorical.push_back(ferry::Column::name(text_column(c)));
  return o;
}

Timing open_categorical_seconds(const fs::path& file, int threads, std::size_t rows) {
  const Stopwatch watch;
  std::shared_ptr<ferry::CsvDataset> ds;
  if (threads == 1) {
    tbb::task_arena one(1);
    one.execute([&] { ds = ferry::CsvDataset::open(file, categorical_options()); });
  } else {
    ds = ferry::CsvDataset::open(file, categorical_options());
  }
  const Timing s = watch.stop();
  if (ds->size() != rows || ds->num_features() != kColumns - kTextColumns ||
      ds->categories(text_column(kTextAt[0])).size() != kDistinct[0]) {
    throw std::runtime_error("CsvDataset read the wrong shape of the categorical table");
  }
  return s;
}

/// Keeps the results alive.
volatile double g_sink = 0;

/// Part 1: every field through std::from_chars, one thread; seconds.
Timing from_chars_limit(std::string_view text) {
  const Stopwatch watch;
  const char* p = text.data() + text.find('\n') + 1;
  const char* const end = text.data() + text.size();
  double sum = 0;
  std::size_t bad = 0;
  while (p < end) {
    float v = 0;
    const auto [q, ec] = std::from_chars(p, end, v);
    bad += ec != std::errc{} ? 1 : 0;
    sum += v;
    p = q + 1;  // the ',' or the '\n'
  }
  const Timing s = watch.stop();
  if (bad != 0) throw std::runtime_error("from_chars failed on the benchmark's own file");
  g_sink = g_sink + sum;
  return s;
}

ferry::CsvOptions csv_options() {
  ferry::CsvOptions o;
  o.label = ferry::Column::name("label");
  return o;
}

Timing open_seconds(const fs::path& file, int threads, std::size_t rows) {
  const Stopwatch watch;
  std::shared_ptr<ferry::CsvDataset> ds;
  if (threads == 1) {
    tbb::task_arena one(1);
    one.execute([&] { ds = ferry::CsvDataset::open(file, csv_options()); });
  } else {
    ds = ferry::CsvDataset::open(file, csv_options());
  }
  const Timing s = watch.stop();
  if (ds->size() != rows || ds->num_features() != kColumns) {
    throw std::runtime_error("CsvDataset read the wrong shape");
  }
  return s;
}

Timing epoch_seconds(const fs::path& file, std::size_t rows) {
  const Stopwatch watch;
  const auto ds = ferry::CsvDataset::open(file, csv_options());
  ferry::LoaderOptions o;
  o.autotune = false;  // the settings this bench states, fixed
  o.batch_size = kBatch;
  o.shuffle = true;
  o.seed = 1;
  o.workers = 2;
  o.device = ferry::Device::cpu();
  ferry::Loader loader(ds, o);
  std::size_t seen = 0;
  double sum = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    sum += b.at(0).data<float>()[0];
    seen += b.size();
  }
  const Timing s = watch.stop();
  if (seen != rows) throw std::runtime_error("the epoch lost rows");
  g_sink = g_sink + sum;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const std::size_t rows = o.rows != 0 ? o.rows : (o.quick ? 100'000 : 500'000);
    const int reps = o.reps > 0 ? o.reps : (o.quick ? 3 : 5);
    const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
    std::string command = "bench/csv";
    for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
    std::printf("%s: ferry %s, %u hardware threads, load average %s\n", command.c_str(),
                ferry::kVersion, cores, load_average().c_str());

    const fs::path dir = o.dir.empty() ? fs::temp_directory_path() /
                                             ("ferry_bench_csv_" + std::to_string(::getpid()))
                                       : fs::path(o.dir);
    fs::create_directories(dir);
    const fs::path file = dir / "numeric.csv";
    const std::string text = make_csv(rows);
    std::ofstream(file, std::ios::binary)
        .write(text.data(), static_cast<std::streamsize>(text.size()));
    const double mb = static_cast<double>(text.size()) / 1e6;
    std::printf("file: %s, %zu rows x (%zu floats + label), %.1f MB\n", file.string().c_str(), rows,
                kColumns, mb);
    const fs::path cat_file = dir / "categorical.csv";
    const std::string cat_text = make_categorical_csv(rows);
    std::ofstream(cat_file, std::ios::binary)
        .write(cat_text.data(), static_cast<std::streamsize>(cat_text.size()));
    const double cat_mb = static_cast<double>(cat_text.size()) / 1e6;
    std::printf(
        "file: %s, the same rows with %zu of the columns text (10, 1000, 10000, 100000 "
        "distinct words), %.1f MB\n",
        cat_file.string().c_str(), kTextColumns, cat_mb);

    std::vector<Timing> limit, one, all, epoch, cat_one, cat_all;
    const bool all_parts = o.only == 0;
    for (int r = -1; r < reps; ++r) {  // round -1: warm-up
      const Timing a = all_parts || o.only == 1 ? from_chars_limit(text) : Timing{};
      const Timing b = all_parts || o.only == 2 ? open_seconds(file, 1, rows) : Timing{};
      const Timing c = all_parts || o.only == 3 ? open_seconds(file, 0, rows) : Timing{};
      const Timing d = all_parts || o.only == 4 ? epoch_seconds(file, rows) : Timing{};
      const Timing e =
          all_parts || o.only == 5 ? open_categorical_seconds(cat_file, 1, rows) : Timing{};
      const Timing f =
          all_parts || o.only == 6 ? open_categorical_seconds(cat_file, 0, rows) : Timing{};
      if (r < 0) continue;
      limit.push_back(a);
      one.push_back(b);
      all.push_back(c);
      epoch.push_back(d);
      cat_one.push_back(e);
      cat_all.push_back(f);
    }
    if (o.dir.empty()) fs::remove_all(dir);
    const auto wall = [](const std::vector<Timing>& v) {
      std::vector<double> w;
      for (const Timing& t : v) w.push_back(t.wall);
      return median(w);
    };
    const auto cpu = [](const std::vector<Timing>& v) {
      std::vector<double> w;
      for (const Timing& t : v) w.push_back(t.cpu);
      return median(w);
    };
    if (!all_parts) {
      const auto& v = o.only == 1   ? limit
                      : o.only == 2 ? one
                      : o.only == 3 ? all
                      : o.only == 4 ? epoch
                      : o.only == 5 ? cat_one
                                    : cat_all;
      const double size = o.only >= 5 ? cat_mb : mb;
      std::printf("measurement %d: median %.3f s wall (%.0f MB/s), %.3f s CPU (%.0f MB/s)\n",
                  o.only, wall(v), size / wall(v), cpu(v), size / cpu(v));
      return 0;
    }

    const double limit_cpu = mb / cpu(limit);
    const double one_cpu = mb / cpu(one);
    std::printf(
        "\n| measurement (median of %d) | wall | MB/s (wall) | MB/s per core | vs limit |\n", reps);
    std::printf("|---|---:|---:|---:|---:|\n");
    std::printf("| from_chars limit, 1 thread | %.3f s | %.0f | %.0f | 1.00 |\n", wall(limit),
                mb / wall(limit), limit_cpu);
    std::printf("| open(), 1 thread | %.3f s | %.0f | %.0f | %.2f |\n", wall(one), mb / wall(one),
                one_cpu, one_cpu / limit_cpu);
    std::printf("| open(), %u threads | %.3f s | %.0f | %.0f (wall / %u) | |\n", cores, wall(all),
                mb / wall(all), mb / wall(all) / cores, cores);
    std::printf(
        "| open() + epoch (batch %zu, shuffle, workers 2, cpu) | %.3f s | %.0f rows/s | "
        "| |\n",
        kBatch, wall(epoch), static_cast<double>(rows) / wall(epoch));
    std::printf("| open(), categorical, 1 thread | %.3f s | %.0f | %.0f | |\n", wall(cat_one),
                cat_mb / wall(cat_one), cat_mb / cpu(cat_one));
    std::printf("| open(), categorical, %u threads | %.3f s | %.0f | %.0f (wall / %u) | |\n", cores,
                wall(cat_all), cat_mb / wall(cat_all), cat_mb / wall(cat_all) / cores, cores);
    // Rows per second of the categorical table over the numeric one's: CPU time for one
    // thread, wall time for all cores.
    const double ratio_one = cpu(one) / cpu(cat_one);
    const double ratio_all = wall(all) / wall(cat_all);
    std::printf(
        "categorical / numeric rows per second: %.2f (1 thread, CPU time), %.2f (%u threads, "
        "wall): %s (>= 0.80)\n",
        ratio_one, ratio_all, cores, std::min(ratio_one, ratio_all) >= 0.8 ? "MET" : "MISSED");
    std::printf(
        "(per core: MB per CPU-second of the one thread; wall-clock ratio of open(), 1 "
        "thread, to the limit: %.2f)\n",
        wall(limit) / wall(one));
    std::printf(
        "\nparse >= %.0f MB/s per core (open(), 1 thread): %s (%.0f MB/s; the "
        "from_chars limit here is %.0f MB/s)\n",
        kTargetMBps, one_cpu >= kTargetMBps ? "MET" : "MISSED", one_cpu, limit_cpu);
    std::printf("(load average at the end %s)\n", load_average().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "csv: %s\n", e.what());
    return 1;
  }
}
