#include "ferry/tensor.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "core/shape_text.hpp"
#include "core/storage.hpp"
#include "core/tensor_access.hpp"

namespace ferry {
namespace {

using detail::new_tensor;
using detail::shape_text;
using detail::Storage;

// The bytes of `shape` elements of `dtype`, in int64 so that every offset into them is a valid
// pointer difference. \throws ConfigError naming `where` and the shape when they do not fit.
std::size_t nbytes_of(const std::vector<int64_t>& shape, DType dtype, const char* where) {
  if (dtype_size(dtype) == 0) {
    throw ConfigError(std::string(where) + ": unknown dtype " +
                      std::to_string(static_cast<int>(dtype)) + " for shape " + shape_text(shape));
  }
  const int64_t n = detail::checked_numel(shape, where);
  if (const auto bytes = detail::try_mul<int64_t>(n, dtype_size(dtype))) {
    return static_cast<std::size_t>(*bytes);
  }
  throw ConfigError(std::string(where) + ": shape " + shape_text(shape) + " of " +
                    std::string(dtype_name(dtype)) + " has more bytes than memory sizes hold");
}

// New storage for `shape`, its failures named after `where` and the shape.
std::shared_ptr<Storage> allocate(const std::vector<int64_t>& shape, DType dtype, Device device,
                                  bool pinned, const char* where, Stream stream) {
  const std::size_t nbytes = nbytes_of(shape, dtype, where);
  if (pinned && !device.is_cpu()) {
    throw ConfigError(std::string(where) + ": pinned memory is host memory; asked for it on " +
                      device.str());
  }
  check_usable(device);  // its own message: the device, not the shape, is the problem
  const std::string context = std::string(where) + ": shape " + shape_text(shape) + " of " +
                              std::string(dtype_name(dtype)) + ": ";
  try {
    return detail::allocate_storage(nbytes, device, pinned, stream);
  } catch (const DeviceError& e) {
    throw DeviceError(context + e.what());
  } catch (const Error& e) {
    throw ConfigError(context + e.what());
  }
}

}  // namespace

Tensor detail::new_tensor(std::vector<int64_t> shape, DType dtype, Device device, bool pinned,
                          const char* where, Stream stream) {
  auto storage = allocate(shape, dtype, device, pinned, where, stream);
  return TensorAccess::make(std::move(storage), 0, std::move(shape), dtype);
}

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
  return new_tensor(std::move(shape), dtype, device, pinned, "Tensor::empty");
}

Tensor Tensor::from_bytes(const void* data, std::size_t nbytes, std::vector<int64_t> shape,
                          DType dtype) {
  constexpr const char* kWhere = "Tensor::from";
  const std::size_t needed = nbytes_of(shape, dtype, kWhere);
  if (needed != nbytes) {
    throw ConfigError(std::string(kWhere) + ": shape " + shape_text(shape) + " of " +
                      std::string(dtype_name(dtype)) + " needs " + std::to_string(needed) +
                      " bytes, given " + std::to_string(nbytes));
  }
  if (data == nullptr && nbytes != 0) {
    throw ConfigError(std::string(kWhere) + ": null data for shape " + shape_text(shape) + " of " +
                      std::to_string(nbytes) + " bytes");
  }
  Tensor t = new_tensor(std::move(shape), dtype, Device::cpu(), false, kWhere);
  if (nbytes != 0) std::memcpy(t.data(), data, nbytes);
  return t;
}

Tensor Tensor::wrap(void* data, std::vector<int64_t> shape, DType dtype, Device device, bool pinned,
                    std::shared_ptr<void> owner) {
  constexpr const char* kWhere = "Tensor::wrap";
  const std::size_t nbytes = nbytes_of(shape, dtype, kWhere);
  if (data == nullptr && nbytes != 0) {
    throw ConfigError(std::string(kWhere) + ": null data for shape " + shape_text(shape) + " of " +
                      std::to_string(nbytes) + " bytes");
  }
  auto storage = std::make_shared<Storage>(Storage::External{data, nbytes, std::move(owner)},
                                           device, pinned && device.is_cpu());
  return {std::move(storage), 0, std::move(shape), dtype};
}

Device Tensor::device() const noexcept { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::numel() const noexcept {
  // A zero anywhere first: the product of the other dimensions need not fit (checked_numel).
  if (std::find(shape_.begin(), shape_.end(), 0) != shape_.end()) return 0;
  return std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>());
}

void* Tensor::data() const {
  if (!storage_) return nullptr;
  if (storage_->device().is_cpu()) storage_->pending().synchronize();
  return static_cast<char*>(storage_->data()) + offset_;
}

void Tensor::throw_bad_dim(std::size_t dim) const {
  throw ConfigError("Tensor::shape: dim " + std::to_string(dim) + " out of range for shape " +
                    shape_text(shape_) + " of rank " + std::to_string(shape_.size()));
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

Tensor Tensor::pin_memory() const {
  if (!storage_) throw ConfigError("Tensor::pin_memory: the tensor is undefined");
  if (!device().is_cpu()) {
    throw ConfigError("Tensor::pin_memory: only host memory can be pinned; this tensor is on " +
                      device().str());
  }
  if (is_pinned()) return *this;
  Tensor out = new_tensor(shape_, dtype_, Device::cpu(), /*pinned=*/true, "Tensor::pin_memory");
  if (nbytes() != 0) std::memcpy(out.data(), data(), nbytes());
  return out;
}

Tensor Tensor::slice(int64_t start, int64_t length) const {
  if (!storage_) throw ConfigError("Tensor::slice: the tensor is undefined");
  if (shape_.empty()) throw ConfigError("Tensor::slice: a scalar has no dimension 0");
  const auto end = detail::try_add<int64_t>(start, length);
  if (start < 0 || length < 0 || !end || *end > shape_[0]) {
    throw ConfigError("Tensor::slice: " + std::to_string(length) + " rows from row " +
                      std::to_string(start) + " are not within dimension 0 of shape " +
                      shape_text(shape_));
  }
  std::vector<int64_t> shape = shape_;
  shape[0] = length;
  const auto row_bytes =
      static_cast<std::size_t>(shape_[0] == 0 ? 0 : numel() / shape_[0]) * dtype_size(dtype_);
  return {storage_, offset_ + static_cast<std::size_t>(start) * row_bytes, std::move(shape),
          dtype_};
}

Tensor Tensor::reshape(std::vector<int64_t> shape) const {
  if (!storage_) throw ConfigError("Tensor::reshape: the tensor is undefined");
  if (detail::checked_numel(shape, "Tensor::reshape") != numel()) {
    throw ConfigError("Tensor::reshape: cannot view " + shape_text(shape_) + " as " +
                      shape_text(shape));
  }
  return {storage_, offset_, std::move(shape), dtype_};
}

}  // namespace ferry
