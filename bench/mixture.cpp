// bench/mixture: a ferry::Mixture of three in-memory sources against one source of the same
// total size, through the same loader (issue #23's target: mix / one >= 0.95).
//
// The data: N samples (120,000; --quick 30,000; --samples) of MNIST-sized rows, "image" u8 [784]
// and "label" i64 [], filled from a fixed xorshift stream:
//
//   one TensorDataset     the N samples;
//   mix 1:1:1             a Mixture of three TensorDatasets of N / 3 samples each (their own
//                         tensors, the same bytes in total), epoch_size N: every sample once an
//                         epoch, as in `one`;
//   mix 3:2:1             the same three sources, weights 3:2:1, epoch_size N: the first
//                         source's samples each given 1 or 2 times, the third's half of them, a
//                         different half each epoch. Same samples an epoch, same bytes;
//   mix of one (control)  `one` as the only source of a Mixture: the same rows as `one`, so what
//                         the Mixture's path costs apart from the data being three tensors.
//
// Each is read one epoch at a time by its own ferry::Loader, all with the same options (batch
// 256, shuffle, seed 42, workers 2, prefetch 4, device cpu; --workers, --batch, --no-shuffle),
// the consumer reading one byte of each batch. Every figure is the median of R epochs (15;
// --quick 5; --reps; at least 5) after a warm-up round. The configurations alternate in every
// round, round r starting with configuration r mod 4 and every other group of four rounds
// running backwards, so that a noisy stretch of the shared machine hits them alike and none
// always follows the same one (--pause-ms P sleeps P ms before each epoch). Columns: the
// epoch's wall time (median, min), samples/s and GB/s of the median, "x / one" the ratio of the
// medians' samples/s, "paired" the median of the rounds' own ratios, "1st ms" epoch() to the
// first batch (LoaderStats::first_batch_seconds), "CPU ms" the process's CPU time (all threads)
// during the epoch: the work, less disturbed by other processes than the wall time.
// Then Mixture::epoch_indices() timed alone (the mixture's share of an epoch's start), and the
// same for 10 epochs of a nest of 60 mixtures, plain and stratified (each epoch should cost what
// the first does).
//
// As a check, each mixture's LoaderStats::source_samples must equal R + 1 times its shares: the
// program exits 1 otherwise.
//
// Usage: mixture [--quick] [--samples N] [--reps N] [--workers W] [--batch N] [--no-shuffle]
//                [--pause-ms P] [--only K]
//   --only K runs configuration K alone (0 one, 1 mix 1:1:1, 2 mix 3:2:1, 3 mix of one), to
//   profile it; no ratios, no check.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kImageBytes = 784;
constexpr std::size_t kSampleBytes = kImageBytes + sizeof(std::int64_t);
constexpr std::size_t kSources = 3;
constexpr double kTarget = 0.95;

constexpr const char* kUsage =
    "usage: mixture [--quick] [--samples N] [--reps N] [--workers W] [--batch N] [--no-shuffle] "
    "[--pause-ms P] [--only K]";

struct Options {
  bool quick = false;
  std::size_t samples = 0;  // 0: the default of the mode
  int reps = 0;
  int workers = 2;
  std::size_t batch = 256;
  int only = -1;  // -1: all configurations
  int pause_ms = 0;
  bool shuffle = true;
};

