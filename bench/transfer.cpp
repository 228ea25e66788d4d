// bench/transfer: host <-> GPU bandwidth, ferry against raw CUDA.
//
// For each size it measures
//   raw pinned     cudaMemcpyAsync on a stream from/to cudaHostAlloc memory, timed with CUDA
//                  events: the peak the bus gives;
//   raw pageable   the same from/to malloc memory;
//   ferry pinned   Tensor::to(Device::cuda(), true) of a pin_memory() tensor + synchronize(),
//                  and back with to(Device::cpu(), true) + synchronize() (pinned pool memory);
//   ferry pageable Tensor::to(Device::cuda()) of an ordinary tensor, and back with cpu();
// ferry is timed on the host clock from the call until its result is complete (allocation of the
// result included, as a caller waits for it; its release is not). Each figure is the median of N
// repetitions after 2 warm-up runs.
//
// Usage: transfer [--quick] [--reps N]. Without a usable GPU it says why and exits 0.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

constexpr std::size_t kKiB = 1024;
constexpr std::size_t kMiB = 1024 * kKiB;

/// Throws std::runtime_error naming `what` and CUDA's error text unless `status` is success.
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(status) + ": " +
                             cudaGetErrorString(status));
  }
}

/// Command-line options.
struct Options {
  bool quick = false;
  int reps = 0;  ///< 0: the default for the mode
};

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
    } else if (arg == "--help" || arg == "-h") {
      std::printf("usage: transfer [--quick] [--reps N]\n");
      std::exit(0);
    } else {
      throw std::invalid_argument("unknown option " + std::string(arg) +
                                  "; usage: transfer [--quick] [--reps N]");
    }
  }
  return o;
}

/// "64 KiB", "256 MiB".
std::string size_text(std::size_t n) {
  if (n >= kMiB) return std::to_string(n / kMiB) + " MiB";
  return std::to_string(n / kKiB) + " KiB";
}

/// The median of `v` (v is reordered).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

/// The CUDA resources of the raw measurements, freed by the destructor (a failure inside the
/// constructor ends the program, and the process exit frees them then).
struct Raw {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  void* pinned_src = nullptr;
  void* pinned_dst = nullptr;
  void* device = nullptr;
  std::vector<unsigned char> pageable_src;
  std::vector<unsigned char> pageable_dst;

