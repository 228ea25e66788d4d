#include <cstring>
#include <set>
#include <string>

#include "ferry/dataset.hpp"
#include "ferry/error.hpp"

namespace ferry {

TensorDataset::TensorDataset(std::vector<std::pair<std::string, Tensor>> tensors) {
  constexpr const char* kWhere = "TensorDataset: ";
  if (tensors.empty()) throw ConfigError(std::string(kWhere) + "no tensors given");
  std::set<std::string> names;
  for (auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw ConfigError(kWhere + ("field \"" + name + "\" is undefined"));
    if (tensor.dim() == 0) {
      throw ConfigError(kWhere + ("field \"" + name + "\" is a scalar; dimension 0 is the sample"));
    }
    if (!names.insert(name).second)
      throw ConfigError(kWhere + ("field \"" + name + "\" given twice"));
    const Tensor& first = tensors.front().second;
    if (tensor.shape(0) != first.shape(0)) {
      throw ConfigError(kWhere + ("field \"" + name + "\" has " + std::to_string(tensor.shape(0)) +
                                  " samples, \"" + tensors.front().first + "\" has " +
                                  std::to_string(first.shape(0))));
    }
    if (tensor.device() != first.device()) {
      throw ConfigError(kWhere + ("field \"" + name + "\" is on " + tensor.device().str() + ", \"" +
                                  tensors.front().first + "\" on " + first.device().str()));
    }
    fields_.push_back({name, tensor.dtype(), {tensor.shape().begin() + 1, tensor.shape().end()}});
    tensors_.push_back(std::move(tensor));
  }
  size_ = static_cast<std::size_t>(tensors_.front().shape(0));
}

Device TensorDataset::device() const noexcept { return tensors_.front().device(); }

void TensorDataset::read(std::size_t index, SampleRef out) const {
  for (std::size_t f = 0; f < tensors_.size(); ++f) {
    const std::size_t n = out.nbytes(f);
    const auto* base = static_cast<const std::byte*>(tensors_[f].data());
    std::memcpy(out.data(f), base + index * n, n);
  }
}

}  // namespace ferry
