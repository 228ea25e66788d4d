#pragma once

// Row operations on batch buffers, the CPU twins of CUDA kernels (copy/cuda/kernels.cu): gathering
// rows by index, and padding packed rows. The host copy engine and the loader's CPU path run these.

#include <cstddef>
#include <cstdint>

namespace ferry::detail {

/// dst row i = src row indices[i], for `count` rows of `row_bytes`.
void gather_rows_cpu(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                     std::size_t row_bytes) noexcept;

/// Writes `bytes` bytes at `dst` as copies of one element of `element` bytes (1, 2, 4 or 8): the
/// little-endian low bytes of `pattern`. `bytes` is a multiple of `element`.
void fill_pattern(void* dst, std::size_t bytes, std::uint64_t pattern,
                  std::size_t element) noexcept;

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

/// The CPU twin of the padding kernel: runs on the calling thread.
void pad_rows_cpu(const PadRows& args) noexcept;

}  // namespace ferry::detail
