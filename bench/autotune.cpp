// bench/autotune: LoaderOptions::autotune against the best fixed setting of a grid.
//
// Workloads (batch 32, shuffle, CPU), each with two consumers:
//   memory     16 KiB samples copied from a buffer in memory;
//   png        an ImageFolder of 4,000 gray 28 × 28 PNGs (libspng), read as they are;
//   jpeg       an ImageFolder of 1,000 RGB 160 × 120 JPEGs (TurboJPEG, quality 90), read at
//              112 × 112 (resize, center crop);
//   tokens     TokenDataset windows of 1,024 tokens (i64 input and target) from one llm.c shard
//              of 8 M u16 tokens.
// The files are written into a temporary folder (or --dir) by the bench itself.
// Consumers: "none" touches one byte per batch; "compute" spins on the clock per batch for 1.5×
// the time one worker takes to load a batch (measured first), made longer (by a quarter at a
// time) until workers 1, prefetch 2 delivers at least 0.97 of the consumer's rate with it:
// compute-bound at every setting, checked at the smallest.
// For each of the workloads:
//   grid      workers 1..cores × prefetch 2, 4, 8, 16, autotune off;
//   autotune  autotune on, from workers 1 and prefetch 2, memory_budget = the memory of the
//             fixed setting (cores workers, prefetch 16).
// A run lasts S seconds (--seconds, 1.0) on a fresh loader (epochs wrap); its throughput is the
// steady state: samples/s over its second half (by time), so autotune's settling lies in the
// first. Memory is the peak of LoaderStats::memory_bytes, sampled every millisecond by a second
// thread (the consumer's loop only takes batches). Every
// figure is the median of R rounds (--rounds, 5); the configurations of a round run one after
// another, autotune between the grid's halves, so a noisy stretch hits them alike.
// --history prints the decisions of the last autotune run of each workload; --grid the median of
// every grid point; --trace FILE writes
// one autotune run of --trace-workload (jpeg, consumer none) batch by batch as CSV (time, batches,
// samples, workers, prefetch, memory), the input of bench/plot-autotune.
//
// Usage: autotune [--quick] [--rounds R] [--seconds S] [--only NAME] [--history] [--grid]
//                 [--trace FILE] [--trace-workload NAME] [--dir DIR]

#include <spng.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;

constexpr std::int64_t kSampleBytes = 16 * 1024;

class BenchDataset : public ferry::Dataset {
 public:
  BenchDataset(std::size_t n, int sleep_us = 0) : n_(n), sleep_us_(sleep_us), data_(n * kBytes) {
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

// ---- the files ---------------------------------------------------------------------------

struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
};

void write_file(const fs::path& p, const void* data, std::size_t n) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!out) throw std::runtime_error("cannot write " + p.string());
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

// Writes the folders and the shard under `root` (unless they are there); returns the shard.
fs::path write_data(const fs::path& root) {
  const fs::path png = root / "png", jpeg = root / "jpeg", shard = root / "tokens.bin";
  if (!fs::exists(png / "done")) {
    for (int i = 0; i < 4000; ++i) {
      Rng rng{static_cast<std::uint64_t>(i) * 2654435761U + 1};
      Bytes px(28 * 28);
      const int cx = static_cast<int>(rng.next() % 20) + 4,
                cy = static_cast<int>(rng.next() % 20) + 4;
      for (int y = 0; y < 28; ++y) {
        for (int x = 0; x < 28; ++x) {
          const int d = std::abs(x - cx) + std::abs(y - cy);
          px[static_cast<std::size_t>(y * 28 + x)] =
              d < 9 ? static_cast<std::uint8_t>(255 - 25 * d + static_cast<int>(rng.next() % 20))
                    : 0;
        }
      }
      std::string class_name = "c";
      class_name += std::to_string(i % 10);
      const fs::path dir = png / class_name;
      fs::create_directories(dir);
      const Bytes f = encode_png_gray(px, 28, 28);
      write_file(dir / (std::to_string(i) + ".png"), f.data(), f.size());
    }
    write_file(png / "done", "", 0);
  }
  if (!fs::exists(jpeg / "done")) {
    constexpr int kW = 160, kH = 120;
    for (int i = 0; i < 1000; ++i) {
      Rng rng{static_cast<std::uint64_t>(i) * 40503U + 7};
      Bytes px(kW * kH * 3);
      const double a = static_cast<double>(rng.next() % 628) / 100;
      for (int y = 0; y < kH; ++y) {
        for (int x = 0; x < kW; ++x) {
          for (int c = 0; c < 3; ++c) {
            const double v = 128 + 90 * std::sin(a * c + 0.07 * x * std::cos(a) + 0.05 * y) +
                             static_cast<double>(rng.next() % 41) - 20;
            px[static_cast<std::size_t>((y * kW + x) * 3 + c)] =
                static_cast<std::uint8_t>(std::clamp(v, 0.0, 255.0));
          }
        }
      }
      std::string class_name = "c";
      class_name += std::to_string(i % 8);
      const fs::path dir = jpeg / class_name;
      fs::create_directories(dir);
      const Bytes f = encode_jpeg(px, kW, kH);
      write_file(dir / (std::to_string(i) + ".jpg"), f.data(), f.size());
    }
    write_file(jpeg / "done", "", 0);
  }
  if (!fs::exists(shard)) {
    constexpr std::size_t kTokens = std::size_t{8} << 20;
    std::vector<std::int32_t> header(256, 0);
    header[0] = 20240520;  // llm.c's magic, version 1, the token count
    header[1] = 1;
    header[2] = static_cast<std::int32_t>(kTokens);
    std::vector<std::uint16_t> tokens(kTokens);
    Rng rng{12345};
    for (auto& t : tokens) t = static_cast<std::uint16_t>(rng.next() % 50257);
    std::ofstream out(shard, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()),
              static_cast<std::streamsize>(header.size() * 4));
    out.write(reinterpret_cast<const char*>(tokens.data()),
              static_cast<std::streamsize>(tokens.size() * 2));
    if (!out) throw std::runtime_error("cannot write " + shard.string());
  }
  return shard;
}

