#pragma once

// An epoch's batches planned whole, for token budgets (LoaderOptions::max_tokens) and length
// bucketing (LoaderOptions::bucket_window). From (seed, epoch) only: the dataset's order is
// the sampler's permutation; with bucketing, each window of that order is sorted by length, cut
// into batches, and the window's batches are shuffled; otherwise the order is cut as it is.
// A batch takes consecutive samples while its tokens stay within max_tokens (pack: the sum of
// the lengths of the first ragged field; pad: N x Lmax after pad_multiple) and it holds at most
// batch_size; a sample over the budget alone is a batch of one. The global batches are dealt to
// the ranks in turn (rank r gets r, r + W, ...), wrapping around so every rank gets as many
// (or dropping the remainder with drop_last), as a distributed sampler does with samples.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/loader.hpp"

namespace ferry::detail {

class EpochPlan {
 public:
  /// `field`: the ragged field whose tokens count. Asks the length of every sample once.
  EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
            std::uint64_t epoch);

  /// Batches of this rank.
  std::size_t batches() const noexcept { return count_; }
  /// Writes batch k's dataset indices into `out` (resized within its capacity). \pre k < batches().
  void batch(std::size_t k, std::vector<std::uint64_t>& out) const;
  /// Tokens a batch of these lengths costs under `options` (pad: N x Lmax rounded; pack: sum).
  static std::uint64_t tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                              const LoaderOptions& options) noexcept;

 private:
  std::vector<std::uint64_t> order_;                             // the epoch's samples
  std::vector<std::pair<std::uint64_t, std::uint64_t>> global_;  // batches: [first, last) of order_
  std::size_t rank_;
  std::size_t world_;
  std::size_t count_ = 0;
};

}  // namespace ferry::detail
