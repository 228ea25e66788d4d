// bench/pipeline: the loader's own cost, how well its stages overlap, and how soon an epoch
// starts delivering. It runs on the CPU only (no CUDA); the copy stage, where used, is the host
// copy engine (detail::SimulatedCopy, lib/pipeline/testing.hpp).
//
// 1. Overhead. A TensorDataset of 60,000 MNIST-sized samples ("image" u8 [784], "label"
//    i64 []), batch 256, shuffle, device cpu, prefetch 4, workers 1 and 2, with and without the
//    simulated copy stage (no injected bandwidth). The consumer only touches one byte of each
//    batch. The limit is one thread doing what a loader must do at least: for each sample of
//    the same epoch order, memcpy its 784 image bytes and 8 label bytes into a batch buffer laid
//    out as ferry's. Reported: epoch wall time, samples/s, GB/s, ferry/limit.
// 2. Overlap. A dataset whose read() costs a known time (a clock spin after the copy), the
//    simulated copy stage at a bandwidth that makes one batch's copy take 3 ms, and a consumer
//    that spins on the clock for 4 ms per batch. Ideal epoch = max(load, copy, compute) per
//    batch × batches, with load measured alone (no copy stage, no compute), copy = batch bytes /
//    bandwidth and compute the fixed 4 ms. Reported: ideal/actual, for workers 1 and 2, and for
//    a control whose read() does not spin (loading then costs almost no CPU, which tells the
//    pipeline's own overlap apart from a shortage of cores: the consumer's spin takes one).
// 3. Start-up. Loader construction, and epoch(e) to the first batch (then the epoch is dropped
//    early, and that is timed too), on the dataset of 1.
//
// Every figure is the median of R runs after one warm-up; runs of the configurations being
// compared are interleaved, so that a noisy stretch of the machine hits all of them alike; in
// part 1 each ferry epoch is also paired with a run of the limit just before it.
//
// Usage: pipeline [--quick] [--reps N] [--only 1|2|3]
//   --reps sets R of all three parts; --only runs one part (to profile it), without the targets.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"
#include "pipeline/testing.hpp"

namespace {

// A loader whose copy stage runs on the host copy engine when `copy` (at `bandwidth` bytes/s
// when > 0): the stand-in for a GPU.
ferry::Loader make_loader(std::shared_ptr<const ferry::Dataset> data,
                          const ferry::LoaderOptions& options, bool copy, double bandwidth = 0) {
  ferry::detail::SimulatedCopy simulated;
  simulated.enabled = copy;
  simulated.bytes_per_second = bandwidth;
  return ferry::detail::make_loader(std::move(data), options, simulated);
}

using Clock = std::chrono::steady_clock;

// Part 1: the dataset and loader of the brief.
constexpr std::size_t kSamples = 60'000;
constexpr std::size_t kImageBytes = 784;
constexpr std::size_t kLabelBytes = sizeof(std::int64_t);
constexpr std::size_t kSampleBytes = kImageBytes + kLabelBytes;
constexpr std::size_t kBatch = 256;
constexpr int kPrefetch = 4;
constexpr std::uint64_t kSeed = 42;
constexpr double kOverheadTarget = 0.70;

// Part 2: per-batch costs of the three stages.
constexpr std::size_t kOverlapBatches = 150;
constexpr auto kCompute = std::chrono::microseconds(4000);
constexpr double kCopySeconds = 0.003;
constexpr auto kLoadPerBatch = std::chrono::microseconds(2000);
constexpr double kOverlapTarget = 0.95;

/// Command-line options.
struct Options {
  bool quick = false;
  int reps = 0;  ///< 0: the default for the mode
  int only = 0;  ///< 1, 2 or 3: run only that part (profiling); 0: all
};

constexpr const char* kUsage = "usage: pipeline [--quick] [--reps N] [--only 1|2|3]";

/// Parses argv. \throws std::invalid_argument on an unknown option.
Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--quick") {
      o.quick = true;
    } else if (arg == "--reps" && i + 1 < argc) {
      o.reps = std::atoi(argv[++i]);
      if (o.reps < 1) throw std::invalid_argument("--reps needs a positive count");
    } else if (arg == "--only" && i + 1 < argc) {
      o.only = std::atoi(argv[++i]);
      if (o.only < 1 || o.only > 3) throw std::invalid_argument("--only takes 1, 2 or 3");
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

/// The median of `v` (v is reordered).
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

/// Busy work for `d` by the clock: a preempted spin does not last longer, so the cost stays
/// what was asked for on a noisy machine.
void spin_for(Clock::duration d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) {
  }
}

