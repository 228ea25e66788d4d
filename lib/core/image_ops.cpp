#include "core/image_ops.hpp"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/convert_rules.hpp"
#include "ferry/error.hpp"
#include "ferry/ops.hpp"

namespace ferry::detail {
namespace {

// The kernels below are written once and compiled twice: for the portable baseline and, on
// x86-64, for AVX2 + FMA (chosen at run time), where std::fma becomes one vfmadd instruction and
// the loops vectorize. Everything a kernel calls is forced inline so that it is compiled for the
// kernel's instruction set. Both compute the same bits: std::fma is a fused multiply-add rounded
// once, in software or in hardware, as the GPU's fmaf.
#define FERRY_KERNEL_INLINE [[gnu::always_inline]] inline

// The f32 result rounded once to the output type. No NaN reaches here: set_normalize accepts
// only finite factors.
template <class Out>
FERRY_KERNEL_INLINE Out from_f32(float v) noexcept {
  if constexpr (std::is_same_v<Out, float>) {
    return v;
  } else {
    std::uint32_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    if constexpr (std::is_same_v<Out, Half>) {
      return Half{rules::half_bits_of_float(u)};
    } else {
      return BFloat16{rules::bfloat16_bits_of_float(u)};
    }
  }
}

// The images of `a`, with C channels known at compile time: one pass over the pixels, each
// channel written to its own plane (or interleaved for HWC). The factors are copied to locals,
// so that the compiler knows the stores do not change them.
template <class Out, int C>
FERRY_KERNEL_INLINE void normalize_images(const ImageConvert& a) noexcept {
  float mul[static_cast<std::size_t>(C)];
  float add[static_cast<std::size_t>(C)];
  for (int ch = 0; ch < C; ++ch) {
    mul[ch] = a.mul[static_cast<std::size_t>(ch)];
    add[ch] = a.add[static_cast<std::size_t>(ch)];
  }
  const std::int64_t plane = a.h * a.w;
  const std::int64_t image = plane * C;
  for (std::int64_t i = 0; i < a.n; ++i) {
    const std::uint8_t* __restrict s = static_cast<const std::uint8_t*>(a.src) + i * image;
    Out* __restrict d = static_cast<Out*>(a.dst) + i * image;
    if (a.to_chw) {
      for (std::int64_t p = 0; p < plane; ++p) {
        for (int ch = 0; ch < C; ++ch) {
          d[ch * plane + p] =
              from_f32<Out>(std::fma(static_cast<float>(s[p * C + ch]), mul[ch], add[ch]));
        }
      }
    } else {
      for (std::int64_t p = 0; p < plane; ++p) {
        for (int ch = 0; ch < C; ++ch) {
          d[p * C + ch] =
              from_f32<Out>(std::fma(static_cast<float>(s[p * C + ch]), mul[ch], add[ch]));
        }
      }
    }
  }
}

template <class Out>
FERRY_KERNEL_INLINE void normalize_channels(const ImageConvert& a) noexcept {
  switch (a.c) {  // set_normalize allows 1 to 4
    case 1:
      return normalize_images<Out, 1>(a);
    case 2:
      return normalize_images<Out, 2>(a);
    case 3:
      return normalize_images<Out, 3>(a);
    default:
      return normalize_images<Out, 4>(a);
  }
}

FERRY_KERNEL_INLINE void normalize_any(const ImageConvert& a) noexcept {
  switch (a.dst_dtype) {
    case DType::f16:
      return normalize_channels<Half>(a);
    case DType::bf16:
      return normalize_channels<BFloat16>(a);
    default:
      return normalize_channels<float>(a);
  }
}

void normalize_portable(const ImageConvert& a) noexcept { normalize_any(a); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FERRY_HAVE_FMA_KERNEL 1
__attribute__((target("avx2,fma"))) void normalize_avx2_fma(const ImageConvert& a) noexcept {
  normalize_any(a);
}

bool cpu_has_avx2_fma() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
}
#endif

void transpose_images(const ImageConvert& a) noexcept {
  const std::size_t elem = dtype_size(a.src_dtype);
  const auto* src = static_cast<const unsigned char*>(a.src);
  auto* dst = static_cast<unsigned char*>(a.dst);
  const std::int64_t plane = a.h * a.w;
  const std::int64_t image = plane * a.c;
  if (!a.to_chw) {
    std::memcpy(dst, src, static_cast<std::size_t>(a.n * image) * elem);
    return;
  }
  for (std::int64_t i = 0; i < a.n; ++i) {
    for (std::int64_t p = 0; p < plane; ++p) {
      for (std::int64_t ch = 0; ch < a.c; ++ch) {
        const auto from = static_cast<std::size_t>(i * image + p * a.c + ch) * elem;
        const auto to = static_cast<std::size_t>(i * image + ch * plane + p) * elem;
        std::memcpy(dst + to, src + from, elem);
      }
    }
  }
}

}  // namespace

void convert_image_cpu(const ImageConvert& args) noexcept {
  if (!args.normalize) return transpose_images(args);
#ifdef FERRY_HAVE_FMA_KERNEL
  static const bool fma = cpu_has_avx2_fma();
  if (fma) return normalize_avx2_fma(args);
#endif
  normalize_portable(args);
}

void convert_image_cpu_portable(const ImageConvert& args) noexcept {
  if (!args.normalize) return transpose_images(args);
  normalize_portable(args);
}

void set_normalize(const Normalize& norm, const char* where, ImageConvert& args) {
  const std::string w(where);
  if (norm.dtype != DType::f32 && norm.dtype != DType::f16 && norm.dtype != DType::bf16) {
    throw ConfigError(w + ": output dtype must be f32, f16 or bf16, got " +
                      std::string(dtype_name(norm.dtype)));
  }
  if (args.c < 1 || args.c > 4) {
    throw ConfigError(w + ": 1 to 4 channels supported, got " + std::to_string(args.c));
  }
  const auto channels = static_cast<std::size_t>(args.c);
  auto per_channel = [&](const std::vector<float>& v, const char* name) {
    if (v.size() != 1 && v.size() != channels) {
      throw ConfigError(w + ": " + name + " has " + std::to_string(v.size()) + " values for " +
                        std::to_string(channels) + " channels");
    }
  };
  per_channel(norm.mean, "mean");
  per_channel(norm.std, "std");
  for (std::size_t c = 0; c < channels; ++c) {
    const float mean = norm.mean[norm.mean.size() == 1 ? 0 : c];
    const float sd = norm.std[norm.std.size() == 1 ? 0 : c];
    if (sd == 0.0f) throw ConfigError(w + ": std of channel " + std::to_string(c) + " is 0");
    args.mul[c] = norm.scale / sd;
    args.add[c] = -mean / sd;
    // Finite factors keep NaN out of every result (x is 0..255), so CPU and GPU agree bit for bit.
    if (!std::isfinite(mean) || !std::isfinite(sd) || !std::isfinite(args.mul[c]) ||
        !std::isfinite(args.add[c])) {
      throw ConfigError(w + ": mean/std of channel " + std::to_string(c) +
                        " give a non-finite factor (mean " + std::to_string(mean) + ", std " +
                        std::to_string(sd) + ", scale " + std::to_string(norm.scale) + ")");
    }
  }
  args.src_dtype = DType::u8;
  args.dst_dtype = norm.dtype;
  args.normalize = true;
  args.to_chw = true;
}

}  // namespace ferry::detail
