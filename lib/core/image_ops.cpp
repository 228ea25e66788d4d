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

// The f32 result rounded once to the output type. No NaN reaches here: normalize_images
// accepts only finite factors.
template <class Out>
Out from_f32(float v) noexcept {
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

template <class Out>
void normalize_images(const ImageConvert& a) noexcept {
  const auto* src = static_cast<const std::uint8_t*>(a.src);
  auto* dst = static_cast<Out*>(a.dst);
  const std::int64_t plane = a.h * a.w;
  const std::int64_t image = plane * a.c;
  for (std::int64_t i = 0; i < a.n; ++i) {
    const std::uint8_t* s = src + i * image;
    Out* d = dst + i * image;
    for (std::int64_t p = 0; p < plane; ++p) {
      for (std::int64_t ch = 0; ch < a.c; ++ch) {
        const auto k = static_cast<std::size_t>(ch);
        const float v = std::fma(static_cast<float>(s[p * a.c + ch]), a.mul[k], a.add[k]);
        d[a.to_chw ? ch * plane + p : p * a.c + ch] = from_f32<Out>(v);
      }
    }
  }
}

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
  switch (args.dst_dtype) {
    case DType::f16:
      return normalize_images<Half>(args);
    case DType::bf16:
      return normalize_images<BFloat16>(args);
    default:
      return normalize_images<float>(args);
  }
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