/// Keeps the consumer's reads alive.
volatile std::uint64_t g_sink = 0;

/// What the consumer of parts 1 and 3 does with a batch: read one byte of it.
void touch(const ferry::Batch& b) { g_sink = g_sink + b.at(0).data<std::uint8_t>()[0]; }

/// 60,000 × 784 u8 images and their i64 labels, filled with a fixed xorshift stream.
std::shared_ptr<ferry::TensorDataset> make_images(std::size_t n) {
  using ferry::DType;
  using ferry::Tensor;
  const auto rows = static_cast<std::int64_t>(n);
  Tensor images = Tensor::empty({rows, static_cast<std::int64_t>(kImageBytes)}, DType::u8);
  Tensor labels = Tensor::empty({rows}, DType::i64);
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
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

/// A dataset whose read() copies the sample from `inner` and then spins for `cost`: a decoder
/// of known price.
class CostlyDataset final : public ferry::Dataset {
 public:
  CostlyDataset(std::shared_ptr<const ferry::Dataset> inner, std::size_t size, Clock::duration cost)
      : inner_(std::move(inner)), size_(size), cost_(cost) {}
  std::size_t size() const override { return size_; }
  std::vector<ferry::FieldSpec> fields() const override { return inner_->fields(); }
  void read(std::size_t index, ferry::SampleRef out) const override {
    inner_->read(index % inner_->size(), out);
    spin_for(cost_);
  }

 private:
  std::shared_ptr<const ferry::Dataset> inner_;
  std::size_t size_;
  Clock::duration cost_;
};

ferry::LoaderOptions base_options(int workers) {
  ferry::LoaderOptions o;
  o.autotune = false;  // the settings this bench states, fixed
  o.batch_size = kBatch;
  o.shuffle = true;
  o.seed = kSeed;
  o.workers = workers;
  o.prefetch = kPrefetch;
  o.device = ferry::Device::cpu();
  return o;
}

/// Seconds from epoch(e) until the epoch is over and destroyed, `per_batch` run on each batch.
double time_epoch(ferry::Loader& loader, std::uint64_t e,
                  const std::function<void(const ferry::Batch&)>& per_batch) {
  const auto start = Clock::now();
  {
    ferry::Epoch epoch = loader.epoch(e);
    for (const ferry::Batch& b : epoch) per_batch(b);
  }
  return seconds_since(start);
}

/// Bytes of one batch of `count` samples in ferry's staging layout: image field, then the
/// label field at the next 256-byte boundary (SlotLayout). Checked against stats().bytes.
constexpr std::size_t label_offset() { return (kImageBytes * kBatch + 255) / 256 * 256; }
constexpr std::size_t batch_bytes(std::size_t count) {
  return label_offset() + kLabelBytes * count;
}

/// The limit of part 1: one thread gathers every sample of `order` into a batch buffer with the
/// loader's layout, batch after batch, and touches one byte per batch as the consumer does.
double time_gather(const std::vector<std::uint64_t>& order, const std::uint8_t* images,
                   const std::int64_t* labels, std::byte* buffer) {
  const auto start = Clock::now();
  for (std::size_t first = 0; first < order.size(); first += kBatch) {
    const std::size_t count = std::min(kBatch, order.size() - first);
    for (std::size_t i = 0; i < count; ++i) {
      const std::uint64_t index = order[first + i];
      std::memcpy(buffer + i * kImageBytes, images + index * kImageBytes, kImageBytes);
      std::memcpy(buffer + label_offset() + i * kLabelBytes, labels + index, kLabelBytes);
    }
    g_sink = g_sink + static_cast<std::uint64_t>(buffer[0]);
  }
  return seconds_since(start);
}

/// The first three fields of /proc/loadavg ("?" where there is none): other work on the machine
/// shows in every figure here.
std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  if (!(in >> one >> five >> fifteen)) return "?";
  return one + " " + five + " " + fifteen;
}

