#include "core/pad_rows.hpp"

#include <cstring>

namespace ferry::detail {

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
    const std::size_t padding = (lmax - length) * a.row_bytes;
    if (a.pad == 0) {
      std::memset(out + length * a.row_bytes, 0, padding);
      continue;
    }
    for (std::size_t at = 0; at < padding; at += a.element) {
      std::memcpy(out + length * a.row_bytes + at, &a.pad, a.element);  // little-endian
    }
  }
}

}  // namespace ferry::detail
