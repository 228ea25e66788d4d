#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ferry/dataset.hpp"

namespace ferry::detail {

/// Where each field of a batch lies in a staging slot (and in a device buffer, which has the
/// same layout): field f's samples are contiguous from offsets[f], each sample_bytes[f] long.
/// Fields start at 256-byte boundaries, as CUDA allocations do.
struct SlotLayout {
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> sample_bytes;
  std::size_t capacity = 0;  ///< samples per batch
  std::size_t bytes = 0;     ///< the whole slot

  static constexpr std::size_t kAlignment = 256;
  SlotLayout(const std::vector<FieldSpec>& fields, std::size_t batch_size);
  /// Bytes to copy for a batch of `count` samples: up to the end of the last field's samples.
  std::size_t used_bytes(std::size_t count) const noexcept;
};

/// Makes the SampleRef of sample `position` of the batch at `batch` laid out by `layout`.
struct SampleRefs {
  static SampleRef make(const SlotLayout* layout, std::byte* batch, std::size_t position,
                        std::uint64_t seed) noexcept {
    return {layout, batch, position, seed};
  }
};

}  // namespace ferry::detail