void rule() {
  std::printf(
      "------------------------------------------------------------------------------------------"
      "\n");
}

/// A loader being measured, and its epoch times.
struct Config {
  std::string name;
  std::unique_ptr<ferry::Loader> loader;
  std::function<void(const ferry::Batch&)> consumer;
  std::vector<double> seconds;
  std::vector<double> ratios;  ///< part 1: the limit's time / this epoch's, each pair adjacent
};

// ---- Part 1 -------------------------------------------------------------------------------

struct OverheadResult {
  double ratio_w2 = 0;  ///< ferry/limit, workers = 2, no copy stage
};

OverheadResult part_overhead(const std::shared_ptr<ferry::TensorDataset>& data, int reps) {
  std::printf(
      "\n== 1. Pipeline overhead: TensorDataset %zu x (image u8[%zu] + label i64), "
      "batch %zu, shuffle, prefetch %d, device cpu ==\n",
      kSamples, kImageBytes, kBatch, kPrefetch);
  std::printf(
      "   consumer touches one byte per batch; limit = 1 thread gather-memcpy, same "
      "order; median of %d epochs each\n   (the limit: of %d runs, one just before each ferry "
      "epoch)\n\n",
      reps, 4 * reps);

  // The epoch orders the loaders will produce, for the limit to gather in the same order.
  std::vector<std::vector<std::uint64_t>> orders(static_cast<std::size_t>(reps) + 1);
  {
    ferry::Loader recorder(data, base_options(1));
    for (std::size_t e = 0; e < orders.size(); ++e) {
      for (const ferry::Batch& b : recorder.epoch(e)) {
        orders[e].insert(orders[e].end(), b.indices().begin(), b.indices().end());
      }
    }
  }

  std::vector<Config> configs;
  for (const bool copy : {false, true}) {
    for (const int workers : {1, 2}) {
      const ferry::LoaderOptions o = base_options(workers);
      Config c;
      c.name = "ferry workers=" + std::to_string(workers) + (copy ? " +copy stage" : "");
      c.loader = std::make_unique<ferry::Loader>(make_loader(data, o, copy));
      c.consumer = touch;
      configs.push_back(std::move(c));
    }
  }
  const auto* images = static_cast<const std::uint8_t*>(data->tensors()[0].data());
  const auto* labels = static_cast<const std::int64_t*>(data->tensors()[1].data());
  std::vector<std::byte> buffer(batch_bytes(kBatch));
  std::vector<double> limit;

  // Warm-up on the last recorded epoch, then R interleaved rounds.
  const auto warm = static_cast<std::uint64_t>(reps);
  (void)time_gather(orders[warm], images, labels, buffer.data());
  for (Config& c : configs) (void)time_epoch(*c.loader, warm, c.consumer);
  // Each ferry epoch is paired with a run of the limit just before it: how fast the gather goes
  // here depends on what the shared machine's caches hold at the moment, and a pair sees the
  // same moment.
  for (int r = 0; r < reps; ++r) {
    const auto e = static_cast<std::uint64_t>(r);
    for (Config& c : configs) {
      const double l = time_gather(orders[e], images, labels, buffer.data());
      const double f = time_epoch(*c.loader, e, c.consumer);
      limit.push_back(l);
      c.seconds.push_back(f);
      c.ratios.push_back(l / f);
    }
  }

  const double epoch_bytes = static_cast<double>(kSamples * kSampleBytes);
  const double limit_s = median(limit);
  std::printf("%-28s %10s %10s %12s %8s %11s %11s\n", "", "epoch ms", "(min ms)", "samples/s",
              "GB/s", "ferry/limit", "(paired)");
  rule();
  auto row = [&](const std::string& name, const std::vector<double>& s, double paired) {
    const double m = median(s);
    std::printf("%-28s %10.2f %10.2f %12.3g %8.2f %11.2f %11.2f\n", name.c_str(), m * 1e3,
                *std::min_element(s.begin(), s.end()) * 1e3, static_cast<double>(kSamples) / m,
                epoch_bytes / m / 1e9, limit_s / m, paired);
  };
  row("limit (1-thread gather)", limit, 1.0);
  OverheadResult result;
  for (const Config& c : configs) {
    row(c.name, c.seconds, median(c.ratios));
    if (c.name == "ferry workers=2") result.ratio_w2 = median(c.ratios);
  }
  std::printf(
      "\nferry/limit: median limit time / median ferry time; (paired): median over the %d rounds "
      "of\nlimit / ferry, each ferry epoch against the limit run just before it (the target's "
      "figure).\n",
      reps);
  std::printf(
      "GB/s counts the %zu sample bytes per sample (%zu per epoch); ferry's batches "
      "are %zu bytes each in its staging layout.\n",
      kSampleBytes, kSamples * kSampleBytes, batch_bytes(kBatch));
  for (const Config& c : configs) {
    const ferry::LoaderStats s = c.loader->stats();
    std::printf("  %-26s %s\n", c.name.c_str(), s.summary().c_str());
  }
  return result;
}

