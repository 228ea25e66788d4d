#include "pipeline/staging.hpp"

#include <limits>
#include <string>

#include "core/checked.hpp"

namespace ferry {

std::size_t FieldSpec::sample_bytes() const noexcept {
  // Saturates where the true size does not fit (a negative dimension counts as such): the
  // loader refuses such a field before it sizes anything from it.
  std::size_t bytes = dtype_size(dtype);
  for (const int64_t d : shape) {
    if (d == 0) return 0;
  }
  for (const int64_t d : shape) {
    const auto r = detail::try_mul<std::size_t>(bytes, d);
    if (!r) return std::numeric_limits<std::size_t>::max();
    bytes = *r;
  }
  return bytes;
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
    const std::string what =
        "Loader: field \"" + f.name + "\" of a batch of " + std::to_string(batch_size);
    at = checked_add(at, kAlignment - 1, what) / kAlignment * kAlignment;
    offsets.push_back(at);
    const std::size_t n = checked_nbytes(f.shape, dtype_size(f.dtype), what);
    sample_bytes.push_back(n);
    at = checked_add(at, checked_mul(n, batch_size, what), what);
  }
  bytes = at == 0 ? 1 : at;
}

std::size_t SlotLayout::used_bytes(std::size_t count) const noexcept {
  if (offsets.empty()) return 0;
  return offsets.back() + sample_bytes.back() * count;
}

}  // namespace detail
}  // namespace ferry
