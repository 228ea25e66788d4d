#include "ferry/ops.hpp"

#include <cmath>
#include <string>

#include "copy/copy_engine.hpp"
#include "copy/cuda/cuda_api.hpp"
#include "core/checked.hpp"
#include "core/image_ops.hpp"
#include "core/storage.hpp"

namespace ferry {
namespace {

// Checks an [N, H, W, C] or [H, W, C] shape and fills in the geometry of `args`.
void set_geometry(const Tensor& images, const char* where, detail::ImageConvert& args) {
  if (!images.defined()) throw ConfigError(std::string(where) + ": the images are undefined");
  const auto& s = images.shape();
  if (s.size() != 3 && s.size() != 4) {
    throw ConfigError(std::string(where) + ": expected images [N, H, W, C] or [H, W, C], got " +
                      std::to_string(s.size()) + " dimensions");
  }
  // Every product of the geometry the kernels form then fits, as the element count does.
  (void)detail::checked_numel(s, where);
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
  // No pixels: nothing to do, and the kernels must not loop over N images of none.
  if (out.numel() == 0) return out;
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
  detail::set_normalize(norm, kWhere, args);
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
