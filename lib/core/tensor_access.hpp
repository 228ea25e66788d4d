#pragma once

// ferry's own door into a Tensor: its storage, and tensors over a storage. The public header
// names TensorAccess only as a friend; users never see a Storage.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/storage.hpp"
#include "ferry/tensor.hpp"

namespace ferry::detail {

struct TensorAccess {
  /// The shared storage; null for an undefined tensor.
  static const std::shared_ptr<Storage>& storage(const Tensor& t) noexcept { return t.storage_; }
  /// The address of the tensor's first element, without waiting for pending writes (device
  /// work is queued behind them instead: ready_event()). \pre t.defined().
  static void* address(const Tensor& t) noexcept {
    return static_cast<char*>(t.storage_->data()) + t.offset_;
  }
  /// A tensor viewing `storage` from byte `offset`.
  static Tensor make(std::shared_ptr<Storage> storage, std::size_t offset,
                     std::vector<int64_t> shape, DType dtype) noexcept {
    return {std::move(storage), offset, std::move(shape), dtype};
  }
};

/// A new tensor of `shape`, its bytes uninitialised (pinned: from PinnedPool::global()); GPU
/// memory for work queued on `stream`.
/// \throws as Tensor::empty(), the message starting with `where` and naming the shape.
Tensor new_tensor(std::vector<int64_t> shape, DType dtype, Device device, bool pinned,
                  const char* where, Stream stream = nullptr);

}  // namespace ferry::detail
