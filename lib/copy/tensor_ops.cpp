// The Tensor operations that may queue work on a device's copy engine: to() (transfers and
// dtype conversion), cpu(), zeros(), clone(), and the image operations (the CUDA kernel on a
// GPU, its CPU twin on the host). They use the engines, so they live here, a rung above
// lib/core, which holds the tensor itself, its storage and its host-only operations.

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "copy/copy_engine.hpp"
#include "copy/cuda_engines.hpp"
#include "core/checked.hpp"
#include "core/image_ops.hpp"
#include "core/storage.hpp"
#include "core/tensor_access.hpp"
#include "ferry/ops.hpp"
#include "ferry/tensor.hpp"

namespace ferry {
namespace {

using detail::CopyKind;
using detail::new_tensor;
using detail::TensorAccess;

// The copy engine of a GPU. \throws DeviceError when it is not usable.
detail::CopyEngine& engine_of(Device device) {
  check_usable(device);
  return detail::cuda::engine(device.index());
}

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
  Tensor out = new_tensor(std::move(out_shape), args.dst_dtype, device, false, "images",
                          device.is_cuda() ? engine_of(device).stream() : nullptr);
  // No pixels: nothing to do, and the kernels must not loop over N images of none.
  if (out.numel() == 0) return out;
  if (device.is_cpu()) {
    args.src = images.data();
    args.dst = out.data();
    detail::convert_image_cpu(args);
    return out;
  }
  detail::CopyEngine& engine = engine_of(device);
  engine.wait(images.ready_event());
  args.src = TensorAccess::address(images);
  args.dst = TensorAccess::address(out);
  engine.convert_image_async(args);
  TensorAccess::storage(out)->set_pending(engine.record(), {TensorAccess::storage(images)},
                                          engine.stream());
  return out;
}

}  // namespace

// ---- transfers and conversions --------------------------------------------------------

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  if (device.is_cpu()) {
    Tensor host = new_tensor(std::move(shape), dtype, device, false, "Tensor::zeros");
    if (host.nbytes() != 0) std::memset(host.data(), 0, host.nbytes());
    return host;
  }
  // Zeroed on the GPU, on the copy stream: no host buffer, no copy, no host wait.
  check_usable(device);
  detail::CopyEngine& engine = engine_of(device);
  Tensor out = new_tensor(std::move(shape), dtype, device, false, "Tensor::zeros", engine.stream());
  engine.zero_async(TensorAccess::address(out), out.nbytes());
  TensorAccess::storage(out)->set_pending(engine.record(), {}, engine.stream());
  return out;
}

namespace {

// This tensor on `device`, the copy queued on `on` (the copy engine's own stream when none).
Tensor transfer(const Tensor& self, Device device, bool non_blocking, std::optional<Stream> on) {
  if (!self.defined()) throw ConfigError("Tensor::to: the tensor is undefined");
  const Device from = self.device();
  if (from == device) return self;

  check_usable(device);
  const auto& source = TensorAccess::storage(self);
  // The engine whose stream carries the copy: the GPU's side of it.
  detail::CopyEngine& engine = engine_of(device.is_cuda() ? device : from);
  const Stream stream = on.value_or(engine.stream());
  const bool from_pinned = from.is_cpu() && self.is_pinned();
  // Asynchronous when the host side is pinned, or both sides are device memory, as in CUDA.
  const bool async = non_blocking && (from.is_cuda() || from_pinned);
  Tensor out = new_tensor(self.shape(), self.dtype(), device, /*pinned=*/device.is_cpu() && async,
                          "Tensor::to", stream);
  engine.stream_wait(stream, source->pending());  // on the GPU: the copy reads finished bytes
  engine.copy_async_on(stream, TensorAccess::address(out), TensorAccess::address(self),
                       self.nbytes());
  if (async) {
    TensorAccess::storage(out)->set_pending(engine.record_on(stream), {source}, stream);
  } else {
    engine.synchronize_stream(stream);
  }
  return out;
}

// This tensor as `dtype`, converted on its device.
Tensor convert_to(const Tensor& self, DType dtype) {
  if (!self.defined()) throw ConfigError("Tensor::to: the tensor is undefined");
  if (dtype == self.dtype()) return self;
  const Device device = self.device();
  const auto count = static_cast<std::size_t>(self.numel());
  if (device.is_cpu()) {
    Tensor out = new_tensor(self.shape(), dtype, device, false, "Tensor::to");
    convert(self.data(), self.dtype(), out.data(), dtype, count);
    return out;
  }
  detail::CopyEngine& engine = engine_of(device);
  Tensor out = new_tensor(self.shape(), dtype, device, false, "Tensor::to", engine.stream());
  const auto& source = TensorAccess::storage(self);
  engine.wait(source->pending());
  engine.convert_async(TensorAccess::address(self), self.dtype(), TensorAccess::address(out), dtype,
                       count);
  TensorAccess::storage(out)->set_pending(engine.record(), {source}, engine.stream());
  return out;
}

}  // namespace

Tensor Tensor::to(Device device, bool non_blocking) const {
  return transfer(*this, device, non_blocking, std::nullopt);
}

Tensor Tensor::to(Device device, bool non_blocking, CUstream_st* stream) const {
  return transfer(*this, device, non_blocking, stream);
}

Tensor Tensor::to(DType dtype) const { return convert_to(*this, dtype); }

Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  // Copy first, then convert on the destination: uint8 crosses the bus, floats are made there.
  return to(device, non_blocking).to(dtype);
}

Tensor Tensor::to(Device device, DType dtype, bool non_blocking, CUstream_st* stream) const {
  Tensor moved = to(device, non_blocking, stream);
  if (dtype == moved.dtype()) return moved;
  if (!moved.device().is_cuda()) return moved.to(dtype);
  // The conversion runs on ferry's copy stream, behind the copy; `stream` then waits for it.
  Tensor out = moved.to(dtype);
  detail::CopyEngine& engine = engine_of(out.device());
  const auto& storage = TensorAccess::storage(out);
  engine.stream_wait(stream, storage->pending());
  storage->add_stream_use(stream);
  if (!non_blocking) engine.synchronize_stream(stream);
  return out;
}

Tensor Tensor::cpu() const { return to(Device::cpu()); }

Tensor Tensor::clone() const {
  if (!storage_) return {};
  const Device device = this->device();
  if (device.is_cpu()) {
    Tensor out = new_tensor(shape_, dtype_, device, is_pinned(), "Tensor::clone");
    if (nbytes() != 0) std::memcpy(out.data(), data(), nbytes());
    return out;
  }
  detail::CopyEngine& engine = engine_of(device);
  Tensor out = new_tensor(shape_, dtype_, device, false, "Tensor::clone", engine.stream());
  engine.wait(storage_->pending());
  engine.copy_async(out.storage_->data(), static_cast<const char*>(storage_->data()) + offset_,
                    nbytes(), CopyKind::device_to_device);
  out.storage_->set_pending(engine.record(), {storage_}, engine.stream());
  return out;
}

// ---- image operations ----------------------------------------------------------------

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
