#include "ferry/tensor.hpp"

#include <cstring>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>

#include "copy/copy_engine.hpp"
#include "copy/cuda/cuda_api.hpp"
#include "core/storage.hpp"

namespace ferry {
namespace {

using detail::CopyKind;
using detail::Storage;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t count_of(const std::vector<int64_t>& shape, const char* where) {
  int64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) {
      throw ConfigError(std::string(where) + ": negative dimension in shape " + shape_text(shape));
    }
    n *= d;
  }
  return n;
}

detail::CopyEngine& engine_of(Device device) {
  check_usable(device);
  return detail::cuda::engine(device.index());
}

}  // namespace

Tensor::Tensor() noexcept = default;
Tensor::~Tensor() = default;
Tensor::Tensor(const Tensor&) noexcept = default;
Tensor& Tensor::operator=(const Tensor&) noexcept = default;
Tensor::Tensor(Tensor&&) noexcept = default;
Tensor& Tensor::operator=(Tensor&&) noexcept = default;

Tensor::Tensor(std::shared_ptr<detail::Storage> storage, std::size_t offset,
               std::vector<int64_t> shape, DType dtype) noexcept
    : storage_(std::move(storage)), offset_(offset), shape_(std::move(shape)), dtype_(dtype) {}

Tensor Tensor::empty(std::vector<int64_t> shape, DType dtype, Device device, bool pinned) {
  const int64_t n = count_of(shape, "Tensor::empty");
  if (pinned && !device.is_cpu()) {
    throw ConfigError("Tensor::empty: pinned memory is host memory; asked for it on " +
                      device.str());
  }
  const std::size_t nbytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  return {detail::allocate_storage(nbytes, device, pinned), 0, std::move(shape), dtype};
}

Tensor Tensor::zeros(std::vector<int64_t> shape, DType dtype, Device device) {
  Tensor host = empty(std::move(shape), dtype);
  if (host.nbytes() != 0) std::memset(host.data(), 0, host.nbytes());
  return host.to(device);
}

Tensor Tensor::from_bytes(const void* data, std::size_t nbytes, std::vector<int64_t> shape,
                          DType dtype) {
  const int64_t n = count_of(shape, "Tensor::from");
  if (static_cast<std::size_t>(n) * dtype_size(dtype) != nbytes) {
    throw ConfigError("Tensor::from: shape " + shape_text(shape) + " of " +
                      std::string(dtype_name(dtype)) + " needs " +
                      std::to_string(static_cast<std::size_t>(n) * dtype_size(dtype)) +
                      " bytes, given " + std::to_string(nbytes));
  }
  Tensor t = empty(std::move(shape), dtype);
  if (nbytes != 0) std::memcpy(t.data(), data, nbytes);
  return t;
}

Tensor Tensor::wrap(void* data, std::vector<int64_t> shape, DType dtype, Device device, bool pinned,
                    std::shared_ptr<void> owner) {
  const int64_t n = count_of(shape, "Tensor::wrap");
  const std::size_t nbytes = static_cast<std::size_t>(n) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(Storage::External{data, nbytes, std::move(owner)},
                                           device, pinned && device.is_cpu());
  return {std::move(storage), 0, std::move(shape), dtype};
}

