#pragma once

// The in-memory datasets (IdxDataset, CsvDataset) keep their values in host vectors, which
// their TensorDataset's tensors view without a copy: these make the one from the other.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/tensor.hpp"

namespace ferry::detail {

/// A CPU tensor of `shape` viewing `values` (no copy), which it keeps alive.
/// \pre shape holds values->size() elements.
template <class T>
Tensor view_rows(std::shared_ptr<std::vector<T>> values, const std::vector<std::int64_t>& shape) {
  void* const data = values->data();
  return Tensor::wrap(data, shape, dtype_of<T>(), Device::cpu(), /*pinned=*/false,
                      std::move(values));
}

/// The values of `t`, wherever it lives, copied into a new host vector. Blocking.
/// \throws DeviceError when t's device is not usable; ConfigError when T is not its dtype.
template <class T>
std::shared_ptr<std::vector<T>> host_values(const Tensor& t) {
  const Tensor host = t.cpu();
  const T* const first = host.data<T>();
  return std::make_shared<std::vector<T>>(first, first + host.numel());
}

}  // namespace ferry::detail
