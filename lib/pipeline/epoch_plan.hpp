#pragma once

// An epoch's batches planned window by window, for token budgets (LoaderOptions::max_tokens)
// and length bucketing (LoaderOptions::bucket_window). From (seed, epoch) only: the dataset's
// order is the sampler's; it is cut into windows of consecutive positions (bucket_window
// positions with bucketing, else kWindow), and batches never cross a window's end. With
// bucketing, each window's samples are sorted by length, cut into batches, and the window's
// batches are shuffled; otherwise each window is cut as it is. A batch takes consecutive samples
// while its tokens stay within max_tokens (pack: the sum of the lengths of the first ragged
// field; pad: N x Lmax after pad_multiple) and it holds at most batch_size; a sample over the
// budget alone is a batch of one. The windows, so the global batches, do not depend on the world
// size, the rank or the workers. They are dealt to the ranks in turn from the run's first one G
// (rank r gets G + r, G + r + W, ...), wrapping around to the plan's first batches so every rank
// gets as many (or dropping the remainder with drop_last), as the sampler does with samples.
//
// Memory: the plan never holds the epoch. Made, it walks the windows once, keeping only each
// window's count of global batches (epoch / window numbers) and, for this rank's batches, the
// global position after them (resume); a batch's indices are found by planning its window again
// (the window last planned is kept, so a rank walking its batches in order plans each window
// once more). So a rank holds O(window + epoch / window + its batches), whatever the epoch's
// size, and asks each sample's length once while made and once again while its batches are asked.
//
// The epoch's global position after g global batches is the samples they hold: without
// bucketing, batches are consecutive runs of the epoch's order, so the position is a prefix of
// that order whatever batch_size or max_tokens cut it (a run may start at any position: the
// window that holds it is cut from there, the windows after it as always). With bucketing, a
// window's batches are shuffled, so a position names a prefix of the batches, and only a plan of
// the same windows and cuts (plan_key) can resume it.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/loader.hpp"
#include "pipeline/sampler.hpp"

namespace ferry::detail {

class EpochPlan {
 public:
  /// Positions of a planning window without bucket_window: a constant, so that the global
  /// batches depend on neither the world size, the rank nor the workers.
  static constexpr std::size_t kWindow = std::size_t{1} << 16;

  /// `field`: the ragged field whose tokens count. Asks the length of every sample from
  /// `start` on once (and the samples of `start`'s window). The run starts at global position
  /// `start`. \throws ConfigError when `start` lies inside a batch of a bucketed plan, or the
  /// dataset has no lengths; DataError for a negative length, naming the sample.
  EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
            std::uint64_t epoch, std::uint64_t start = 0);

  /// Batches of this rank in the run.
  std::size_t batches() const noexcept { return count_; }
  /// Writes batch k's dataset indices into `out` (resized within its capacity), and their
  /// epoch positions (Sampler::Order::place()) into `places` when given. Plans the
  /// batch's window unless it is the one planned last: one thread at a time (the planner's).
  /// \pre k < batches(). \throws as the constructor.
  void batch(std::size_t k, std::vector<std::uint64_t>& out,
             std::vector<std::uint64_t>* places = nullptr);
  /// The epoch's global position once every rank has received the run's first k batches.
  std::uint64_t position_after(std::size_t k) const noexcept;
  /// The number of the run's first batch among a run from 0's: the batch reaching the run's
  /// start (k x world_size global batches before it, or the epoch's end), else 0.
  std::size_t number_offset() const noexcept { return number_offset_; }
  /// Global batches of the epoch in this plan (from its origin: the run's start when that fell
  /// inside a batch).
  std::size_t global_batches() const noexcept { return global_; }
  /// Tokens a batch of these lengths costs under `options` (pad: N x Lmax rounded; pack: sum).
  static std::uint64_t tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                              const LoaderOptions& options) noexcept;
  /// 0 when a position is a prefix of the epoch's order (no bucketing), so any batch_size or
  /// max_tokens resumes it; else a key of what decides a bucketed epoch's batches
  /// (bucket_window, batch_size, max_tokens, ragged, pad_multiple), never 0.
  static std::uint64_t plan_key(const LoaderOptions& options) noexcept;

 private:
  struct Item {
    std::uint64_t place;  // its epoch position (its index before a selecting dataset's list)
    std::int64_t length;
  };
  /// One window planned: its samples (sorted by length with bucketing) and its batches,
  /// [first, last) of them, in the window's batch order.
  struct Window {
    std::vector<Item> items;
    std::vector<std::pair<std::size_t, std::size_t>> batches;
  };
  /// Plans the window of positions [lo, hi) into `out`.
  void plan(std::uint64_t lo, std::uint64_t hi, Window& out) const;
  /// The plan's windows (from the origin to the epoch's end).
  std::size_t window_count() const noexcept;
  /// Positions of the plan's window j (window 0 starts at the origin).
  std::pair<std::uint64_t, std::uint64_t> window_range(std::size_t j) const noexcept;

  const Dataset* dataset_;
  std::size_t field_;
  LoaderOptions options_;
  std::uint64_t epoch_;
  Sampler::Order order_;      // position -> dataset index
  std::string field_name_;    // for errors
  std::uint64_t n_;           // positions of the epoch
  std::uint64_t window_;      // positions of a window
  std::uint64_t origin_ = 0;  // the plan's first position: 0, or a start inside a batch
  // before_[j]: global batches in the plan's windows before window j; then the total.
  std::vector<std::uint64_t> before_;
  // after_[k]: the global position once global batches [0, first_ + k x world_) are delivered,
  // for each k with k x world_ < the global batches from first_.
  std::vector<std::uint64_t> after_;
  std::size_t global_ = 0;  // global batches
  std::size_t first_ = 0;   // the run's first global batch
  std::size_t rank_;
  std::size_t world_;
  std::size_t count_ = 0;
  std::size_t number_offset_ = 0;
  static constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  Window cached_;                     // the window planned last
  std::size_t cached_index_ = kNone;  // its number
};

}  // namespace ferry::detail
