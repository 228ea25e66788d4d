// bench/gpu/loader: the loader on a real GPU, against what the bus and the GPU allow.
//
//   1. transfer: batches of 128 ImageNet-sized uint8 images (150,528 bytes each) from a host
//      TensorDataset to cuda:0, the consumer doing nothing: the loader's GB/s against
//      cudaMemcpyAsync's peak from pinned memory for the same batch size (target >= 0.9), with
//      pinned and with pageable staging.
//   2. overlap: the same with a kernel of fixed length per batch on the consumer's stream
//      (0.5x, 1.5x and 3x the batch's copy time): the GPU's idle time between steps, from CUDA
//      events around each step (target < 5% when compute per batch exceeds copy per batch).
//   3. normalize: uint8 over the bus + normalization on the device (FieldSpec::normalize) against
//      a dataset that normalizes on the host and sends float32 (4x the bytes).
// Each figure is the median over the epochs after a warm-up epoch.
//
// Usage: loader [--quick]. Without a usable GPU it says why and exits 0.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "ferry/ferry.hpp"
#include "spin.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kH = 224, kW = 224, kC = 3;
constexpr std::size_t kImageBytes = kH * kW * kC;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2.0;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::uint8_t pixel(std::size_t index, std::size_t j) {
  return static_cast<std::uint8_t>((index * 31 + j * 7) % 251);
}

ferry::Normalize imagenet() {
  ferry::Normalize n;
  n.mean = {0.485f, 0.456f, 0.406f};
  n.std = {0.229f, 0.224f, 0.225f};
  return n;
}

/// Images as uint8 [224, 224, 3], normalized by the loader on the device (or delivered as they
/// are when `norm` is empty).
class ByteImages : public ferry::Dataset {
 public:
  ByteImages(std::size_t n, std::optional<ferry::Normalize> norm) : n_(n), norm_(std::move(norm)) {}
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    ferry::FieldSpec image{"image", ferry::DType::u8, {kH, kW, kC}};
    image.normalize = norm_;
    return {image, {"label", ferry::DType::i64, {}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    auto* p = out.as<std::uint8_t>(0);
    for (std::size_t j = 0; j < kImageBytes; ++j) p[j] = pixel(index, j);
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index % 1000);
  }

 private:
  std::size_t n_;
  std::optional<ferry::Normalize> norm_;
};

/// The same images normalized on the host into float32 [3, 224, 224]: what a loader without
/// device-side conversion sends.
class FloatImages : public ferry::Dataset {
 public:
  explicit FloatImages(std::size_t n) : n_(n) {
    const ferry::Normalize norm = imagenet();
    for (std::size_t c = 0; c < kC; ++c) {
      mul_[c] = norm.scale / norm.std[c];
      add_[c] = -norm.mean[c] / norm.std[c];
    }
  }
  std::size_t size() const override { return n_; }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"image", ferry::DType::f32, {kC, kH, kW}}, {"label", ferry::DType::i64, {}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    float* p = out.as<float>(0);
    for (std::size_t y = 0; y < kH; ++y) {
      for (std::size_t x = 0; x < kW; ++x) {
        for (std::size_t c = 0; c < kC; ++c) {
          const std::size_t j = (y * kW + x) * kC + c;
          p[(c * kH + y) * kW + x] = static_cast<float>(pixel(index, j)) * mul_[c] + add_[c];
        }
      }
    }
    *out.as<std::int64_t>(1) = static_cast<std::int64_t>(index % 1000);
  }

 private:
  std::size_t n_;
  float mul_[kC] = {};
  float add_[kC] = {};
};

