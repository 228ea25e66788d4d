// Mixture::stratify: an epoch's samples laid out in stratified blocks (MixtureOptions::stratified).

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/memory_need.hpp"
#include "datasets/mixture/pass_order.hpp"
#include "ferry/mixture.hpp"

namespace ferry {

using mixture_detail::mix;
using mixture_detail::PassOrder;
using mixture_detail::u128;

std::vector<std::uint64_t> Mixture::stratify(const std::vector<std::uint64_t>& by_source,
                                             std::uint64_t seed, std::uint64_t epoch) const {
  const std::size_t m = sources_.size();
  const std::size_t e = epoch_size_;
  if (e == 0) return {};
  // Each source's samples of the epoch (by_source holds them source after source), shuffled.
  std::vector<std::size_t> first(m + 1, 0);
  for (std::size_t k = 0; k < m; ++k) first[k + 1] = first[k] + shares_[k];
  const std::string what = "Mixture: epoch_size " + std::to_string(e);
  std::vector<std::uint64_t> shuffled;
  detail::allocating(what, e, sizeof(std::uint64_t), "for a stratified epoch's lists",
                     [&] { shuffled.resize(e); });
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t s = shares_[k];
    if (s == 0) continue;
    const PassOrder order(s, mix(mix(seed ^ 0x7368756666ULL) ^ mix(epoch + 1) ^ mix(k + 1)));
    for (std::size_t j = 0; j < s; ++j) shuffled[first[k] + j] = by_source[first[k] + order(j)];
  }
  // Blocks of `stratified_` positions (the last one shorter): block g of size b holds
  // floor(b x share_k / e) of source k, and the samples those floors leave over go one per block
  // to the sources with the most left, block by block (which always fits: a source has fewer left
  // than blocks remain, and taking the largest keeps it so), so each block holds floor or ceil.
  const std::size_t bsize = stratified_;
  const std::size_t blocks = e / bsize + static_cast<std::size_t>(e % bsize != 0);
  const auto block_size = [&](std::size_t g) { return std::min(bsize, e - g * bsize); };
  const auto floor_of = [&](std::size_t b, std::size_t k) {
    return static_cast<std::size_t>(static_cast<u128>(b) * shares_[k] / e);
  };
  std::vector<std::size_t> left(m);
  for (std::size_t k = 0; k < m; ++k) {
    std::size_t floors = 0;
    // All blocks but the last are full.
    if (blocks > 1) floors = (blocks - 1) * floor_of(bsize, k);
    floors += floor_of(block_size(blocks - 1), k);
    left[k] = shares_[k] - floors;
  }
  std::vector<std::uint64_t> out;
  detail::allocating(what, e, sizeof(std::uint64_t), "for a stratified epoch's lists",
                     [&] { out.reserve(e); });
  std::vector<std::size_t> cursor(first.begin(), first.end() - 1);
  std::vector<std::size_t> count(m);
  std::vector<std::size_t> most(m);
  for (std::size_t g = 0; g < blocks; ++g) {
    const std::size_t b = block_size(g);
    std::size_t taken = 0;
    for (std::size_t k = 0; k < m; ++k) {
      count[k] = floor_of(b, k);
      taken += count[k];
    }
    std::iota(most.begin(), most.end(), std::size_t{0});
    std::stable_sort(most.begin(), most.end(),
                     [&](std::size_t a, std::size_t c) { return left[a] > left[c]; });
    for (std::size_t i = 0; taken < b; ++i) {
      const std::size_t k = most[i];  // i < m: fewer than m are left over in a block
      if (left[k] == 0) throw std::logic_error("Mixture: a stratified block cannot be filled");
      ++count[k];
      --left[k];
      ++taken;
    }
    for (std::size_t k = 0; k < m; ++k) {
      for (std::size_t j = 0; j < count[k]; ++j) out.push_back(shuffled[cursor[k]++]);
    }
  }
  return out;
}

}  // namespace ferry
