// ferry_devices: one batch of images through the path a training loop takes, step by step.
//
//   ferry_devices [cpu|cuda|cuda:N]      (default: Device::best(), "cuda if available else cpu")
//
// Copy it as a starting point: make a batch in pinned host memory, send it to the device without
// blocking, turn uint8 HWC images into normalized float CHW there, and hand it to another
// framework through DLPack. It checks its own results and exits non-zero when one is wrong.

#include <dlpack/dlpack.h>  // only for to_dlpack(); ferry itself needs no DLPack header

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("  %s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// A fake pixel, so that the expected value of any element can be computed by hand.
std::uint8_t pixel(int64_t n, int64_t y, int64_t x, int64_t c) {
  return static_cast<std::uint8_t>((n * 31 + y * 7 + x * 3 + c * 50) % 256);
}

const char* dl_device_name(int32_t type) {
  switch (type) {
    case kDLCPU:
      return "kDLCPU";
    case kDLCUDA:
      return "kDLCUDA";
    case kDLCUDAHost:
      return "kDLCUDAHost";
    default:
      return "other";
  }
}

int run(const ferry::Device device) {
  constexpr int64_t kN = 8, kH = 224, kW = 224, kC = 3;
  // torchvision's ImageNet statistics, for pixels scaled to 0..1.
  const ferry::Normalize imagenet{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};

  // 1. A batch of uint8 images [N, H, W, C], as a decoder writes them.
  auto start = Clock::now();
  ferry::Tensor images = ferry::Tensor::empty({kN, kH, kW, kC}, ferry::DType::u8);
  auto* p = images.data<std::uint8_t>();
  for (int64_t n = 0; n < kN; ++n) {
    for (int64_t y = 0; y < kH; ++y) {
      for (int64_t x = 0; x < kW; ++x) {
        for (int64_t c = 0; c < kC; ++c) *p++ = pixel(n, y, x, c);
      }
    }
  }
  std::printf("[%8.3f ms] made images u8 [%lld, %lld, %lld, %lld], %zu bytes\n", ms_since(start),
              static_cast<long long>(kN), static_cast<long long>(kH), static_cast<long long>(kW),
              static_cast<long long>(kC), images.nbytes());

  // 2. Pin it: the GPU's DMA engine reads page-locked memory directly, and only a copy from
  //    pinned memory can run asynchronously. (A loader decodes straight into pinned slots.)
  start = Clock::now();
  const ferry::Tensor pinned = images.pin_memory();
  const char* how = !pinned.is_pinned()          ? "no: mlock refused (raise `ulimit -l`)"
                    : ferry::cuda_is_available() ? "yes, by cudaHostAlloc"
                                                 : "yes, by mlock (no usable GPU)";
  std::printf("[%8.3f ms] pin_memory: pinned %s\n", ms_since(start), how);

  // 3. Send it without blocking: the call returns once the copy is queued on the copy stream.
  start = Clock::now();
  const ferry::Tensor on_device = pinned.to(device, /*non_blocking=*/true);
  // On the CPU there is nothing to copy: the same storage comes back.
  std::printf("[%8.3f ms] to(%s, non_blocking): %s\n", ms_since(start), device.str().c_str(),
              on_device.shares_storage_with(pinned) ? "same storage, no copy" : "copy queued");
  start = Clock::now();
  on_device.ready_event().synchronize();  // a training loop would make its stream wait instead
  std::printf("[%8.3f ms] ready_event().synchronize(): copy done\n", ms_since(start));

  // 4. uint8 HWC to normalized float CHW, on the device (a kernel on a GPU).
  start = Clock::now();
  const ferry::Tensor normalized = ferry::normalize_images(on_device, imagenet);
  normalized.synchronize();
  std::printf("[%8.3f ms] normalize_images: f32 [%lld, %lld, %lld, %lld] on %s\n", ms_since(start),
              static_cast<long long>(normalized.shape(0)),
              static_cast<long long>(normalized.shape(1)),
              static_cast<long long>(normalized.shape(2)),
              static_cast<long long>(normalized.shape(3)), normalized.device().str().c_str());

  // 5. Back to the host, to check it against the formula computed by hand.
  start = Clock::now();
  const ferry::Tensor result = normalized.cpu();
  std::printf("[%8.3f ms] cpu(): %s\n", ms_since(start),
              result.shares_storage_with(normalized) ? "already there, no copy" : "copied back");
  const float* out = result.data<float>();
  // Elements {n, y, x, c} of the input, looked up in the NCHW output.
  const int64_t probes[][4] = {{0, 0, 0, 0}, {1, 2, 200, 1}, {7, 223, 223, 2}, {3, 100, 50, 0}};
  double worst = 0;
  for (const auto& probe : probes) {
    const int64_t n = probe[0], y = probe[1], x = probe[2], c = probe[3];
    const auto i = static_cast<std::size_t>(((n * kC + c) * kH + y) * kW + x);  // NCHW
    const double expected =
        (pixel(n, y, x, c) / 255.0 - imagenet.mean[static_cast<std::size_t>(c)]) /
        imagenet.std[static_cast<std::size_t>(c)];
    worst = std::fmax(worst, std::fabs(out[i] - expected));
  }
  check(result.shape() == std::vector<int64_t>{kN, kC, kH, kW}, "shape [N, C, H, W]");
  char worst_text[32];
  std::snprintf(worst_text, sizeof worst_text, "%.1e", worst);
  check(worst < 1e-5,
        std::string("(x / 255 - mean) / std matches by hand, worst error ") + worst_text);

  // 6. f32 -> f16 -> f32: half precision keeps 11 significant bits.
  start = Clock::now();
  const ferry::Tensor half = result.to(ferry::DType::f16);
  const ferry::Tensor again = half.to(ferry::DType::f32);
  std::printf("[%8.3f ms] f32 -> f16 -> f32\n", ms_since(start));
  const float* back = again.data<float>();
  bool close = true;
  for (int64_t i = 0; i < result.numel(); ++i) {
    const auto k = static_cast<std::size_t>(i);
    close = close && std::fabs(back[k] - out[k]) <= std::fabs(out[k]) * 0x1p-11f;
  }
  check(close, "every value within half's rounding (2^-11 relative)");

  // 7. Hand the batch to another framework (at::fromDLPack, CuPy, JAX) without a copy. The
  //    consumer calls the deleter when done; here we are the consumer.
  start = Clock::now();
  DLManagedTensor* managed = normalized.to_dlpack();
  const DLTensor& dl = managed->dl_tensor;
  std::printf("[%8.3f ms] to_dlpack: device %s:%d, ndim %d, dtype code %d bits %d\n",
              ms_since(start), dl_device_name(dl.device.device_type), dl.device.device_id, dl.ndim,
              dl.dtype.code, dl.dtype.bits);
  const bool on_gpu = device.is_cuda();
  check(dl.device.device_type == (on_gpu ? kDLCUDA : kDLCPU) &&
            dl.device.device_id == (on_gpu ? device.index() : 0),
        "DLPack names the tensor's device");
  check(dl.ndim == 4 && dl.shape[1] == kC && dl.dtype.code == kDLFloat && dl.dtype.bits == 32,
        "DLPack describes f32 [N, C, H, W]");
  managed->deleter(managed);
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::printf("ferry %s, built with CUDA: %s\n", ferry::kVersion,
                ferry::built_with_cuda() ? "yes" : "no");
    const int gpus = ferry::cuda_device_count();
    std::printf("cuda_device_count(): %d\n", gpus);
    if (gpus == 0) {
      std::printf("cuda_unavailable_reason(): %s\n", ferry::cuda_unavailable_reason().c_str());
    }
    const ferry::Device device = argc > 1 ? ferry::Device::parse(argv[1]) : ferry::Device::best();
    std::printf("device: %s\n", device.str().c_str());
    ferry::check_usable(device);

    const int failed = run(device);
    if (failed != 0) {
      std::printf("%d check(s) FAILED\n", failed);
      return 1;
    }
    std::printf("all checks passed\n");
    return 0;
  } catch (const std::exception& e) {
    // ferry throws ferry::Error (DeviceError, ConfigError, ...) with a message that says what
    // and where; std::bad_alloc is the only other exception to expect.
    std::fprintf(stderr, "ferry_devices: %s\n", e.what());
    return 2;
  }
}
