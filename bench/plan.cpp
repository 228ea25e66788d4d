// bench/plan: planning one epoch of dynamic batches (LoaderOptions::max_tokens), the planner's
// own cost: time and heap, without reading any sample.
//
// A dataset of --samples ragged samples (default 10^7) whose lengths, 1..512 tokens, come from
// a hash of the index (about 100 tokens on average; nothing is stored), planned by the loader's
// EpochPlan for rank 0 of --world ranks (default 1): the plan is made, then every batch of the
// rank is asked for its indices, as the planner thread does over an epoch. Configurations:
//   budget   shuffle, pack, max_tokens = 8192, batch_size = 256
//   bucket   the same with bucket_window = 4096
// Reported per configuration: seconds (median of --reps runs, default 3; "made in": of them, the
// plan's construction, its counting walk, before the first batch), the peak of the heap
// bytes live during the plan above those live before it (counted by a replaced operator new, so
// the planner's own allocations are measured whatever the allocator keeps), and the process's
// peak RSS (getrusage; the dataset holds nothing, so this is the plan's plus the program's).
//
// --workers W (default 0: one per core) is LoaderOptions::workers: the threads the counting walk
// plans windows on.
//
// Usage: plan [--samples N] [--world W] [--workers W] [--reps N] [--only budget|bucket]

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/ferry.hpp"
#include "pipeline/epoch_plan.hpp"
#include "pipeline/sampler.hpp"

namespace {

std::atomic<std::uint64_t> g_live{0};
std::atomic<std::uint64_t> g_peak{0};

// Each block carries its size in front, so delete knows what leaves.
constexpr std::size_t kHeader = alignof(std::max_align_t);

void* counted_new(std::size_t n) {
  void* p = std::malloc(n + kHeader);
  if (p == nullptr) throw std::bad_alloc();
  *static_cast<std::size_t*>(p) = n;
  const std::uint64_t live = g_live.fetch_add(n) + n;
  std::uint64_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(p) + kHeader;
}

void counted_delete(void* p) noexcept {
  if (p == nullptr) return;
  void* block = static_cast<char*>(p) - kHeader;
  g_live.fetch_sub(*static_cast<std::size_t*>(block));
  std::free(block);
}

}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t /*n*/) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t /*n*/) noexcept { counted_delete(p); }

namespace {

using Clock = std::chrono::steady_clock;

/// Lengths only: 1..512, most short, from a hash of the index.
class Lengths : public ferry::Dataset {
 public:
  explicit Lengths(std::size_t n) : n_(n) {}
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"tokens", ferry::DType::i32, {ferry::ragged}}};
  }
  std::int64_t length(std::size_t index, std::size_t /*field*/) const override {
    const std::uint64_t h = ferry::detail::mix64(index) % 1000;
    if (h < 800) return 1 + static_cast<std::int64_t>(h % 80);
    return 80 + static_cast<std::int64_t>((h * 7) % 433);
  }
  void read(std::size_t /*index*/, ferry::SampleRef /*out*/) const override {}

 private:
  std::size_t n_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

volatile std::uint64_t g_sink = 0;

struct Result {
  double seconds = 0;
  double made_seconds = 0;  // the plan made (the counting walk): before the first batch
  std::uint64_t peak_bytes = 0;
  std::size_t batches = 0;
  std::uint64_t samples = 0;
};

Result plan_once(const Lengths& data, const ferry::LoaderOptions& o) {
  const std::uint64_t before = g_live.load();
  g_peak.store(before);
  const auto start = Clock::now();
  Result r;
  {
    ferry::detail::EpochPlan plan(data, 0, o, 1);
    r.made_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::vector<std::uint64_t> batch;
    batch.reserve(o.batch_size);
    r.batches = plan.batches();
    for (std::size_t k = 0; k < r.batches; ++k) {
      plan.batch(k, batch);
      r.samples += batch.size();
      g_sink = g_sink + batch.front();
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.peak_bytes = g_peak.load() - before;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t samples = 10'000'000;
  int world = 1;
  int workers = 0;
  int reps = 3;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--samples") samples = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--world") world = std::atoi(argv[i + 1]);
    if (a == "--workers") workers = std::atoi(argv[i + 1]);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--only") only = argv[i + 1];
  }
  const Lengths data(samples);
  std::printf("plan: %zu samples, rank 0 of %d, workers %d, %d runs each\n", samples, world,
              workers, reps);
  for (const std::string name : {"budget", "bucket"}) {
    if (!only.empty() && only != name) continue;
    ferry::LoaderOptions o;
    o.autotune = false;  // the settings this bench states, fixed
    o.batch_size = 256;
    o.shuffle = true;
    o.seed = 7;
    o.ragged = ferry::RaggedBatch::pack;
    o.max_tokens = 8192;
    o.world_size = world;
    o.workers = workers;
    o.device = ferry::Device::cpu();
    if (name == "bucket") o.bucket_window = 4096;
    std::vector<double> seconds;
    std::vector<double> peaks;
    std::vector<double> made;
    Result last;
    for (int r = 0; r < reps; ++r) {
      last = plan_once(data, o);
      seconds.push_back(last.seconds);
      made.push_back(last.made_seconds);
      peaks.push_back(static_cast<double>(last.peak_bytes));
    }
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf(
        "%-7s %9.3f s (made in %.3f s)  peak heap %10.1f MB (%.2f B/sample)  batches %zu  "
        "samples %llu  max RSS %.1f MB\n",
        name.c_str(), median(seconds), median(made), median(peaks) / 1e6,
        median(peaks) / double(samples), last.batches,
        static_cast<unsigned long long>(last.samples), static_cast<double>(usage.ru_maxrss) / 1e3);
  }
  return 0;
}