struct Cuda {
  cudaStream_t stream = nullptr;
  Cuda() { check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate"); }
  Cuda(const Cuda&) = delete;
  Cuda& operator=(const Cuda&) = delete;
  ~Cuda() { (void)cudaStreamDestroy(stream); }
};

/// cudaMemcpyAsync's time for `bytes` from pinned (or pageable) host memory, median of 20.
double raw_copy_seconds(std::size_t bytes, bool pinned, cudaStream_t stream) {
  void* src = nullptr;
  std::vector<unsigned char> pageable;
  if (pinned) {
    check(cudaHostAlloc(&src, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  } else {
    pageable.resize(bytes);
    src = pageable.data();
  }
  std::memset(src, 0x5a, bytes);
  void* dst = nullptr;
  check(cudaMalloc(&dst, bytes), "cudaMalloc");
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<double> t;
  for (int i = 0; i < 22; ++i) {
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    if (i >= 2) t.push_back(ms / 1e3);
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  (void)cudaFree(dst);
  if (pinned) (void)cudaFreeHost(src);
  return median(t);
}

/// Cycles of spin() per second, from one long launch timed with events.
double spin_cycles_per_second(cudaStream_t stream) {
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  const long long cycles = 200'000'000;
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    check(cudaEventRecord(a, stream), "cudaEventRecord");
    check(launch_spin(cycles, stream), "spin");
    check(cudaEventRecord(b, stream), "cudaEventRecord");
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    best = std::max(best, static_cast<double>(cycles) / (ms / 1e3));
  }
  (void)cudaEventDestroy(a);
  (void)cudaEventDestroy(b);
  return best;
}

struct EpochResult {
  double seconds = 0;        ///< host wall time of the epoch, to the last step's end
  double idle_fraction = 0;  ///< GPU idle between steps / (first step start .. last step end)
  std::size_t samples = 0;
};

/// One epoch: each batch's "image" gets a spin of `cycles` (0: none) on the consumer's stream.
EpochResult run_epoch(ferry::Loader& loader, std::uint64_t e, long long cycles,
                      cudaStream_t stream) {
  EpochResult r;
  std::vector<cudaEvent_t> begin, end;
  const auto t0 = Clock::now();
  for (const ferry::Batch& b : loader.epoch(e)) {
    r.samples += b.size();
    if (cycles > 0) {
      cudaEvent_t s = nullptr, f = nullptr;
      check(cudaEventCreate(&s), "cudaEventCreate");
      check(cudaEventCreate(&f), "cudaEventCreate");
      check(cudaEventRecord(s, stream), "cudaEventRecord");
      check(launch_spin(cycles, stream), "spin");
      check(cudaEventRecord(f, stream), "cudaEventRecord");
      begin.push_back(s);
      end.push_back(f);
    }
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  r.seconds = seconds_since(t0);
  if (!begin.empty()) {
    double gaps = 0;
    for (std::size_t k = 1; k < begin.size(); ++k) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, end[k - 1], begin[k]), "cudaEventElapsedTime");
      gaps += ms / 1e3;
    }
    float total = 0;
    check(cudaEventElapsedTime(&total, begin.front(), end.back()), "cudaEventElapsedTime");
    r.idle_fraction = gaps / (total / 1e3);
    for (auto* ev : begin) (void)cudaEventDestroy(ev);
    for (auto* ev : end) (void)cudaEventDestroy(ev);
  }
  return r;
}

struct Summary {
  double seconds = 0, idle = 0;
  std::size_t samples = 0;
};

Summary run(ferry::Loader& loader, int epochs, long long cycles, cudaStream_t stream) {
  run_epoch(loader, 0, cycles, stream);  // warm-up: first touch of every buffer
  std::vector<double> s, idle;
  std::size_t samples = 0;
  for (int e = 1; e <= epochs; ++e) {
    const EpochResult r = run_epoch(loader, static_cast<std::uint64_t>(e), cycles, stream);
    s.push_back(r.seconds);
    idle.push_back(r.idle_fraction);
    samples = r.samples;
  }
  return {median(s), median(idle), samples};
}

ferry::LoaderOptions options(std::size_t batch, cudaStream_t stream, int workers) {
  ferry::LoaderOptions o;
  o.autotune = false;  // the settings this bench states, fixed
  o.batch_size = batch;
  o.shuffle = true;
  o.seed = 1;
  o.device = ferry::Device::cuda(0);
  o.workers = workers;
  o.prefetch = 6;
  o.device_buffers = 3;
  o.stream = stream;
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: loader [--quick]\n");
      return 2;
    }
  }
  if (ferry::cuda_device_count() == 0) {
    std::printf("gpu_loader: no usable GPU: %s\n", ferry::cuda_unavailable_reason().c_str());
    return 0;
  }
  try {
    check(cudaSetDevice(0), "cudaSetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int workers = std::max(2, cores / 2);
    const std::size_t batch = 128;
    const std::size_t rows = quick ? 1024 : 4096;
    const int epochs = quick ? 3 : 5;
    const std::size_t batch_bytes = batch * kImageBytes;
    std::printf(
        "gpu_loader: %s, %d host cores, loader workers %d, batch %zu x %zu B = %.1f MiB, "
        "%zu samples, %d epochs after a warm-up (medians)\n",
        prop.name, cores, workers, batch, kImageBytes, static_cast<double>(batch_bytes) / (1 << 20),
        rows, epochs);
    Cuda cuda;

    // ---- 1. transfer
    const double peak_s = raw_copy_seconds(batch_bytes, true, cuda.stream);
    const double pageable_s = raw_copy_seconds(batch_bytes, false, cuda.stream);
    const double peak = static_cast<double>(batch_bytes) / peak_s / 1e9;
    const double peak_pageable = static_cast<double>(batch_bytes) / pageable_s / 1e9;

    ferry::Tensor x = ferry::Tensor::empty(
        {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(kImageBytes)},
        ferry::DType::u8);
    for (std::size_t i = 0; i < rows; ++i) {
      auto* p = x.data<std::uint8_t>() + i * kImageBytes;
      for (std::size_t j = 0; j < kImageBytes; ++j) p[j] = pixel(i, j);
    }
    ferry::Tensor y = ferry::Tensor::empty({static_cast<std::int64_t>(rows)}, ferry::DType::i64);
    for (std::size_t i = 0; i < rows; ++i) y.data<std::int64_t>()[i] = static_cast<std::int64_t>(i);
    auto tensors = std::make_shared<ferry::TensorDataset>(
        std::vector<std::pair<std::string, ferry::Tensor>>{{"image", x}, {"label", y}});

    std::printf("\n| transfer | GB/s | of pinned peak |\n|---|---|---|\n");
    std::printf("| cudaMemcpyAsync, pinned (peak) | %.2f | 1.00 |\n", peak);
    std::printf("| cudaMemcpyAsync, pageable | %.2f | %.2f |\n", peak_pageable,
                peak_pageable / peak);
    double loader_ratio = 0;
    double direct_ratio = 0;
    for (const bool pin : {true, false}) {
      ferry::LoaderOptions o = options(batch, cuda.stream, workers);
      o.pin_memory = pin;
      ferry::Loader loader(tensors, o);
      const Summary s = run(loader, epochs, 0, cuda.stream);
      const double gbs = static_cast<double>(s.samples * kImageBytes) / s.seconds / 1e9;
      if (pin) loader_ratio = gbs / peak;
      std::printf("| ferry Loader, %s staging | %.2f | %.2f |\n", pin ? "pinned" : "pageable", gbs,
                  gbs / peak);
    }

    {
      // The rows in page-locked memory: the GPU gathers them itself, no staging copy.
      auto pinned_rows =
          std::make_shared<ferry::TensorDataset>(std::vector<std::pair<std::string, ferry::Tensor>>{
              {"image", x.pin_memory()}, {"label", y.pin_memory()}});
      ferry::Loader loader(pinned_rows, options(batch, cuda.stream, workers));
      const Summary s = run(loader, epochs, 0, cuda.stream);
      const double gbs = static_cast<double>(s.samples * kImageBytes) / s.seconds / 1e9;
      direct_ratio = gbs / peak;
      std::printf("| ferry Loader, pinned rows gathered by the GPU | %.2f | %.2f |\n", gbs,
                  gbs / peak);
    }

    // ---- 2. overlap
    const double cps = spin_cycles_per_second(cuda.stream);
    std::printf(
        "\n| compute per batch | x copy time | wall s | ideal s | ideal/wall | GPU idle "
        "between steps |\n|---|---|---|---|---|---|\n");
    double worst_idle = 0;
    for (const double factor : {0.5, 1.5, 3.0}) {
      const double step_s = factor * peak_s;
      const auto cycles = static_cast<long long>(step_s * cps);
      ferry::Loader loader(tensors, options(batch, cuda.stream, workers));
      const Summary s = run(loader, epochs, cycles, cuda.stream);
      const double batches = static_cast<double>((s.samples + batch - 1) / batch);
      const double ideal = batches * std::max(step_s, peak_s);
      if (factor > 1.0) worst_idle = std::max(worst_idle, s.idle);
      std::printf("| %.2f ms | %.1f | %.4f | %.4f | %.3f | %.2f%% |\n", step_s * 1e3, factor,
                  s.seconds, ideal, ideal / s.seconds, 100.0 * s.idle);
    }

    // ---- 3. uint8 + normalize on the device against float from the host
    const std::size_t image_rows = quick ? 512 : 2048;
    std::printf(
        "\n| images to the device, f32 [3, 224, 224] | bytes over the bus per image | "
        "images/s |\n|---|---|---|\n");
    double u8_rate = 0, f32_rate = 0;
    {
      ferry::Loader loader(std::make_shared<ByteImages>(image_rows, imagenet()),
                           options(batch, cuda.stream, workers));
      const Summary s = run(loader, epochs, 0, cuda.stream);
      u8_rate = static_cast<double>(s.samples) / s.seconds;
      std::printf("| u8 over the bus, normalized on the GPU | %zu | %.0f |\n", kImageBytes,
                  u8_rate);
    }
    {
      ferry::Loader loader(std::make_shared<FloatImages>(image_rows),
                           options(batch, cuda.stream, workers));
      const Summary s = run(loader, epochs, 0, cuda.stream);
      f32_rate = static_cast<double>(s.samples) / s.seconds;
      std::printf("| f32 normalized on the host | %zu | %.0f |\n", kImageBytes * 4, f32_rate);
    }
    std::printf(
        "\nsummary: loader H2D %.2f of the pinned peak through staging, %.2f from pinned rows "
        "(target 0.9); GPU idle between steps %.2f%% at compute > copy (target < 5%%); u8+GPU "
        "normalize %.2fx the images/s of f32 from the host\n",
        loader_ratio, direct_ratio, 100.0 * worst_idle, u8_rate / f32_rate);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_loader: %s\n", e.what());
    return 1;
  }
  return 0;
}