// ---- Part 2 -------------------------------------------------------------------------------

struct OverlapResult {
  double ratio_w1 = 0;       ///< ideal/actual, workers = 1, read() spins (the target)
  double ratio_w2 = 0;       ///< the same with workers = 2
  double ratio_control = 0;  ///< workers = 1, read() without the spin
};

OverlapResult part_overlap(const std::shared_ptr<ferry::TensorDataset>& images, int reps) {
  const std::size_t n = kOverlapBatches * kBatch;
  const auto per_sample =
      std::chrono::duration_cast<Clock::duration>(kLoadPerBatch) / static_cast<Clock::rep>(kBatch);
  auto costly = std::make_shared<CostlyDataset>(images, n, per_sample);
  auto cheap = std::make_shared<CostlyDataset>(images, n, Clock::duration::zero());
  const double bandwidth = static_cast<double>(batch_bytes(kBatch)) / kCopySeconds;
  const double compute_s = std::chrono::duration<double>(kCompute).count();

  std::printf(
      "\n== 2. Overlap: %zu batches of %zu; read() = memcpy + %.2f us spin per sample "
      "(%.1f ms per batch on one worker);\n   copy stage at %.1f MB/s (%zu B per batch: "
      "%.1f ms); consumer spins %.1f ms per batch. Median of %d epochs each ==\n",
      kOverlapBatches, kBatch, std::chrono::duration<double, std::micro>(per_sample).count(),
      std::chrono::duration<double, std::milli>(kLoadPerBatch).count(), bandwidth / 1e6,
      batch_bytes(kBatch), kCopySeconds * 1e3, compute_s * 1e3, reps);
  std::printf(
      "   control: the same without the spin in read(), so that loading costs almost no "
      "CPU\n\n");

  const auto spin_compute = [](const ferry::Batch& b) {
    touch(b);
    spin_for(kCompute);
  };
  // For each case: load alone, load + copy, load + copy + compute.
  struct Group {
    std::string name;
    int workers = 1;
    Config load, load_copy, all;
    double ratio = 0;
  };
  std::vector<Group> groups;
  const auto add = [&](std::string name, int workers,
                       const std::shared_ptr<const ferry::Dataset>& data) {
    Group g;
    g.name = std::move(name);
    g.workers = workers;
    const ferry::LoaderOptions plain = base_options(workers);
    g.load.name = "load alone";
    g.load.loader = std::make_unique<ferry::Loader>(data, plain);
    g.load.consumer = touch;
    g.load_copy.name = "load + copy";
    g.load_copy.loader = std::make_unique<ferry::Loader>(make_loader(data, plain, true, bandwidth));
    g.load_copy.consumer = touch;
    g.all.name = "load + copy + compute";
    g.all.loader = std::make_unique<ferry::Loader>(make_loader(data, plain, true, bandwidth));
    g.all.consumer = spin_compute;
    groups.push_back(std::move(g));
  };
  add("workers=1", 1, costly);
  add("workers=2", 2, costly);
  add("control w=1", 1, cheap);
  const auto configs_of = [](Group& g) {
    return std::vector<Config*>{&g.load, &g.load_copy, &g.all};
  };

  const auto warm = static_cast<std::uint64_t>(reps);
  for (Group& g : groups) {
    for (Config* c : configs_of(g)) (void)time_epoch(*c->loader, warm, c->consumer);
  }
  for (int r = 0; r < reps; ++r) {
    for (Group& g : groups) {
      for (Config* c : configs_of(g)) {
        c->seconds.push_back(time_epoch(*c->loader, static_cast<std::uint64_t>(r), c->consumer));
      }
    }
  }

  const auto batches = static_cast<double>(kOverlapBatches);
  std::printf("%-12s %-24s %10s %12s %10s %12s\n", "", "run", "epoch ms", "ms / batch", "ideal ms",
              "ideal/actual");
  rule();
  for (Group& g : groups) {
    const ferry::LoaderStats copy_stats = g.all.loader->stats();
    const double load_pb = median(g.load.seconds) / batches;
    const double copy_pb =
        static_cast<double>(copy_stats.bytes) / static_cast<double>(copy_stats.batches) / bandwidth;
    const double ideal_all = std::max({load_pb, copy_pb, compute_s}) * batches;
    const double ideal_load_copy = std::max(load_pb, copy_pb) * batches;
    for (Config* c : configs_of(g)) {
      const double m = median(c->seconds);
      const double ideal = c == &g.all ? ideal_all : c == &g.load_copy ? ideal_load_copy : m;
      std::printf("%-12s %-24s %10.1f %12.3f %10.1f %12.3f\n", g.name.c_str(), c->name.c_str(),
                  m * 1e3, m / batches * 1e3, ideal * 1e3, ideal / m);
    }
    std::printf(
        "%-12s per batch: load %.3f ms (measured alone), copy %.3f ms (bytes / B), "
        "compute %.3f ms\n",
        "", load_pb * 1e3, copy_pb * 1e3, compute_s * 1e3);
    g.ratio = ideal_all / median(g.all.seconds);
  }
  std::printf("\n");
  for (Group& g : groups) {
    for (Config* c : configs_of(g)) {
      std::printf("  %-11s %-22s %s\n", g.name.c_str(), c->name.c_str(),
                  c->loader->stats().summary().c_str());
    }
  }
  return {groups[0].ratio, groups[1].ratio, groups[2].ratio};
}

