#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/dataset.hpp"

namespace ferry::detail {

/// Where the samples of one batch's ragged fields lie. Per ragged field r and position i: the
/// sample's first row within the field's region and its row count; per r: the batch's padded
/// length (pad) and the rows the batch uses. Sized once for a slot's capacity, then reused.
struct BatchRows {
  std::size_t capacity = 0;
  std::vector<std::uint64_t> starts;  ///< [r * capacity + i]
  std::vector<std::int64_t> lengths;  ///< [r * capacity + i]
  std::vector<std::int64_t> padded;   ///< per r: pad: the batch's Lmax after pad_multiple
  std::vector<std::uint64_t> rows;    ///< per r: rows used (pad: N x Lmax; pack: sum of lengths)

  void reset(std::size_t ragged_fields, std::size_t samples);
  /// The same contents as `other` (of the same sizes), without allocating.
  void copy_from(const BatchRows& other) noexcept;
};

/// Where each field of a batch lies in a staging slot (and in a device buffer, which has the
/// same layout): field f's samples are contiguous from offsets[f], each sample_bytes[f] long.
/// A ragged field's region holds up to `region_rows[f]` rows of sample_bytes[f] (one row) each,
/// and after all fields come, per ragged field, its lengths (i64 [capacity]) and its sample
/// starts (i32 [capacity + 1]). Regions start at 256-byte boundaries, as CUDA allocations do.
struct SlotLayout {
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> sample_bytes;
  std::vector<int> ragged;                   ///< per field: its index among ragged ones, or -1
  std::vector<std::uint64_t> region_rows;    ///< per field: rows of a ragged field's region
  std::vector<std::size_t> lengths_offsets;  ///< per ragged field
  std::vector<std::size_t> starts_offsets;   ///< per ragged field
  std::size_t capacity = 0;                  ///< samples per batch
  std::size_t bytes = 0;                     ///< the whole slot

  static constexpr std::size_t kAlignment = 256;
  /// `rows[f]`: the rows a ragged field f's region must hold (ignored for the others).
  /// \throws ConfigError when a size overflows.
  SlotLayout(const std::vector<FieldSpec>& fields, std::size_t batch_size,
             const std::vector<std::uint64_t>& rows = {});
  std::size_t ragged_count() const noexcept { return lengths_offsets.size(); }
  /// Bytes to copy for a batch of `count` samples of fixed-shape fields only: up to the end of
  /// the last field's samples.
  std::size_t used_bytes(std::size_t count) const noexcept;
  /// Calls `fn(offset, bytes)` for each part of the slot a batch of `count` samples uses, in
  /// order (one part when no field is ragged).
  template <class Fn>
  void for_each_used(std::size_t count, const BatchRows& rows, Fn fn) const;
};

template <class Fn>
void SlotLayout::for_each_used(std::size_t count, const BatchRows& rows, Fn fn) const {
  if (ragged_count() == 0) {
    fn(std::size_t{0}, used_bytes(count));
    return;
  }
  for (std::size_t f = 0; f < offsets.size(); ++f) {
    const int r = ragged[f];
    const std::size_t n =
        r < 0 ? count * sample_bytes[f] : rows.rows[static_cast<std::size_t>(r)] * sample_bytes[f];
    if (n > 0) fn(offsets[f], n);
  }
  for (std::size_t r = 0; r < ragged_count(); ++r) {
    if (count > 0) fn(lengths_offsets[r], count * sizeof(std::int64_t));
    fn(starts_offsets[r], (count + 1) * sizeof(std::int32_t));
  }
}

/// Makes the SampleRef of sample `position` of the batch at `batch` laid out by `layout`.
struct SampleRefs {
  static SampleRef make(const SlotLayout* layout, std::byte* batch, std::size_t position,
                        std::uint64_t seed, const BatchRows* rows = nullptr) noexcept {
    return {layout, batch, position, seed, rows};
  }
};

}  // namespace ferry::detail