Device Tensor::device() const noexcept { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::numel() const noexcept {
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  if (storage_->device().is_cpu()) storage_->pending().synchronize();
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::check_dtype(DType requested) const {
  if (requested != dtype_) {
    throw ConfigError("Tensor::data<T>: the tensor holds " + std::string(dtype_name(dtype_)) +
                      ", asked for " + std::string(dtype_name(requested)));
  }
}

bool Tensor::is_pinned() const noexcept { return storage_ && storage_->pinned(); }

Event Tensor::ready_event() const { return storage_ ? storage_->pending() : Event(); }

void Tensor::synchronize() const { ready_event().synchronize(); }

Tensor Tensor::to(Device device, bool non_blocking) const {
  if (!storage_) throw ConfigError("Tensor::to: the tensor is undefined");
  const Device from = this->device();
  if (from == device) return *this;

  check_usable(device);
  const std::size_t n = nbytes();
  // The engine whose stream carries the copy: the GPU's side of it.
  detail::CopyEngine& engine = engine_of(device.is_cuda() ? device : from);
  const bool from_pinned = from.is_cpu() && is_pinned();
  // Asynchronous when the host side is pinned, or both sides are device memory, as in CUDA.
  const bool async = non_blocking && (from.is_cuda() || from_pinned);
  Tensor out = empty(shape_, dtype_, device, /*pinned=*/device.is_cpu() && async);
  const void* src = static_cast<const char*>(storage_->data()) + offset_;

  CopyKind kind = CopyKind::device_to_device;
  if (from.is_cpu()) kind = CopyKind::host_to_device;
  if (device.is_cpu()) kind = CopyKind::device_to_host;
  engine.wait(storage_->pending());
  engine.copy_async(out.storage_->data(), src, n, kind);
  if (async) {
    out.storage_->set_pending(engine.record(), {storage_});
  } else {
    engine.synchronize();
  }
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (!storage_) throw ConfigError("Tensor::to: the tensor is undefined");
  if (dtype == dtype_) return *this;
  const Device device = this->device();
  Tensor out = empty(shape_, dtype, device);
  const auto count = static_cast<std::size_t>(numel());
  if (device.is_cpu()) {
    convert(data(), dtype_, out.storage_->data(), dtype, count);
    return out;
  }
  detail::CopyEngine& engine = engine_of(device);
  engine.wait(storage_->pending());
  engine.convert_async(static_cast<const char*>(storage_->data()) + offset_, dtype_,
                       out.storage_->data(), dtype, count);
  out.storage_->set_pending(engine.record(), {storage_});
  return out;
}

Tensor Tensor::to(Device device, DType dtype, bool non_blocking) const {
  // Copy first, then convert on the destination: uint8 crosses the bus, floats are made there.
  return to(device, non_blocking).to(dtype);
}

Tensor Tensor::cpu() const { return to(Device::cpu()); }

Tensor Tensor::pin_memory() const {
  if (!storage_) throw ConfigError("Tensor::pin_memory: the tensor is undefined");
  if (!device().is_cpu()) {
    throw ConfigError("Tensor::pin_memory: only host memory can be pinned; this tensor is on " +
                      device().str());
  }
  if (is_pinned()) return *this;
  Tensor out = empty(shape_, dtype_, Device::cpu(), /*pinned=*/true);
  if (nbytes() != 0) std::memcpy(out.data(), data(), nbytes());
  return out;
}

Tensor Tensor::clone() const {
  if (!storage_) return {};
  const Device device = this->device();
  if (device.is_cpu()) {
    Tensor out = empty(shape_, dtype_, device, is_pinned());
    if (nbytes() != 0) std::memcpy(out.data(), data(), nbytes());
    return out;
  }
  Tensor out = empty(shape_, dtype_, device);
  detail::CopyEngine& engine = engine_of(device);
  engine.wait(storage_->pending());
  engine.copy_async(out.storage_->data(), static_cast<const char*>(storage_->data()) + offset_,
                    nbytes(), CopyKind::device_to_device);
  out.storage_->set_pending(engine.record(), {storage_});
  return out;
}

Tensor Tensor::slice(int64_t start, int64_t length) const {
  if (shape_.empty()) throw ConfigError("Tensor::slice: a scalar has no dimension 0");
  if (start < 0 || length < 0 || start + length > shape_[0]) {
    throw ConfigError("Tensor::slice: rows [" + std::to_string(start) + ", " +
                      std::to_string(start + length) + ") outside [0, " +
                      std::to_string(shape_[0]) + ")");
  }
  std::vector<int64_t> shape = shape_;
  shape[0] = length;
  const auto row_bytes =
      static_cast<std::size_t>(shape_[0] == 0 ? 0 : numel() / shape_[0]) * dtype_size(dtype_);
  return {storage_, offset_ + static_cast<std::size_t>(start) * row_bytes, std::move(shape),
          dtype_};
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  if (count_of(shape, "Tensor::reshape") != numel()) {
    throw ConfigError("Tensor::reshape: cannot view " + shape_text(shape_) + " as " +
                      shape_text(shape));
  }
  return {storage_, offset_, std::move(shape), dtype_};
}

}  // namespace ferry
