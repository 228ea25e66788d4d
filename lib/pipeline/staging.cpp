#include "pipeline/staging.hpp"

#include <numeric>

namespace ferry {

std::size_t FieldSpec::sample_bytes() const noexcept {
  const auto n = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
  return static_cast<std::size_t>(n) * dtype_size(dtype);
}

void* SampleRef::data(std::size_t field) const {
  return batch_ + layout_->offsets[field] + position_ * layout_->sample_bytes[field];
}

std::size_t SampleRef::nbytes(std::size_t field) const { return layout_->sample_bytes[field]; }

namespace detail {

SlotLayout::SlotLayout(const std::vector<FieldSpec>& fields, std::size_t batch_size)
    : capacity(batch_size) {
  std::size_t at = 0;
  for (const FieldSpec& f : fields) {
    at = (at + kAlignment - 1) / kAlignment * kAlignment;
    offsets.push_back(at);
    sample_bytes.push_back(f.sample_bytes());
    at += f.sample_bytes() * batch_size;
  }
  bytes = at == 0 ? 1 : at;
}

std::size_t SlotLayout::used_bytes(std::size_t count) const noexcept {
  if (offsets.empty()) return 0;
  return offsets.back() + sample_bytes.back() * count;
}

}  // namespace detail
}  // namespace ferry
