#include "core/row_ops.hpp"

#include <cstring>

namespace ferry::detail {

void gather_rows_cpu(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                     std::size_t row_bytes) noexcept {
  const auto* from = static_cast<const std::byte*>(src);
  auto* to = static_cast<std::byte*>(dst);
  for (std::size_t i = 0; i < count; ++i) {
    std::memcpy(to + i * row_bytes, from + indices[i] * row_bytes, row_bytes);
  }
}

void fill_pattern(void* dst, std::size_t bytes, std::uint64_t pattern,
                  std::size_t element) noexcept {
  auto* out = static_cast<std::byte*>(dst);
  if (pattern == 0) {
    std::memset(out, 0, bytes);
    return;
  }
  for (std::size_t at = 0; at < bytes; at += element) std::memcpy(out + at, &pattern, element);
}

void pad_rows_cpu(const PadRows& a) noexcept {
  const auto* src = static_cast<const std::byte*>(a.src);
  auto* dst = static_cast<std::byte*>(a.dst);
  const auto lmax = static_cast<std::size_t>(a.lmax);
  for (std::int64_t i = 0; i < a.count; ++i) {
    const auto length = static_cast<std::size_t>(a.lengths[i]);
    std::byte* out = dst + static_cast<std::size_t>(i) * lmax * a.row_bytes;
    if (length > 0) {
      std::memcpy(out, src + static_cast<std::size_t>(a.starts[i]) * a.row_bytes,
                  length * a.row_bytes);
    }
    fill_pattern(out + length * a.row_bytes, (lmax - length) * a.row_bytes, a.pad, a.element);
  }
}

}  // namespace ferry::detail