std::size_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0) {
    throw std::invalid_argument(flag + " wants a positive integer, not '" + text + "'");
  }
  return static_cast<std::size_t>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      o.quick = true;
      continue;
    }
    if (flag == "--no-shuffle") {
      o.shuffle = false;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    }
    if (i + 1 == argc) throw std::invalid_argument(std::string(kUsage));
    const char* value = argv[++i];
    if (flag == "--samples") {
      o.samples = number(flag, value);
    } else if (flag == "--reps") {
      o.reps = static_cast<int>(number(flag, value));
    } else if (flag == "--workers") {
      o.workers = static_cast<int>(number(flag, value));
    } else if (flag == "--batch") {
      o.batch = number(flag, value);
    } else if (flag == "--pause-ms") {
      o.pause_ms = static_cast<int>(number(flag, value));
    } else if (flag == "--only") {
      o.only = std::atoi(value);
      if (o.only < 0 || o.only > 3) throw std::invalid_argument("--only takes 0 to 3");
    } else {
      throw std::invalid_argument(std::string(kUsage));
    }
  }
  if (o.samples == 0) o.samples = o.quick ? 30'000 : 120'000;
  o.samples -= o.samples % kSources;  // three sources of the same size
  if (o.samples == 0) throw std::invalid_argument("--samples must be at least 3");
  if (o.reps == 0) o.reps = o.quick ? 5 : 15;
  if (o.reps < 5) throw std::invalid_argument("--reps must be at least 5 (medians of >= 5 runs)");
  return o;
}

// CPU seconds of the whole process so far (every thread).
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
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

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "?";
  return one + " " + five + " " + fifteen;
}

// `n` image + label rows from the xorshift stream `x` (advanced).
std::shared_ptr<ferry::TensorDataset> make_rows(std::size_t n, std::uint64_t& x) {
  using ferry::DType;
  using ferry::Tensor;
  const auto rows = static_cast<std::int64_t>(n);
  Tensor images = Tensor::empty({rows, static_cast<std::int64_t>(kImageBytes)}, DType::u8);
  Tensor labels = Tensor::empty({rows}, DType::i64);
  auto* img = images.data<std::uint8_t>();
  for (std::size_t i = 0; i < n * kImageBytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(img + i, &x, 8);
  }
  auto* lab = labels.data<std::int64_t>();
  for (std::size_t i = 0; i < n; ++i) lab[i] = static_cast<std::int64_t>(i % 10);
  return std::make_shared<ferry::TensorDataset>(
      std::vector<std::pair<std::string, Tensor>>{{"image", images}, {"label", labels}});
}

volatile std::uint64_t g_sink = 0;

// Seconds from epoch(e) until the epoch is over and destroyed; the consumer reads one byte of
// each batch.
double time_epoch(ferry::Loader& loader, std::uint64_t e) {
  const auto start = Clock::now();
  {
    ferry::Epoch epoch = loader.epoch(e);
    for (const ferry::Batch& b : epoch) g_sink = g_sink + b.at(0).data<std::uint8_t>()[0];
  }
  return seconds_since(start);
}

struct Config {
  std::string name;
  std::shared_ptr<const ferry::Mixture> mixture;  // null for `one`
  std::unique_ptr<ferry::Loader> loader;
  std::vector<double> seconds;
  std::vector<double> ratios;  // one's time / this one's, same round
  std::vector<double> first;   // seconds from epoch(e) to its first batch (LoaderStats)
  std::vector<double> cpu;     // the process's CPU seconds (all threads) during the epoch
};

