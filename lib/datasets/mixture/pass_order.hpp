#pragma once

#include <bit>
#include <cstdint>

namespace ferry::mixture_detail {

// Stream positions are epoch x share, which may pass 2^64 before the division by a pass.
__extension__ using u128 = unsigned __int128;

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A keyed bijection on [0, n): a Feistel network on the smallest even bit width covering n,
// walking its cycles back into range. One pass of a source over its samples.
class PassOrder {
 public:
  PassOrder(std::uint64_t n, std::uint64_t key) noexcept : n_(n) {
    unsigned bits = n <= 4 ? 2 : static_cast<unsigned>(std::bit_width(n - 1));
    bits += bits & 1u;
    half_ = bits / 2;
    mask_ = (std::uint64_t{1} << half_) - 1;
    std::uint64_t k = mix(key);
    for (auto& r : keys_) {
      k = mix(k + 0x9e3779b97f4a7c15ULL);
      r = k;
    }
  }
  std::uint64_t operator()(std::uint64_t position) const noexcept {
    std::uint64_t x = round_trip(position);
    while (x >= n_) x = round_trip(x);
    return x;
  }

 private:
  std::uint64_t round_trip(std::uint64_t x) const noexcept {
    std::uint64_t left = x >> half_;
    std::uint64_t right = x & mask_;
    for (const std::uint64_t key : keys_) {
      const std::uint64_t next = left ^ (mix(right ^ key) & mask_);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }
  std::uint64_t n_;
  unsigned half_;
  std::uint64_t mask_;
  std::uint64_t keys_[6];
};

}  // namespace ferry::mixture_detail
