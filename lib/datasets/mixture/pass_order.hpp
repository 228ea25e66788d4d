#pragma once

#include <bit>
#include <cstddef>
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
  // Each of x[0..count) (positions < n) replaced by its value, as operator() gives it: the
  // round trips of kLanes positions at once (independent, so that their multiplications
  // overlap), and the values that land past n walked on together, rather than one walk at a
  // time, whose varying length would be mispredicted.
  void apply(std::uint64_t* x, std::size_t count) const noexcept {
    constexpr std::size_t kBlock = 64;
    std::uint32_t at[kBlock];
    std::uint64_t walking[kBlock];
    for (std::size_t b = 0; b < count; b += kBlock) {
      const std::size_t m = count - b < kBlock ? count - b : kBlock;
      std::uint64_t* const block = x + b;
      round_trips(block, m);
      std::size_t left = 0;
      for (std::size_t t = 0; t < m; ++t) {
        at[left] = static_cast<std::uint32_t>(t);
        walking[left] = block[t];
        left += block[t] >= n_ ? 1 : 0;
      }
      while (left != 0) {
        round_trips(walking, left);
        std::size_t still = 0;
        for (std::size_t t = 0; t < left; ++t) {
          block[at[t]] = walking[t];
          at[still] = at[t];
          walking[still] = walking[t];
          still += walking[t] >= n_ ? 1 : 0;
        }
        left = still;
      }
    }
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
  static constexpr std::size_t kLanes = 8;
  // round_trip() of each of x[0..count), in place.
  void round_trips(std::uint64_t* x, std::size_t count) const noexcept {
    std::size_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      std::uint64_t left[kLanes];
      std::uint64_t right[kLanes];
      for (std::size_t a = 0; a < kLanes; ++a) {
        left[a] = x[i + a] >> half_;
        right[a] = x[i + a] & mask_;
      }
      for (const std::uint64_t key : keys_) {
        for (std::size_t a = 0; a < kLanes; ++a) {
          const std::uint64_t next = left[a] ^ (mix(right[a] ^ key) & mask_);
          left[a] = right[a];
          right[a] = next;
        }
      }
      for (std::size_t a = 0; a < kLanes; ++a) x[i + a] = (left[a] << half_) | right[a];
    }
    for (; i < count; ++i) x[i] = round_trip(x[i]);
  }
  std::uint64_t n_;
  unsigned half_;
  std::uint64_t mask_;
  std::uint64_t keys_[6];
};

}  // namespace ferry::mixture_detail
