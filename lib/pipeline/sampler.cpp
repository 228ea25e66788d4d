#include "pipeline/sampler.hpp"

#include <algorithm>
#include <bit>
#include <optional>

#include "core/checked.hpp"

namespace ferry::detail {

Permutation::Permutation(std::uint64_t n, std::uint64_t key) noexcept : n_(n) {
  unsigned bits = n <= 4 ? 2 : static_cast<unsigned>(std::bit_width(n - 1));
  bits += bits & 1u;  // balanced halves
  half_bits_ = bits / 2;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
  std::uint64_t k = mix64(key);
  for (auto& round_key : keys_) {
    k = mix64(k + 0x9e3779b97f4a7c15ULL);
    round_key = k;
  }
}

std::uint64_t Permutation::feistel(std::uint64_t x) const noexcept {
  std::uint64_t left = x >> half_bits_;
  std::uint64_t right = x & half_mask_;
  for (const std::uint64_t key : keys_) {
    const std::uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

std::uint64_t Permutation::operator()(std::uint64_t position) const noexcept {
  // The domain is at most 4n, so the walk ends after a few steps on average; it ends always,
  // as x lies on a cycle of the bijection that contains position, which is < n.
  std::uint64_t x = feistel(position);
  while (x >= n_) x = feistel(x);
  return x;
}

Sampler::Sampler(std::size_t dataset_size, Options options, std::uint64_t start) noexcept
    : n_(dataset_size), options_(options), start_(std::min<std::uint64_t>(start, dataset_size)) {
  const std::size_t w = std::max<std::size_t>(options_.world_size, 1);
  const std::size_t left = n_ - static_cast<std::size_t>(start_);
  // Rounding up without left + w - 1, which overflows for sizes near the top of size_t.
  per_rank_ = left / w + static_cast<std::size_t>(!options_.drop_last && left % w != 0);
  const std::size_t b = std::max<std::size_t>(options_.batch_size, 1);
  batches_ = per_rank_ / b + static_cast<std::size_t>(!options_.drop_last && per_rank_ % b != 0);
}

std::size_t Sampler::batch_size(std::size_t k) const noexcept {
  const std::size_t begin = k * options_.batch_size;
  return std::min(options_.batch_size, per_rank_ - begin);
}

void Sampler::batch(std::uint64_t epoch, std::size_t k, std::vector<std::uint64_t>& out) const {
  const std::size_t count = batch_size(k);
  out.resize(count);
  const std::size_t w = std::max<std::size_t>(options_.world_size, 1);
  const Permutation perm = epoch_permutation(n_, options_.seed, epoch);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t j = k * options_.batch_size + i;  // this rank's j-th sample of the run
    // start + j x w + rank < n + w (j < per_rank), which the loader checks does not overflow;
    // past n, padding wraps around to the epoch's first positions.
    const std::uint64_t global = (start_ + j * w + options_.rank) % n_;
    out[i] = options_.shuffle ? perm(global) : global;
  }
}

std::size_t Sampler::number_offset() const noexcept {
  if (start_ == 0) return 0;
  if (start_ == n_) return Sampler(n_, options_).batches();
  const auto per_step =
      try_mul<std::uint64_t>(options_.batch_size, std::max<std::size_t>(options_.world_size, 1));
  if (!per_step || start_ % *per_step != 0) return 0;
  return static_cast<std::size_t>(start_ / *per_step);
}

std::uint64_t Sampler::position_after(std::size_t k) const noexcept {
  if (k >= batches_ && !options_.drop_last) return n_;
  const std::size_t w = std::max<std::size_t>(options_.world_size, 1);
  // k x batch_size x w samples, which overflows only far past n: then the epoch is consumed.
  const auto per_step = try_mul<std::uint64_t>(options_.batch_size, w);
  const auto consumed = per_step ? try_mul<std::uint64_t>(*per_step, k) : std::nullopt;
  if (!consumed || *consumed >= n_ - start_) return n_;
  return start_ + *consumed;
}

}  // namespace ferry::detail
