#pragma once

// An epoch's batches planned whole, for token budgets (LoaderOptions::max_tokens) and length
// bucketing (LoaderOptions::bucket_window). From (seed, epoch) only: the dataset's order is
// the sampler's permutation; with bucketing, each window of that order is sorted by length, cut
// into batches, and the window's batches are shuffled; otherwise the order is cut as it is.
// A batch takes consecutive samples while its tokens stay within max_tokens (pack: the sum of
// the lengths of the first ragged field; pad: N x Lmax after pad_multiple) and it holds at most
// batch_size; a sample over the budget alone is a batch of one. The global batches do not depend
// on the world size. They are dealt to the ranks in turn from the run's first one G (rank r gets
// G + r, G + r + W, ...), wrapping around to the epoch's first batches so every rank gets as
// many (or dropping the remainder with drop_last), as the sampler does with samples.
//
// The epoch's global position after g global batches is the samples they hold: without
// bucketing, batches are consecutive runs of the epoch's order, so the position is a prefix of
// that order whatever batch_size or max_tokens cut it (a run may start at any position: batches
// are cut from there). With bucketing, a window's batches are shuffled, so a position names a
// prefix of the batches, and only a plan of the same windows and cuts (plan_key) can resume it.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/loader.hpp"

namespace ferry::detail {

class EpochPlan {
 public:
  /// `field`: the ragged field whose tokens count. Asks the length of every sample from
  /// `start` on once. The run starts at global position `start`.
  /// \throws ConfigError when `start` lies inside a batch of a bucketed plan.
  EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
            std::uint64_t epoch, std::uint64_t start = 0);

  /// Batches of this rank in the run.
  std::size_t batches() const noexcept { return count_; }
  /// Writes batch k's dataset indices into `out` (resized within its capacity). \pre k < batches().
  void batch(std::size_t k, std::vector<std::uint64_t>& out) const;
  /// The epoch's global position once every rank has received the run's first k batches.
  std::uint64_t position_after(std::size_t k) const noexcept;
  /// The number of the run's first batch among a run from 0's: the batch reaching the run's
  /// start (k x world_size global batches before it, or the epoch's end), else 0.
  std::size_t number_offset() const noexcept { return number_offset_; }
  /// Tokens a batch of these lengths costs under `options` (pad: N x Lmax rounded; pack: sum).
  static std::uint64_t tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                              const LoaderOptions& options) noexcept;
  /// 0 when a position is a prefix of the epoch's order (no bucketing), so any batch_size or
  /// max_tokens resumes it; else a key of what decides a bucketed epoch's batches
  /// (bucket_window, batch_size, max_tokens, ragged, pad_multiple), never 0.
  static std::uint64_t plan_key(const LoaderOptions& options) noexcept;

 private:
  std::vector<std::uint64_t> order_;  // the epoch's samples, from the first planned one
  // Global batches: [first, last) of the epoch's order (positions; order_ starts at origin_).
  std::vector<std::pair<std::uint64_t, std::uint64_t>> global_;
  std::vector<std::uint64_t> prefix_;  // prefix_[g]: the position after global batches [0, g)
  std::uint64_t origin_ = 0;           // the global position of order_[0]
  std::size_t first_ = 0;              // the run's first global batch
  std::size_t rank_;
  std::size_t world_;
  std::size_t count_ = 0;
  std::size_t number_offset_ = 0;
};

}  // namespace ferry::detail
