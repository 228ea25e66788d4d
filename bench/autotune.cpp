// bench/autotune: LoaderOptions::autotune against the best fixed setting of a grid.
//
// Two datasets of 16 KiB samples: "memory" (a memcpy from a buffer in memory) and "slow read"
// (a sleep of 200 µs per sample, then the memcpy: a read that waits as I/O does). Each with two
// consumers: "none" (touches one byte per batch) and "compute" (spins on the clock per batch
// for 1.5× the time one worker takes to load a batch: compute-bound at every setting). For
// each of the four workloads:
//   grid      workers 1..cores × prefetch 2, 4, 8, 16, autotune off;
//   autotune  autotune on, from workers 1 and prefetch 2, memory_budget = the memory of the
//             fixed setting (cores workers, prefetch 8).
// Throughput is the steady state: samples/s over the second half of a run of B batches (a
// fresh loader per run, so autotune's settling lies in the first half). Memory is the peak of
// LoaderStats::memory_bytes, sampled after every batch. Every figure is the median of R rounds;
// the configurations of a round run one after another, so a noisy stretch hits them alike.
//
// Usage: autotune [--quick] [--rounds R]

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::int64_t kSampleBytes = 16 * 1024;

class BenchDataset : public ferry::Dataset {
 public:
  BenchDataset(std::size_t n, int sleep_us) : n_(n), sleep_us_(sleep_us), data_(n * kBytes) {
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = static_cast<std::uint8_t>(i * 131);
  }
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"x", ferry::DType::u8, {kSampleBytes}}, {"y", ferry::DType::i64, {}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    std::memcpy(out.data(0), data_.data() + index * kBytes, kBytes);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index);
  }

 private:
  static constexpr auto kBytes = static_cast<std::size_t>(kSampleBytes);
  std::size_t n_;
  int sleep_us_;
  std::vector<std::uint8_t> data_;
};

