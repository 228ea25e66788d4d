#pragma once

// The bytes of ferry's sidecar files (a shard's ".ferryidx" tar index, a video's index): values
// written little-endian, read back by a cursor that never reads past the end, and the FNV-1a
// checksum each file ends with.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace ferry::detail {

/// 64-bit FNV-1a of `bytes`.
inline std::uint64_t sidecar_fnv1a(std::string_view bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// Appends `v` (an integer, or a double by its bits) little-endian.
template <class T>
void sidecar_put(std::string& out, T v) {
  std::uint64_t bits = 0;
  if constexpr (std::is_same_v<T, double>) {
    bits = std::bit_cast<std::uint64_t>(v);
  } else {
    bits = static_cast<std::uint64_t>(v);
  }
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
}

/// Reads little-endian values from a sidecar's bytes, refusing to read past their end.
class SidecarCursor {
 public:
  explicit SidecarCursor(std::string_view bytes) : bytes_(bytes) {}
  template <class T>
  std::optional<T> get() {
    if (bytes_.size() - pos_ < sizeof(T)) return std::nullopt;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= std::uint64_t{static_cast<unsigned char>(bytes_[pos_ + i])} << (8 * i);
    }
    pos_ += sizeof(T);
    if constexpr (std::is_same_v<T, double>) {
      return std::bit_cast<double>(v);
    } else {
      return static_cast<T>(v);
    }
  }
  std::optional<std::string_view> take(std::size_t n) {
    if (bytes_.size() - pos_ < n) return std::nullopt;
    const std::string_view s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::size_t pos() const noexcept { return pos_; }
  std::size_t left() const noexcept { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace ferry::detail
