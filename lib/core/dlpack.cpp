// DLPack export and import: a batch goes to libtorch, CuPy or JAX without a copy.

#include <dlpack/dlpack.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "core/shape_text.hpp"
#include "core/storage.hpp"
#include "core/tensor_access.hpp"
#include "ferry/tensor.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry {
namespace {

using detail::shape_text;

DLDataType to_dl(DType t) noexcept {
  const auto bits = static_cast<std::uint8_t>(dtype_size(t) * 8);
  switch (t) {
    case DType::u8:
    case DType::u16:
    case DType::u32:
    case DType::u64:
      return {kDLUInt, bits, 1};
    case DType::i8:
    case DType::i16:
    case DType::i32:
    case DType::i64:
      return {kDLInt, bits, 1};
    case DType::bf16:
      return {kDLBfloat, bits, 1};
    case DType::f16:
    case DType::f32:
    case DType::f64:
      return {kDLFloat, bits, 1};
  }
  return {kDLUInt, 8, 1};
}

DType from_dl(DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLUInt && t.bits == 8) return DType::u8;
    if (t.code == kDLUInt && t.bits == 16) return DType::u16;
    if (t.code == kDLUInt && t.bits == 32) return DType::u32;
    if (t.code == kDLUInt && t.bits == 64) return DType::u64;
    if (t.code == kDLInt && t.bits == 8) return DType::i8;
    if (t.code == kDLInt && t.bits == 16) return DType::i16;
    if (t.code == kDLInt && t.bits == 32) return DType::i32;
    if (t.code == kDLInt && t.bits == 64) return DType::i64;
    if (t.code == kDLFloat && t.bits == 16) return DType::f16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::bf16;
    if (t.code == kDLFloat && t.bits == 32) return DType::f32;
    if (t.code == kDLFloat && t.bits == 64) return DType::f64;
  }
  throw ConfigError("Tensor::from_dlpack: unsupported DLPack dtype (code " +
                    std::to_string(t.code) + ", bits " + std::to_string(t.bits) + ", lanes " +
                    std::to_string(t.lanes) + ")");
}

constexpr const char* kFrom = "Tensor::from_dlpack";
// NumPy's limit (NPY_MAXDIMS): more is no tensor anyone exports, but a corrupt ndim.
constexpr int32_t kMaxDims = 64;

// Checks that `t` describes memory ferry can view and returns its shape.
// \throws ConfigError naming from_dlpack and the shape otherwise.
std::vector<int64_t> checked_shape(const DLTensor& t, DType dtype) {
  if (t.ndim < 0 || t.ndim > kMaxDims) {
    throw ConfigError(std::string(kFrom) + ": ndim " + std::to_string(t.ndim) +
                      " is not within 0.." + std::to_string(kMaxDims));
  }
  if (t.ndim > 0 && t.shape == nullptr) {
    throw ConfigError(std::string(kFrom) + ": null shape for ndim " + std::to_string(t.ndim));
  }
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  const int64_t n = detail::checked_numel(shape, kFrom);
  const auto nbytes = detail::try_mul<int64_t>(n, dtype_size(dtype));
  if (!nbytes) {
    throw ConfigError(std::string(kFrom) + ": shape " + shape_text(shape) + " of " +
                      std::string(dtype_name(dtype)) + " has more bytes than memory sizes hold");
  }
  // Strides of an empty tensor say nothing (and their products may not fit).
  if (t.strides != nullptr && n != 0) {
    int64_t expected = 1;  // a product of dimensions of a shape whose numel fits
    for (int32_t i = t.ndim; i > 0; --i) {
      const auto k = static_cast<std::size_t>(i - 1);
      if (shape[k] != 1 && t.strides[k] != expected) {
        throw ConfigError(std::string(kFrom) + ": only contiguous tensors are supported; shape " +
                          shape_text(shape) + " has stride " + std::to_string(t.strides[k]) +
                          " in dimension " + std::to_string(k) + ", expected " +
                          std::to_string(expected));
      }
      expected *= shape[k];
    }
  }
  if (t.data == nullptr) {
    if (*nbytes == 0) return shape;  // nothing to view
    throw ConfigError(std::string(kFrom) + ": null data for shape " + shape_text(shape));
  }
  // The bytes viewed, [data + byte_offset, + nbytes), must be addresses.
  const auto first =
      detail::try_add<std::uintptr_t>(reinterpret_cast<std::uintptr_t>(t.data), t.byte_offset);
  if (!first || !detail::try_add<std::uintptr_t>(*first, *nbytes) ||
      t.byte_offset > static_cast<std::uint64_t>(std::numeric_limits<std::ptrdiff_t>::max())) {
    throw ConfigError(std::string(kFrom) + ": byte_offset " + std::to_string(t.byte_offset) +
                      " and shape " + shape_text(shape) + " run past the end of memory");
  }
  return shape;
}