void spin(std::chrono::nanoseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

struct Result {
  double samples_per_s = 0;
  std::uint64_t peak_bytes = 0;
  int workers = 0, prefetch = 0;  // at the end
};

// One run of `batches` batches (epochs wrap) on a fresh loader.
Result run(const std::shared_ptr<const ferry::Dataset>& ds, ferry::LoaderOptions o,
           std::size_t batches, std::chrono::nanoseconds compute) {
  ferry::Loader loader(ds, o);
  Result r;
  std::size_t k = 0, samples = 0;
  Clock::time_point half;
  volatile std::uint8_t sink = 0;
  for (std::uint64_t e = 0; k < batches; ++e) {
    for (const ferry::Batch& b : loader.epoch(e)) {
      sink = sink + *static_cast<const std::uint8_t*>(b["x"].data());
      if (compute.count() > 0) spin(compute);
      r.peak_bytes = std::max(r.peak_bytes, loader.stats().memory_bytes);
      ++k;
      if (k == batches / 2) half = Clock::now();
      if (k > batches / 2) samples += b.size();
      if (k == batches) break;
    }
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - half).count();
  r.samples_per_s = static_cast<double>(samples) / seconds;
  const ferry::LoaderStats s = loader.stats();
  r.workers = s.workers;
  r.prefetch = s.prefetch;
  return r;
}

template <class T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      quick = true;
      rounds = 1;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: autotune [--quick] [--rounds R]\n");
      return 2;
    }
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::size_t batch = 32;
  const std::vector<int> depths = {2, 4, 8, 16};

  struct Workload {
    const char* name;
    std::shared_ptr<const ferry::Dataset> ds;
    bool compute;
    std::size_t batches;
  };
  auto memory = std::make_shared<BenchDataset>(4096, 0);
  auto slow = std::make_shared<BenchDataset>(4096, 200);
  const std::size_t fast_batches = quick ? 200 : 1000;
  const std::size_t slow_batches = quick ? 60 : 240;
  std::vector<Workload> workloads = {{"memory, consumer none", memory, false, fast_batches},
                                     {"memory, consumer compute", memory, true, fast_batches},
                                     {"slow read, consumer none", slow, false, slow_batches},
                                     {"slow read, consumer compute", slow, true, slow_batches}};

  ferry::LoaderOptions base;
  base.batch_size = batch;
  base.shuffle = true;
  base.device = ferry::Device::cpu();

  std::printf("autotune bench: %d cores, batch %zu of %lld-byte samples, %d round(s)\n", cores,
              batch, static_cast<long long>(kSampleBytes), rounds);
  std::printf("%-28s | %-14s %10s %9s | %-10s %10s %6s | %9s %9s %9s\n", "workload", "best grid",
              "samples/s", "MiB", "autotune", "samples/s", "/best", "peak MiB", "budget",
              "grid MiB");
  for (const Workload& w : workloads) {
    // The compute consumer spins 1.5x what one worker takes to load a batch (measured here).
    std::chrono::nanoseconds compute{0};
    if (w.compute) {
      ferry::LoaderOptions one = base;
      one.workers = 1;
      one.prefetch = 4;
      const Result r = run(w.ds, one, w.batches / 4, {});
      compute = std::chrono::nanoseconds(
          static_cast<std::int64_t>(1.5e9 * static_cast<double>(batch) / r.samples_per_s));
    }
    ferry::LoaderOptions budget_options = base;
    budget_options.workers = cores;
    budget_options.prefetch = 8;
    const std::uint64_t budget = ferry::Loader(w.ds, budget_options).stats().memory_bytes;

    struct Point {
      int workers, prefetch;
      std::vector<double> rates;
      std::uint64_t bytes = 0;
    };
    std::vector<Point> grid;
    for (int wk = 1; wk <= cores; ++wk) {
      for (const int p : depths) grid.push_back({wk, p, {}, 0});
    }
    std::vector<double> tuned_rates;
    std::vector<std::uint64_t> tuned_peaks;
    std::vector<int> tuned_w, tuned_p;
    for (int round = 0; round < rounds; ++round) {
      for (Point& p : grid) {
        ferry::LoaderOptions o = base;
        o.workers = p.workers;
        o.prefetch = p.prefetch;
        const Result r = run(w.ds, o, w.batches, compute);
        p.rates.push_back(r.samples_per_s);
        p.bytes = r.peak_bytes;
      }
      ferry::LoaderOptions o = base;
      o.autotune = true;
      o.workers = 1;
      o.prefetch = 2;
      o.memory_budget = budget;
      const Result r = run(w.ds, o, w.batches, compute);
      tuned_rates.push_back(r.samples_per_s);
      tuned_peaks.push_back(r.peak_bytes);
      tuned_w.push_back(r.workers);
      tuned_p.push_back(r.prefetch);
    }
    const Point* best = &grid.front();
    for (const Point& p : grid) {
      if (median(p.rates) > median(best->rates)) best = &p;
    }
    const double mib = 1024.0 * 1024.0;
    const double tuned = median(tuned_rates);
    char best_name[32], tuned_name[32];
    std::snprintf(best_name, sizeof best_name, "w%d p%d", best->workers, best->prefetch);
    std::snprintf(tuned_name, sizeof tuned_name, "w%d p%d", median(tuned_w), median(tuned_p));
    std::printf("%-28s | %-14s %10.0f %9.2f | %-10s %10.0f %6.2f | %9.2f %9.2f %9.2f\n", w.name,
                best_name, median(best->rates), static_cast<double>(best->bytes) / mib, tuned_name,
                tuned, tuned / median(best->rates), static_cast<double>(median(tuned_peaks)) / mib,
                static_cast<double>(budget) / mib, static_cast<double>(best->bytes) / mib);
    std::fflush(stdout);
  }
  std::printf(
      "best grid: the fastest of workers 1..%d x prefetch 2/4/8/16 (median samples/s); "
      "autotune: its final choice, steady-state rate, and peak memory_bytes; budget: the "
      "memory of workers %d, prefetch 8\n",
      cores, cores);
  return 0;
}