int run(const Options& o) {
  const std::size_t n = o.samples;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  const auto one = make_rows(n, x);
  std::vector<std::shared_ptr<ferry::TensorDataset>> parts;
  for (std::size_t k = 0; k < kSources; ++k) parts.push_back(make_rows(n / kSources, x));

  auto mixture = [&](std::vector<double> weights) {
    std::vector<ferry::MixtureSource> sources;
    for (std::size_t k = 0; k < kSources; ++k) sources.push_back({parts[k], weights[k]});
    ferry::MixtureOptions mo;
    mo.epoch_size = n;
    return ferry::Mixture::open(std::move(sources), mo);
  };

  ferry::LoaderOptions lo;
  lo.autotune = false;  // the settings this bench states, fixed
  lo.batch_size = o.batch;
  lo.shuffle = o.shuffle;
  lo.seed = 42;
  lo.workers = o.workers;
  lo.prefetch = 4;
  lo.device = ferry::Device::cpu();

  std::vector<Config> configs;
  auto add = [&](std::string name, std::shared_ptr<const ferry::Mixture> m) {
    Config c;
    c.name = std::move(name);
    c.mixture = std::move(m);
    configs.push_back(std::move(c));
  };
  add("one TensorDataset", nullptr);
  add("mix 1:1:1", mixture({1, 1, 1}));
  add("mix 3:2:1", mixture({3, 2, 1}));
  {
    // A control: `one` as the only source of a Mixture. The same rows as `one`, read through
    // the mixture: what the Mixture itself costs, apart from the data being three tensors.
    ferry::MixtureOptions mo;
    mo.epoch_size = n;
    add("mix of one (control)", ferry::Mixture::open({{one, 1.0}}, mo));
  }
  for (Config& c : configs) {
    std::shared_ptr<const ferry::Dataset> data = c.mixture;
    if (!data) data = one;
    c.loader = std::make_unique<ferry::Loader>(data, lo);
  }

  std::printf(
      "ferry %s, bench/mixture: %zu samples of image u8[%zu] + label i64 (%.1f MB), "
      "batch %zu, shuffle, workers %d, prefetch 4, device cpu\n",
      ferry::kVersion, n, kImageBytes, static_cast<double>(n * kSampleBytes) / 1e6, o.batch,
      o.workers);
  std::printf("median of %d epochs each, interleaved, after a warm-up round; load before: %s\n\n",
              o.reps, load_average().c_str());

  // Warm-up (epoch R), then R rounds, the configurations' order reversed every other round.
  const auto warm = static_cast<std::uint64_t>(o.reps);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (o.only < 0 || static_cast<std::size_t>(o.only) == i) {
      (void)time_epoch(*configs[i].loader, warm);
    }
  }
  for (int r = 0; r < o.reps; ++r) {
    // Round r starts with configuration r mod 4, and every other group of four rounds runs
    // backwards: each configuration takes each place in a round, after each of the others.
    std::vector<std::size_t> order{0, 1, 2, 3};
    std::rotate(order.begin(), order.begin() + r % 4, order.end());
    if ((r / 4) % 2 == 1) std::reverse(order.begin(), order.end());
    if (o.only >= 0) order = {static_cast<std::size_t>(o.only)};
    std::vector<double> s(configs.size(), 1.0);
    for (const std::size_t i : order) {
      if (o.pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
      const double cpu = process_cpu_seconds();
      s[i] = time_epoch(*configs[i].loader, static_cast<std::uint64_t>(r));
      configs[i].cpu.push_back(process_cpu_seconds() - cpu);
      configs[i].first.push_back(configs[i].loader->stats().first_batch_seconds);
    }
    for (std::size_t i = 0; i < configs.size(); ++i) {
      configs[i].seconds.push_back(s[i]);
      configs[i].ratios.push_back(s[0] / s[i]);
    }
  }

  const double one_s = median(configs[0].seconds);
  std::printf("%-20s %10s %10s %12s %8s %8s %9s %9s %9s\n", "", "epoch ms", "(min ms)", "samples/s",
              "GB/s", "x / one", "(paired)", "1st ms", "CPU ms");
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (o.only >= 0 && static_cast<std::size_t>(o.only) != i) continue;
    const Config& c = configs[i];
    const double m = median(c.seconds);
    std::printf("%-20s %10.2f %10.2f %12.4g %8.2f %8.3f %9.3f %9.2f %9.1f\n", c.name.c_str(),
                m * 1e3, *std::min_element(c.seconds.begin(), c.seconds.end()) * 1e3,
                static_cast<double>(n) / m, static_cast<double>(n * kSampleBytes) / m / 1e9,
                one_s / m, median(c.ratios), median(c.first) * 1e3, median(c.cpu) * 1e3);
  }
  std::printf("\nload after: %s\n", load_average().c_str());

  // Where a mixture's epoch differs from one dataset's: at its start the loader asks the
  // mixture for the epoch's indices (epoch_indices(), on the thread that calls epoch()), then
  // maps every shuffled position through them. The first, timed alone:
  for (std::size_t i = 1; i < configs.size() && o.only < 0; ++i) {
    std::vector<double> t;
    for (int r = 0; r < o.reps; ++r) {
      const auto start = Clock::now();
      const std::vector<std::uint64_t> indices =
          configs[i].mixture->epoch_indices(42, static_cast<std::uint64_t>(r));
      t.push_back(seconds_since(start));
      g_sink = g_sink + indices.size();
    }
    std::printf("%s: epoch_indices() %.2f ms (median of %d)\n", configs[i].name.c_str(),
                median(t) * 1e3, o.reps);
  }

  // A nest of 60 mixtures (each level: the one below and a source, 1:1, an epoch 5 longer than
  // the one below, so each level takes about half of an epoch below, across its passes): every
  // epoch's list should cost what the first one's does.
  // The same nest stratified (blocks of 256 at every level: each level keeps its lists).
  for (const std::size_t stratified : {std::size_t{0}, std::size_t{256}}) {
    if (o.only >= 0) break;
    const std::shared_ptr<const ferry::Dataset> leaf = configs[1].mixture->source(0).dataset;
    std::shared_ptr<const ferry::Dataset> nest = leaf;
    for (std::size_t d = 0; d < 60; ++d) {
      ferry::MixtureOptions mo;
      mo.epoch_size = 1000 + 5 * d;
      mo.stratified = stratified;
      nest = ferry::Mixture::open({{nest, 1}, {leaf, 1}}, mo);
    }
    std::vector<double> t;
    for (std::uint64_t e = 0; e < 10; ++e) {
      const auto start = Clock::now();
      g_sink = g_sink + nest->epoch_indices(42, e).size();
      t.push_back(seconds_since(start));
    }
    std::vector<double> later(t.begin() + 1, t.end());
    std::printf(
        "nest of 60 mixtures%s: epoch_indices() epoch 0 %.3f ms, epochs 1-9 median %.3f ms "
        "(%.2f x epoch 0), most %.3f ms\n",
        stratified > 0 ? ", stratified 256" : "", t[0] * 1e3, median(later) * 1e3,
        median(later) / t[0], *std::max_element(later.begin(), later.end()) * 1e3);
  }

  // Every epoch of a mixture gave exactly its shares.
  bool exact = true;
  for (const Config& c : configs) {
    if (!c.mixture || o.only >= 0) continue;
    const ferry::LoaderStats stats = c.loader->stats();
    std::printf("%s: per-source samples over %d epochs:", c.name.c_str(), o.reps + 1);
    for (std::size_t k = 0; k < c.mixture->shares().size(); ++k) {
      const std::uint64_t want =
          static_cast<std::uint64_t>(o.reps + 1) * std::uint64_t{c.mixture->shares()[k]};
      const std::uint64_t got = k < stats.source_samples.size() ? stats.source_samples[k] : 0;
      std::printf(" %llu (shares %llu)", static_cast<unsigned long long>(got),
                  static_cast<unsigned long long>(want));
      exact = exact && got == want;
    }
    std::printf("\n");
  }

  for (std::size_t i = 1; i < configs.size() && o.only < 0; ++i) {
    const double ratio = one_s / median(configs[i].seconds);
    std::printf("%s / one: %.3f (paired %.3f), target >= %.2f: %s\n", configs[i].name.c_str(),
                ratio, median(configs[i].ratios), kTarget, ratio >= kTarget ? "met" : "MISSED");
  }
  if (!exact) {
    std::fprintf(stderr, "mixture: a mixture's per-source samples differ from its shares\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixture: %s\n", e.what());
    return 2;
  }
}
