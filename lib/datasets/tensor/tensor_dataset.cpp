#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

[[noreturn, gnu::cold, gnu::noinline]] void off_host(const std::string& field, Device device) {
  throw ConfigError(
      "TensorDataset: read() copies rows in host memory, and field \"" + field + "\" lives on " +
      device.str() +
      ": a loader on that device gathers its batches there (or use to(Device::cpu()))");
}

}  // namespace

TensorDataset::TensorDataset(std::vector<std::pair<std::string, Tensor>> tensors) {
  constexpr const char* kWhere = "TensorDataset: ";
  if (tensors.empty()) throw ConfigError(std::string(kWhere) + "no tensors given");
  const auto& [first_name, first] = tensors.front();
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined()) throw ConfigError(kWhere + ("field \"" + name + "\" is undefined"));
    if (tensor.dim() == 0) {
      throw ConfigError(kWhere + ("field \"" + name + "\" is a scalar; dimension 0 is the sample"));
    }
    if (!names.insert(name).second) {
      throw ConfigError(kWhere + ("field \"" + name + "\" given twice"));
    }
    if (tensor.shape(0) != first.shape(0)) {
      throw ConfigError(kWhere +
                        ("field \"" + name + "\" has " + std::to_string(tensor.shape(0)) +
                         " samples, \"" + first_name + "\" has " + std::to_string(first.shape(0))));
    }
    if (tensor.device() != first.device()) {
      throw ConfigError(kWhere + ("field \"" + name + "\" is on " + tensor.device().str() + ", \"" +
                                  first_name + "\" on " + first.device().str()));
    }
  }
  size_ = static_cast<std::size_t>(first.shape(0));
  for (auto& [name, tensor] : tensors) {
    fields_.push_back({name, tensor.dtype(), {tensor.shape().begin() + 1, tensor.shape().end()}});
    // Host rows are read in place; the pointer is taken once (data() waits for pending writes).
    bases_.push_back(tensor.device().is_cpu() ? static_cast<const std::byte*>(tensor.data())
                                              : nullptr);
    tensors_.push_back(std::move(tensor));
  }
}

Device TensorDataset::device() const noexcept { return tensors_.front().device(); }

std::shared_ptr<TensorDataset> TensorDataset::to(Device device) const {
  std::vector<std::pair<std::string, Tensor>> moved;
  moved.reserve(tensors_.size());
  for (std::size_t f = 0; f < tensors_.size(); ++f) {
    moved.emplace_back(fields_[f].name, tensors_[f].to(device));
  }
  return std::make_shared<TensorDataset>(std::move(moved));
}

void TensorDataset::prefetch(std::size_t index) const noexcept {
  // The first lines of each row: the hardware prefetcher follows on from there.
  constexpr std::size_t kLine = 64;
  constexpr std::size_t kLines = 16;
  if (index >= size_) return;
  for (std::size_t f = 0; f < bases_.size(); ++f) {
    if (bases_[f] == nullptr) continue;
    const std::size_t n = fields_[f].sample_bytes();
    const std::byte* row = bases_[f] + index * n;
    for (std::size_t at = 0; at < n && at < kLine * kLines; at += kLine)
      __builtin_prefetch(row + at);
  }
}

void TensorDataset::read(std::size_t index, SampleRef out) const {
  for (std::size_t f = 0; f < bases_.size(); ++f) {
    const std::size_t n = out.nbytes(f);
    if (n == 0) continue;  // (no bytes: maybe no data pointer either)
    if (bases_[f] == nullptr) [[unlikely]] {
      off_host(fields_[f].name, tensors_[f].device());
    }
    std::memcpy(out.data(f), bases_[f] + index * n, n);
  }
}

}  // namespace ferry