// ---- runs --------------------------------------------------------------------------------

void spin(std::chrono::nanoseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

struct Trace {
  std::vector<double> t;
  std::vector<std::uint64_t> samples, memory;
  std::vector<int> workers, prefetch;
};

struct Result {
  double samples_per_s = 0;
  std::uint64_t peak_bytes = 0;
  int workers = 0, prefetch = 0;  // at the end
  std::vector<ferry::AutotuneDecision> decisions;
};

// One run of `seconds` on a fresh loader (epochs wrap); the rate of its second half. A second
// thread samples stats() every millisecond (memory, choices; the trace), so that the consumer's
// loop does nothing but take batches and compute.
Result run(const std::shared_ptr<const ferry::Dataset>& ds, ferry::LoaderOptions o, double seconds,
           std::chrono::nanoseconds compute, Trace* trace = nullptr) {
  ferry::Loader loader(ds, o);
  const std::string field = ds->fields().front().name;
  Result r;
  const auto start = Clock::now();
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      const ferry::LoaderStats s = loader.stats();
      r.peak_bytes = std::max(r.peak_bytes, s.memory_bytes);
      if (trace != nullptr) {
        trace->t.push_back(std::chrono::duration<double>(Clock::now() - start).count());
        trace->samples.push_back(s.samples);
        trace->memory.push_back(s.memory_bytes);
        trace->workers.push_back(s.workers);
        trace->prefetch.push_back(s.prefetch);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::size_t samples = 0;
  const auto half = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds / 2));
  const auto end =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  Clock::time_point from{};
  volatile std::uint8_t sink = 0;
  bool done = false;
  for (std::uint64_t e = 0; !done; ++e) {
    for (const ferry::Batch& b : loader.epoch(e)) {
      sink = sink + *static_cast<const std::uint8_t*>(b[field].data());
      if (compute.count() > 0) spin(compute);
      const auto now = Clock::now();
      if (now >= half) {
        if (from == Clock::time_point{}) {
          from = now;
        } else {
          samples += b.size();
        }
      }
      if (now >= end) {
        done = true;
        break;
      }
    }
  }
  const auto stop = Clock::now();
  sampling.store(false);
  sampler.join();
  r.samples_per_s =
      static_cast<double>(samples) / std::chrono::duration<double>(stop - from).count();
  const ferry::LoaderStats s = loader.stats();
  r.peak_bytes = std::max(r.peak_bytes, s.memory_bytes);
  r.workers = s.workers;
  r.prefetch = s.prefetch;
  r.decisions = s.autotune_decisions;
  return r;
}

