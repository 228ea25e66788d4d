#include "ferry/ops.hpp"

#include <cmath>
#include <string>

#include "copy/copy_engine.hpp"
#include "copy/cuda/cuda_api.hpp"
#include "core/image_ops.hpp"
#include "core/storage.hpp"

namespace ferry {
namespace {

// Checks an [N, H, W, C] or [H, W, C] shape and fills in the geometry of `args`.
void set_geometry(const Tensor& images, const char* where, detail::ImageConvert& args) {
  const auto& s = images.shape();
  if (s.size() != 3 && s.size() != 4) {
    throw ConfigError(std::string(where) + ": expected images [N, H, W, C] or [H, W, C], got " +
                      std::to_string(s.size()) + " dimensions");
  }
  const std::size_t o = s.size() - 3;
  args.n = o == 0 ? 1 : s[0];
  args.h = s[o];
  args.w = s[o + 1];
  args.c = s[o + 2];
}

std::vector<int64_t> chw_shape(const std::vector<int64_t>& hwc) {
  std::vector<int64_t> out = hwc;
  const std::size_t o = hwc.size() - 3;
  out[o] = hwc[o + 2];
  out[o + 1] = hwc[o];
  out[o + 2] = hwc[o + 1];
  return out;
}

// Runs `args` on the images' device: the CPU twin here, or queued on the GPU's copy stream
// behind the work that writes the input.
Tensor run(const Tensor& images, detail::ImageConvert args, std::vector<int64_t> out_shape) {
  const Device device = images.device();
  Tensor out = Tensor::empty(std::move(out_shape), args.dst_dtype, device);
  if (device.is_cpu()) {
    args.src = images.data();
    args.dst = out.data();
    detail::convert_image_cpu(args);
    return out;
  }
  check_usable(device);
  detail::CopyEngine& engine = detail::cuda::engine(device.index());
  engine.wait(images.ready_event());
  args.src = static_cast<const char*>(images.storage()->data()) + images.storage_offset();
  args.dst = out.storage()->data();
  engine.convert_image_async(args);
  out.storage()->set_pending(engine.record(), {images.storage()});
  return out;
}

}  // namespace

Tensor normalize_images(const Tensor& images, const Normalize& norm) {
  constexpr const char* kWhere = "normalize_images";
  detail::ImageConvert args;
  set_geometry(images, kWhere, args);
  if (images.dtype() != DType::u8) {
    throw ConfigError(std::string(kWhere) + ": expected u8 images, got " +
                      std::string(dtype_name(images.dtype())));
  }
  if (norm.dtype != DType::f32 && norm.dtype != DType::f16 && norm.dtype != DType::bf16) {
    throw ConfigError(std::string(kWhere) + ": output dtype must be f32, f16 or bf16, got " +
                      std::string(dtype_name(norm.dtype)));
  }
  if (args.c < 1 || args.c > 4) {
    throw ConfigError(std::string(kWhere) + ": 1 to 4 channels supported, got " +
                      std::to_string(args.c));
  }
  const auto channels = static_cast<std::size_t>(args.c);
  auto per_channel = [&](const std::vector<float>& v, const char* name) {
    if (v.size() != 1 && v.size() != channels) {
      throw ConfigError(std::string(kWhere) + ": " + name + " has " + std::to_string(v.size()) +
                        " values for " + std::to_string(channels) + " channels");
    }
  };
  per_channel(norm.mean, "mean");
  per_channel(norm.std, "std");
  for (std::size_t c = 0; c < channels; ++c) {
    const float mean = norm.mean[norm.mean.size() == 1 ? 0 : c];
    const float sd = norm.std[norm.std.size() == 1 ? 0 : c];
    if (sd == 0.0f) {
      throw ConfigError(std::string(kWhere) + ": std of channel " + std::to_string(c) + " is 0");
    }
    args.mul[c] = norm.scale / sd;
    args.add[c] = -mean / sd;
    // Finite factors keep NaN out of every result (x is 0..255), so CPU and GPU agree bit for bit.
    if (!std::isfinite(mean) || !std::isfinite(sd) || !std::isfinite(args.mul[c]) ||
        !std::isfinite(args.add[c])) {
      throw ConfigError(std::string(kWhere) + ": mean/std of channel " + std::to_string(c) +
                        " give a non-finite factor (mean " + std::to_string(mean) + ", std " +
                        std::to_string(sd) + ", scale " + std::to_string(norm.scale) + ")");
    }
  }
  args.src_dtype = DType::u8;
  args.dst_dtype = norm.dtype;
  args.normalize = true;
  args.to_chw = true;
  return run(images, args, chw_shape(images.shape()));
}

Tensor hwc_to_chw(const Tensor& images) {
  detail::ImageConvert args;
  set_geometry(images, "hwc_to_chw", args);
  args.src_dtype = images.dtype();
  args.dst_dtype = images.dtype();
  args.normalize = false;
  args.to_chw = true;
  return run(images, args, chw_shape(images.shape()));
}

}  // namespace ferry
