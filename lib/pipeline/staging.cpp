#include "pipeline/staging.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/checked.hpp"

namespace ferry {

std::size_t FieldSpec::sample_bytes() const noexcept {
  // Saturates where the true size does not fit (a negative dimension counts as such): the
  // loader refuses such a field before it sizes anything from it.
  std::size_t bytes = dtype_size(dtype);
  const auto first = shape.begin() + (is_ragged() ? 1 : 0);  // a ragged field: one row
  for (auto d = first; d != shape.end(); ++d) {
    if (*d == 0) return 0;
  }
  for (auto it = first; it != shape.end(); ++it) {
    const int64_t d = *it;
    const auto r = detail::try_mul<std::size_t>(bytes, d);
    if (!r) return std::numeric_limits<std::size_t>::max();
    bytes = *r;
  }
  return bytes;
}

void* SampleRef::data(std::size_t field) const {
  const int r = layout_->ragged[field];
  if (r < 0) return batch_ + layout_->offsets[field] + position_ * layout_->sample_bytes[field];
  const std::uint64_t row =
      rows_->starts[static_cast<std::size_t>(r) * rows_->capacity + position_];
  return batch_ + layout_->offsets[field] + row * layout_->sample_bytes[field];
}

std::size_t SampleRef::nbytes(std::size_t field) const {
  const int r = layout_->ragged[field];
  if (r < 0) return layout_->sample_bytes[field];
  const std::int64_t rows =
      rows_->lengths[static_cast<std::size_t>(r) * rows_->capacity + position_];
  return static_cast<std::size_t>(rows) * layout_->sample_bytes[field];
}

std::int64_t Dataset::length(std::size_t index, std::size_t field) const {
  throw ConfigError("Dataset: field " + std::to_string(field) +
                    " is ragged but the dataset "
                    "does not override Dataset::length (asked for sample " +
                    std::to_string(index) + ")");
}

std::vector<std::uint64_t> Dataset::epoch_indices(std::uint64_t seed, std::uint64_t epoch) const {
  static_cast<void>(seed);
  static_cast<void>(epoch);
  std::vector<std::uint64_t> all(size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

std::uint64_t Dataset::epoch_index(std::uint64_t seed, std::uint64_t epoch,
                                   std::uint64_t position) const {
  return epoch_indices(seed, epoch).at(position);
}

namespace detail {

void BatchRows::reset(std::size_t ragged_fields, std::size_t samples) {
  capacity = samples;
  starts.assign(ragged_fields * samples, 0);
  lengths.assign(ragged_fields * samples, 0);
  padded.assign(ragged_fields, 0);
  rows.assign(ragged_fields, 0);
}

void BatchRows::copy_from(const BatchRows& other) noexcept {
  capacity = other.capacity;
  std::copy(other.starts.begin(), other.starts.end(), starts.begin());
  std::copy(other.lengths.begin(), other.lengths.end(), lengths.begin());
  std::copy(other.padded.begin(), other.padded.end(), padded.begin());
  std::copy(other.rows.begin(), other.rows.end(), rows.begin());
}

SlotLayout::SlotLayout(const std::vector<FieldSpec>& fields, std::size_t batch_size,
                       const std::vector<std::uint64_t>& rows)
    : capacity(batch_size) {
  std::size_t at = 0;
  const auto align = [&](const std::string& what) {
    at = checked_add(at, kAlignment - 1, what) / kAlignment * kAlignment;
  };
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const FieldSpec& f = fields[i];
    const std::string what =
        "Loader: field \"" + f.name + "\" of a batch of " + std::to_string(batch_size);
    align(what);
    offsets.push_back(at);
    if (f.is_ragged()) {
      // One row: the shape after the ragged dimension.
      const std::vector<std::int64_t> row(f.shape.begin() + 1, f.shape.end());
      const std::size_t n = checked_nbytes(row, dtype_size(f.dtype), what);
      const std::uint64_t region = i < rows.size() ? rows[i] : 0;
      sample_bytes.push_back(n);
      ragged.push_back(static_cast<int>(lengths_offsets.size()));
      region_rows.push_back(region);
      lengths_offsets.push_back(0);  // placed after every field, below
      starts_offsets.push_back(0);
      at = checked_add(at, checked_mul(n, region, what), what);
    } else {
      const std::size_t n = checked_nbytes(f.shape, dtype_size(f.dtype), what);
      sample_bytes.push_back(n);
      ragged.push_back(-1);
      region_rows.push_back(0);
      at = checked_add(at, checked_mul(n, batch_size, what), what);
    }
  }
  const std::string what = "Loader: a batch of " + std::to_string(batch_size);
  for (std::size_t r = 0; r < lengths_offsets.size(); ++r) {
    align(what);
    lengths_offsets[r] = at;
    at = checked_add(at, checked_mul(batch_size, sizeof(std::int64_t), what), what);
    align(what);
    starts_offsets[r] = at;
    at = checked_add(at, checked_mul(checked_add(batch_size, 1, what), sizeof(std::int32_t), what),
                     what);
  }
  bytes = at == 0 ? 1 : at;
}

std::size_t SlotLayout::used_bytes(std::size_t count) const noexcept {
  if (offsets.empty()) return 0;
  return offsets.back() + sample_bytes.back() * count;
}

}  // namespace detail
}  // namespace ferry