  explicit Raw(std::size_t max_bytes) : pageable_src(max_bytes, 0x5a), pageable_dst(max_bytes, 0) {
    check(cudaSetDevice(0), "cudaSetDevice(0)");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    check(cudaHostAlloc(&pinned_src, max_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    check(cudaHostAlloc(&pinned_dst, max_bytes, cudaHostAllocDefault), "cudaHostAlloc");
    std::memset(pinned_src, 0xa5, max_bytes);
    std::memset(pinned_dst, 0, max_bytes);
    check(cudaMalloc(&device, max_bytes), "cudaMalloc");
  }
  Raw(const Raw&) = delete;
  Raw& operator=(const Raw&) = delete;
  ~Raw() {
    if (device != nullptr) (void)cudaFree(device);
    if (pinned_dst != nullptr) (void)cudaFreeHost(pinned_dst);
    if (pinned_src != nullptr) (void)cudaFreeHost(pinned_src);
    if (stop != nullptr) (void)cudaEventDestroy(stop);
    if (start != nullptr) (void)cudaEventDestroy(start);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  /// Seconds one cudaMemcpyAsync of `n` bytes takes on the stream, by CUDA events.
  double copy_seconds(void* dst, const void* src, std::size_t n, cudaMemcpyKind kind) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    check(cudaMemcpyAsync(dst, src, n, kind, stream), "cudaMemcpyAsync");
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return static_cast<double>(ms) / 1e3;
  }
};

/// Seconds that `make` takes on the host clock, up to the moment its result is complete. The
/// result is released after the clock stops: its allocation is timed, its release is not.
double ferry_seconds(const std::function<ferry::Tensor()>& make) {
  ferry::Tensor result;
  const auto t0 = std::chrono::steady_clock::now();
  result = make();
  result.synchronize();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

/// The median GB/s of `reps` runs of `seconds_of_one` moving `n` bytes, after `warmup` runs.
double median_gbps(std::size_t n, int warmup, int reps,
                   const std::function<double()>& seconds_of_one) {
  for (int i = 0; i < warmup; ++i) (void)seconds_of_one();
  std::vector<double> gbps;
  gbps.reserve(static_cast<std::size_t>(reps));
  for (int i = 0; i < reps; ++i) {
    const double s = seconds_of_one();
    gbps.push_back(s > 0 ? static_cast<double>(n) / s / 1e9 : 0.0);
  }
  return median(std::move(gbps));
}

/// One row of the table.
struct Row {
  std::size_t bytes = 0;
  double raw_pinned_h2d = 0, raw_pinned_d2h = 0;
  double raw_pageable_h2d = 0, raw_pageable_d2h = 0;
  double ferry_pinned_h2d = 0, ferry_pinned_d2h = 0;
  double ferry_pageable_h2d = 0, ferry_pageable_d2h = 0;
};

Row measure(Raw& raw, std::size_t n, int reps) {
  using ferry::Device;
  using ferry::Tensor;
  const int warmup = 2;
  Row r;
  r.bytes = n;
  r.raw_pinned_h2d = median_gbps(n, warmup, reps, [&] {
    return raw.copy_seconds(raw.device, raw.pinned_src, n, cudaMemcpyHostToDevice);
  });
  r.raw_pinned_d2h = median_gbps(n, warmup, reps, [&] {
    return raw.copy_seconds(raw.pinned_dst, raw.device, n, cudaMemcpyDeviceToHost);
  });
  r.raw_pageable_h2d = median_gbps(n, warmup, reps, [&] {
    return raw.copy_seconds(raw.device, raw.pageable_src.data(), n, cudaMemcpyHostToDevice);
  });
  r.raw_pageable_d2h = median_gbps(n, warmup, reps, [&] {
    return raw.copy_seconds(raw.pageable_dst.data(), raw.device, n, cudaMemcpyDeviceToHost);
  });

  const auto numel = static_cast<std::int64_t>(n);
  Tensor pageable = Tensor::empty({numel}, ferry::DType::u8);
  std::memset(pageable.data(), 0x3c, n);
  const Tensor pinned = pageable.pin_memory();
  const Tensor on_gpu = pageable.to(Device::cuda());

  r.ferry_pinned_h2d = median_gbps(n, warmup, reps, [&] {
    return ferry_seconds([&] { return pinned.to(Device::cuda(), /*non_blocking=*/true); });
  });
  r.ferry_pinned_d2h = median_gbps(n, warmup, reps, [&] {
    return ferry_seconds([&] { return on_gpu.to(Device::cpu(), /*non_blocking=*/true); });
  });
  r.ferry_pageable_h2d = median_gbps(
      n, warmup, reps, [&] { return ferry_seconds([&] { return pageable.to(Device::cuda()); }); });
  r.ferry_pageable_d2h =
      median_gbps(n, warmup, reps, [&] { return ferry_seconds([&] { return on_gpu.cpu(); }); });
  return r;
}

int run(const Options& options) {
  if (ferry::cuda_device_count() == 0) {
    std::printf("transfer: no usable GPU: %s; nothing measured\n",
                ferry::cuda_unavailable_reason().c_str());
    return 0;
  }
  std::vector<std::size_t> sizes = {64 * kKiB, 256 * kKiB, 1 * kMiB,  4 * kMiB,
                                    16 * kMiB, 64 * kMiB,  256 * kMiB};
  if (options.quick) sizes = {1 * kMiB, 64 * kMiB, 256 * kMiB};
  const int reps = options.reps > 0 ? options.reps : (options.quick ? 5 : 20);

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf(
      "transfer: %s (PCI %04x:%02x:%02x), ferry %s; median of %d repetitions after 2 "
      "warm-up runs\n",
      prop.name, static_cast<unsigned>(prop.pciDomainID), static_cast<unsigned>(prop.pciBusID),
      static_cast<unsigned>(prop.pciDeviceID), ferry::kVersion, reps);
  std::printf(
      "raw: cudaMemcpyAsync timed by CUDA events; ferry: Tensor::to timed on the host "
      "clock, result allocation included\n");
  std::printf(
      "GB/s = 1e9 bytes/s. pinned D2H for ferry: to(cpu, non_blocking) + synchronize; "
      "pageable D2H: cpu()\n\n");

  Raw raw(sizes.back());
  std::printf("%9s | %-25s | %-25s | %-25s | %-25s | %s\n", "", "raw pinned (peak)", "raw pageable",
              "ferry pinned", "ferry pageable", "ferry/peak");
  std::printf("%9s | %12s %12s | %12s %12s | %12s %12s | %12s %12s | %6s %6s\n", "size", "H2D",
              "D2H", "H2D", "D2H", "H2D", "D2H", "H2D", "D2H", "H2D", "D2H");
  std::vector<Row> rows;
  for (const std::size_t n : sizes) {
    const Row r = measure(raw, n, reps);
    rows.push_back(r);
    std::printf(
        "%9s | %12.2f %12.2f | %12.2f %12.2f | %12.2f %12.2f | %12.2f %12.2f | %6.2f %6.2f\n",
        size_text(n).c_str(), r.raw_pinned_h2d, r.raw_pinned_d2h, r.raw_pageable_h2d,
        r.raw_pageable_d2h, r.ferry_pinned_h2d, r.ferry_pinned_d2h, r.ferry_pageable_h2d,
        r.ferry_pageable_d2h, r.ferry_pinned_h2d / r.raw_pinned_h2d,
        r.ferry_pinned_d2h / r.raw_pinned_d2h);
    std::fflush(stdout);
  }
  const Row& last = rows.back();
  std::printf(
      "\nsummary: at %s, ferry pinned H2D %.1f GB/s = %.0f%% of the %.1f GB/s peak, D2H "
      "%.1f GB/s = %.0f%% of %.1f GB/s; pageable H2D %.1f GB/s (raw %.1f); %d reps, "
      "medians\n",
      size_text(last.bytes).c_str(), last.ferry_pinned_h2d,
      100.0 * last.ferry_pinned_h2d / last.raw_pinned_h2d, last.raw_pinned_h2d,
      last.ferry_pinned_d2h, 100.0 * last.ferry_pinned_d2h / last.raw_pinned_d2h,
      last.raw_pinned_d2h, last.ferry_pageable_h2d, last.raw_pageable_h2d, reps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "transfer: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "transfer: failed: %s\n", e.what());
    return 1;
  }
}