// What a DLManagedTensor keeps alive: the tensor (and so its storage), shape and strides.
struct Export {
  Tensor tensor;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
};

// Exports `self` as it is: the caller saw to its pending writes.
DLManagedTensor* export_dlpack(const Tensor& self) {
  const auto& shape = self.shape();
  if (shape.size() > static_cast<std::size_t>(std::numeric_limits<int32_t>::max())) {
    throw ConfigError("Tensor::to_dlpack: " + std::to_string(shape.size()) +
                      " dimensions do not fit DLPack's int32 ndim");
  }
  auto holder = std::make_unique<Export>();
  holder->tensor = self;
  holder->shape = shape;
  holder->strides.assign(shape.size(), 1);
  for (std::size_t i = shape.size(); i > 1; --i) {
    // Overflows only for an empty tensor (numel() fits otherwise), whose strides say nothing.
    const auto stride = detail::try_mul<int64_t>(holder->strides[i - 1], shape[i - 1]);
    holder->strides[i - 2] = stride.value_or(1);
  }
  DLTensor& t = holder->managed.dl_tensor;
  // The offset goes into the pointer, as PyTorch's own toDLPack does: at::fromDLPack (1.13)
  // ignores byte_offset, and a slice would arrive as the wrong rows.
  t.data = detail::TensorAccess::address(self);
  t.byte_offset = 0;
  const Device d = self.device();
  t.device = d.is_cpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, d.index()};
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype = to_dl(self.dtype());
  t.shape = holder->shape.data();
  t.strides = holder->strides.data();
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = [](DLManagedTensor* m) { delete static_cast<Export*>(m->manager_ctx); };
  return &holder.release()->managed;
}

}  // namespace

DLManagedTensor* Tensor::to_dlpack() const {
  if (!storage_) throw ConfigError("Tensor::to_dlpack: the tensor is undefined");
  synchronize();  // the consumer knows nothing of ferry's events
  return export_dlpack(*this);
}

DLManagedTensor* Tensor::to_dlpack(CUstream_st* stream) const {
  if (!storage_) throw ConfigError("Tensor::to_dlpack: the tensor is undefined");
  const Device d = device();
  if (d.is_cpu()) {
    synchronize();  // host memory: the consumer reads it on the host
    return export_dlpack(*this);
  }
  // The consumer's stream waits on the GPU; nothing at all when it is ordered already.
  if (!storage_->ordered_on(stream)) {
    detail::cuda::stream_wait_event(d.index(), stream, storage_->pending());
  }
  storage_->add_stream_use(stream);
  return export_dlpack(*this);
}

Tensor Tensor::from_dlpack(DLManagedTensor* managed) { return from_dlpack(managed, nullptr); }

Tensor Tensor::from_dlpack(DLManagedTensor* managed, CUstream_st* producer_stream) {
  if (managed == nullptr) throw ConfigError("Tensor::from_dlpack: null DLManagedTensor");
  // Owns `managed` from here on, whatever happens.
  std::shared_ptr<DLManagedTensor> owner(managed, [](DLManagedTensor* m) {
    if (m->deleter != nullptr) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  Device device;
  switch (t.device.device_type) {
    case kDLCPU:
    case kDLCUDAHost:
      device = Device::cpu();
      break;
    case kDLCUDA:
      if (t.device.device_id < 0) {
        throw ConfigError(std::string(kFrom) + ": negative CUDA device id " +
                          std::to_string(t.device.device_id));
      }
      device = Device::cuda(t.device.device_id);
      break;
    default:
      throw ConfigError("Tensor::from_dlpack: unsupported device type " +
                        std::to_string(t.device.device_type));
  }
  const DType dtype = from_dl(t.dtype);
  std::vector<int64_t> shape = checked_shape(t, dtype);
  // Null data of an empty tensor stays null: no offset is added to it.
  void* data = t.data == nullptr ? nullptr : static_cast<char*>(t.data) + t.byte_offset;
  Tensor out = wrap(data, std::move(shape), dtype, device, t.device.device_type == kDLCUDAHost,
                    std::move(owner));
  if (device.is_cuda()) {
    // The producer may still be writing it: ferry's work waits for its stream, on the GPU.
    check_usable(device);
    detail::Storage& storage = *detail::TensorAccess::storage(out);
    storage.set_stream(producer_stream);
    storage.set_pending(detail::cuda::record_event(device.index(), producer_stream), {},
                        producer_stream);
  }
  return out;
}

}  // namespace ferry
