#pragma once

// Packed rows to padded ones: the work behind padding a ragged field on the device (so that
// only the samples' own rows cross the bus). The CPU twin lives here; the CUDA kernel
// (copy/cuda/kernels.cu) computes the same bytes.

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// Sample i's rows [starts[i], starts[i] + lengths[i]) of `src` become rows
/// [i * lmax, i * lmax + lengths[i]) of `dst`, and its other rows up to lmax are `pad`: one
/// element of `element` bytes (its little-endian low bytes), repeated. `starts` (i32
/// [count + 1]) and `lengths` (i64 [count]) lie in the same memory as src and dst.
struct PadRows {
  const void* src = nullptr;
  void* dst = nullptr;
  const std::int32_t* starts = nullptr;
  const std::int64_t* lengths = nullptr;
  std::int64_t count = 0;
  std::int64_t lmax = 0;
  std::size_t row_bytes = 0;  ///< a multiple of element
  std::size_t element = 1;    ///< 1, 2, 4 or 8
  std::uint64_t pad = 0;
};

/// The CPU twin: runs on the calling thread.
void pad_rows_cpu(const PadRows& args) noexcept;

}  // namespace ferry::detail