template <class T>
T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) try {
  int rounds = 5;
  double seconds = 1.0;
  bool history = false;
  bool show_grid = false;
  std::string only, trace_file, trace_workload = "jpeg, consumer none";
  fs::path dir;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool more = i + 1 < argc;
    if (a == "--quick") {
      rounds = 1;
      seconds = 0.5;
    } else if (a == "--rounds" && more) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--seconds" && more) {
      seconds = std::max(0.1, std::atof(argv[++i]));
    } else if (a == "--only" && more) {
      only = argv[++i];
    } else if (a == "--history") {
      history = true;
    } else if (a == "--grid") {
      show_grid = true;
    } else if (a == "--trace" && more) {
      trace_file = argv[++i];
    } else if (a == "--trace-workload" && more) {
      trace_workload = argv[++i];
    } else if (a == "--dir" && more) {
      dir = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: autotune [--quick] [--rounds R] [--seconds S] [--only NAME] "
                   "[--history] [--grid] [--trace FILE] [--trace-workload NAME] [--dir DIR]\n");
      return 2;
    }
  }
  if (dir.empty()) dir = fs::temp_directory_path() / "ferry-bench-autotune";
  fs::create_directories(dir);
  const fs::path shard = write_data(dir);

  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const std::size_t batch = 32;
  const std::vector<int> depths = {2, 4, 8, 16};

  ferry::ImageOptions png_options;
  png_options.height = png_options.width = 28;
  png_options.channels = 1;
  ferry::ImageOptions jpeg_options;
  jpeg_options.height = jpeg_options.width = 112;
  jpeg_options.channels = 3;
  std::vector<std::pair<std::string, std::shared_ptr<const ferry::Dataset>>> sets = {
      {"memory", std::make_shared<BenchDataset>(4096, 0)},
      {"png", ferry::ImageFolder::open(dir / "png", png_options)},
      {"jpeg", ferry::ImageFolder::open(dir / "jpeg", jpeg_options)},
      {"tokens", ferry::TokenDataset::open({shard})}};

  ferry::LoaderOptions base;
  base.batch_size = batch;
  base.shuffle = true;
  base.device = ferry::Device::cpu();
  base.autotune = false;  // the grid: fixed settings (autotune: `tuned` below)

  std::printf("autotune bench: %d cores, batch %zu, %d round(s) of %.2f s runs\n", cores, batch,
              rounds, seconds);
  std::printf("%-28s | %-8s %10s %8s | %-8s %10s %6s | %8s %8s | %s\n", "workload", "best",
              "samples/s", "MiB", "autotune", "samples/s", "/best", "peak MiB", "budget",
              "rounds' own ratios");
  for (const auto& [set_name, ds] : sets) {
    for (const bool compute_bound : {false, true}) {
      const std::string name =
          set_name + (compute_bound ? ", consumer compute" : ", consumer none");
      if (!only.empty() && name.find(only) == std::string::npos) continue;
      // The compute consumer spins 1.5x what one worker takes to load a batch (measured here),
      // and more where that does not make it set the pace: at the smallest setting (workers 1,
      // prefetch 2, where autotune starts), whose loader shares the cores with the spinning
      // consumer, the batches must come at least kPaced times as fast as the consumer takes
      // them; else the spin grows by a quarter and is checked again (at most kChecks times).
      std::chrono::nanoseconds compute{0};
      if (compute_bound) {
        ferry::LoaderOptions one = base;
        one.workers = 1;
        one.prefetch = 4;
        const Result r = run(ds, one, seconds / 2, {});
        double spin_s = 1.5 * static_cast<double>(batch) / r.samples_per_s;
        constexpr double kPaced = 0.97;
        constexpr int kChecks = 6;
        ferry::LoaderOptions smallest = base;
        smallest.workers = 1;
        smallest.prefetch = 2;
        for (int check = 0;; ++check) {
          compute = std::chrono::nanoseconds(static_cast<std::int64_t>(spin_s * 1e9));
          const double consumer_rate = static_cast<double>(batch) / spin_s;
          const Result paced = run(ds, smallest, seconds / 2, compute);
          const bool ok = paced.samples_per_s >= kPaced * consumer_rate;
          std::printf(
              "    compute: spin %.1f us a batch (the consumer's rate %.0f samples/s); w1 p2 "
              "gave %.0f samples/s (%.2f of it)%s\n",
              spin_s * 1e6, consumer_rate, paced.samples_per_s, paced.samples_per_s / consumer_rate,
              ok ? ": the consumer sets the pace"
                 : (check + 1 < kChecks ? ": spin +25%" : ": NOT consumer-paced"));
          if (ok || check + 1 == kChecks) break;
          spin_s *= 1.25;
        }
      }
      ferry::LoaderOptions budget_options = base;
      budget_options.workers = cores;
      budget_options.prefetch = 16;
      const std::uint64_t budget = ferry::Loader(ds, budget_options).stats().memory_bytes;

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
      std::vector<double> paired;  // each round: autotune / the round's best grid point
      Result last;
      ferry::LoaderOptions tuned = base;
      tuned.autotune = true;
      tuned.workers = 1;
      tuned.prefetch = 2;
      tuned.memory_budget = budget;
      for (int round = 0; round < rounds; ++round) {
        // Autotune runs at a different place in the grid each round.
        const std::size_t at =
            (static_cast<std::size_t>(round) * 3 + grid.size() / 2) % (grid.size() + 1);
        double round_best = 0;
        for (std::size_t g = 0; g <= grid.size(); ++g) {
          if (g == at) {
            last = run(ds, tuned, seconds, compute);
            tuned_rates.push_back(last.samples_per_s);
            tuned_peaks.push_back(last.peak_bytes);
            tuned_w.push_back(last.workers);
            tuned_p.push_back(last.prefetch);
          }
          if (g == grid.size()) break;
          Point& p = grid[g];
          ferry::LoaderOptions o = base;
          o.workers = p.workers;
          o.prefetch = p.prefetch;
          const Result r = run(ds, o, seconds, compute);
          p.rates.push_back(r.samples_per_s);
          p.bytes = r.peak_bytes;
          round_best = std::max(round_best, r.samples_per_s);
        }
        paired.push_back(tuned_rates.back() / round_best);
      }
      const Point* best = &grid.front();
      for (const Point& p : grid) {
        if (median(p.rates) > median(best->rates)) best = &p;
      }
      const double mib = 1024.0 * 1024.0;
      const double rate = median(tuned_rates);
      char best_name[32], tuned_name[32];
      std::snprintf(best_name, sizeof best_name, "w%d p%d", best->workers, best->prefetch);
      std::snprintf(tuned_name, sizeof tuned_name, "w%d p%d", median(tuned_w), median(tuned_p));
      std::string ratios;
      for (const double x : paired) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%s%.2f", ratios.empty() ? "" : " ", x);
        ratios += buf;
      }
      std::printf("%-28s | %-8s %10.0f %8.2f | %-8s %10.0f %6.2f | %8.2f %8.2f | %s\n",
                  name.c_str(), best_name, median(best->rates),
                  static_cast<double>(best->bytes) / mib, tuned_name, rate,
                  rate / median(best->rates), static_cast<double>(median(tuned_peaks)) / mib,
                  static_cast<double>(budget) / mib, ratios.c_str());
      if (show_grid) {
        std::string line = "    grid medians (samples/s):";
        for (const Point& p : grid) {
          char buf[48];
          std::snprintf(buf, sizeof buf, " w%d p%d %.0f", p.workers, p.prefetch, median(p.rates));
          line += buf;
        }
        std::printf("%s\n", line.c_str());
      }
      if (history) {
        for (const ferry::AutotuneDecision& d : last.decisions) {
          std::printf("    batch %6llu: w%d p%d  %s\n", static_cast<unsigned long long>(d.batch),
                      d.workers, d.prefetch, d.reason.c_str());
        }
      }
      std::fflush(stdout);
      if (!trace_file.empty() && name == trace_workload) {
        Trace trace;
        static_cast<void>(run(ds, tuned, seconds * 2, compute, &trace));
        std::ofstream out(trace_file);
        out << "# bench/autotune --trace: " << name << ", " << cores
            << " cores, autotune from w1 p2, budget " << budget << " bytes\n";
        out << "seconds,samples,workers,prefetch,memory_bytes\n";
        for (std::size_t i = 0; i < trace.t.size(); ++i) {
          out << trace.t[i] << ',' << trace.samples[i] << ',' << trace.workers[i] << ','
              << trace.prefetch[i] << ',' << trace.memory[i] << '\n';
        }
        if (!out) throw std::runtime_error("cannot write " + trace_file);
      }
    }
  }
  std::printf(
      "best: the fastest of workers 1..%d x prefetch 2/4/8/16 (median samples/s of the second "
      "half of each run); autotune: its median final choice, steady-state rate and peak "
      "memory_bytes; budget: the memory of workers %d, prefetch 16\n",
      cores, cores);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "autotune: %s\n", e.what());
  return 1;
}