// ---- Part 3 -------------------------------------------------------------------------------

void part_startup(const std::shared_ptr<ferry::TensorDataset>& data, int reps) {
  std::printf(
      "\n== 3. Start-up on the dataset of 1 (batch %zu, shuffle, prefetch %d). Median of "
      "%d runs each ==\n\n",
      kBatch, kPrefetch, reps);
  struct Row {
    std::string name;
    ferry::LoaderOptions options;
    bool copy;
    std::vector<double> construct, first, drop;
  };
  std::vector<Row> rows;
  for (const bool copy : {false, true}) {
    for (const int workers : {1, 2}) {
      rows.push_back({"workers=" + std::to_string(workers) + (copy ? " +copy stage" : ""),
                      base_options(workers),
                      copy,
                      {},
                      {},
                      {}});
    }
  }
  for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
    const std::uint64_t e = r < 0 ? 0 : static_cast<std::uint64_t>(r) + 1;
    for (Row& row : rows) {
      auto start = Clock::now();
      ferry::Loader loader = make_loader(data, row.options, row.copy);
      const double construct = seconds_since(start);
      start = Clock::now();
      ferry::Epoch epoch = loader.epoch(e);
      const auto it = epoch.begin();
      touch(*it);
      const double first = seconds_since(start);
      start = Clock::now();
      { ferry::Epoch dropped = std::move(epoch); }
      const double drop = seconds_since(start);
      if (r >= 0) {
        row.construct.push_back(construct);
        row.first.push_back(first);
        row.drop.push_back(drop);
      }
    }
  }
  std::printf("%-26s %16s %18s %22s\n", "", "Loader() us", "epoch->1st batch us",
              "drop after 1st us");
  rule();
  for (const Row& row : rows) {
    std::printf("%-26s %16.0f %18.0f %22.0f\n", row.name.c_str(), median(row.construct) * 1e6,
                median(row.first) * 1e6, median(row.drop) * 1e6);
  }
  std::printf(
      "\n(Loader() allocates the %d staging slots, and the copy engine and its buffers "
      "when there is a copy stage; epoch->1st batch includes\n starting the planner "
      "(and copy) thread and filling batch 0; 'drop' destroys the epoch with 3 batches "
      "in flight.)\n",
      kPrefetch);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const int r1 = o.reps > 0 ? o.reps : (o.quick ? 5 : 31);
    const int r2 = o.reps > 0 ? o.reps : (o.quick ? 3 : 11);
    const int r3 = o.reps > 0 ? o.reps : (o.quick ? 15 : 101);
    std::printf("bench/pipeline%s: ferry %s, %u hardware threads, load average %s\n",
                o.quick ? " --quick" : "", ferry::kVersion, std::thread::hardware_concurrency(),
                load_average().c_str());

    const auto start = Clock::now();
    const auto data = make_images(kSamples);
    const bool all = o.only == 0;
    const OverheadResult overhead = all || o.only == 1 ? part_overhead(data, r1) : OverheadResult{};
    const OverlapResult overlap = all || o.only == 2 ? part_overlap(data, r2) : OverlapResult{};
    if (all || o.only == 3) part_startup(data, r3);
    if (!all) return 0;

    std::printf("\n== Targets ==\n");
    std::printf(
        "overhead: ferry/limit, workers=2, no copy stage >= %.2f: %s (%.2f, median of "
        "%d)\n",
        kOverheadTarget, overhead.ratio_w2 >= kOverheadTarget ? "MET" : "MISSED", overhead.ratio_w2,
        r1);
    std::printf("overlap:  ideal/actual, workers=1 >= %.2f: %s (%.3f, median of %d)\n",
                kOverlapTarget, overlap.ratio_w1 >= kOverlapTarget ? "MET" : "MISSED",
                overlap.ratio_w1, r2);
    std::printf("overlap:  ideal/actual, workers=2 >= %.2f: %s (%.3f, median of %d)\n",
                kOverlapTarget, overlap.ratio_w2 >= kOverlapTarget ? "MET" : "MISSED",
                overlap.ratio_w2, r2);
    std::printf("overlap:  (control, read() without spin, workers=1: %.3f; not a target)\n",
                overlap.ratio_control);
    std::printf("(whole run: %.1f s; load average at the end %s)\n", seconds_since(start),
                load_average().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline: %s\n", e.what());
    return 1;
  }
}
