#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ferry/dataset.hpp"

namespace ferry::detail {

/// splitmix64's finalizer: a bijective 64-bit mix.
constexpr std::uint64_t mix64(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

/// The per-sample seed: a function of (seed, epoch, index) only.
constexpr std::uint64_t sample_seed(std::uint64_t seed, std::uint64_t epoch,
                                    std::uint64_t index) noexcept {
  return mix64(mix64(mix64(seed) ^ (epoch + 0x9e3779b97f4a7c15ULL)) ^
               (index * 0xd6e8feb86659fd93ULL));
}

/// A keyed bijection on [0, n): a balanced Feistel network on the smallest even number of bits
/// that covers n, with cycle-walking back into range. Any position's value is computed
/// directly, so starting mid-epoch costs nothing.
class Permutation {
 public:
  Permutation(std::uint64_t n, std::uint64_t key) noexcept;
  /// \pre position < n.
  std::uint64_t operator()(std::uint64_t position) const noexcept;

 private:
  std::uint64_t feistel(std::uint64_t x) const noexcept;
  static constexpr int kRounds = 6;
  std::uint64_t n_;
  unsigned half_bits_;
  std::uint64_t half_mask_;
  std::uint64_t keys_[kRounds];
};

/// The permutation of an epoch of n samples: a function of (seed, epoch) only. The sampler and
/// the epoch plans (epoch_plan.hpp) both order an epoch with it.
inline Permutation epoch_permutation(std::uint64_t n, std::uint64_t seed,
                                     std::uint64_t epoch) noexcept {
  return Permutation(n, mix64(seed) ^ mix64(epoch + 1));
}

/// Samples in one epoch of `dataset`: its epoch_size() when it chooses each epoch's samples
/// (Dataset::selection_key() != 0), else its size().
std::size_t epoch_length(const Dataset& dataset);

/// The indices epoch `epoch` of a dataset that chooses them holds (Dataset::epoch_indices),
/// checked: epoch_length() of them, each below size(). Null for any other dataset, and for an
/// epoch that holds every sample once in index order (an epoch's position p is then sample p).
/// \throws ConfigError naming what is wrong.
std::shared_ptr<const std::vector<std::uint64_t>> selected_indices(const Dataset& dataset,
                                                                   std::uint64_t seed,
                                                                   std::uint64_t epoch);

/// Epochs of at most this many samples take the list of a dataset that also gives its indices
/// by position (Dataset::indexes_epoch): a lookup in the list (8 bytes a sample) costs less than
/// asking the dataset per sample (a Mixture: a search over its sources and a division), which the
/// planner thread pays in series. Longer epochs are asked by position. Tests lower it.
inline std::atomic<std::size_t> listed_epoch_limit{std::size_t{1} << 22};

/// The shard-window order of an epoch (LoaderOptions::shuffle_window): the dataset's shards
/// (groups of consecutive samples, from their first samples `starts`, size() last) are permuted,
/// cut into windows of `window` shards, and the samples of each window permuted among
/// themselves, all from (seed, epoch) only. Reading follows the windows, so a cold dataset is
/// read a few shards at a time. Position p's sample is computed directly (O(log shards)) once
/// the epoch's O(shards) table is built.
class ShardWindows {
 public:
  /// \pre starts is non-decreasing, starts.front() == 0, window >= 1; `starts` outlives this.
  ShardWindows(const std::vector<std::size_t>& starts, std::size_t window, std::uint64_t seed,
               std::uint64_t epoch);
  /// \pre position < starts.back().
  std::uint64_t operator()(std::uint64_t position) const noexcept;

 private:
  std::vector<std::size_t> order_;     // shards in the epoch's order
  std::vector<std::uint64_t> before_;  // samples before each of them, then the total
  std::size_t window_;
  std::uint64_t key_;
  const std::vector<std::size_t>* starts_;
};

/// With Sampler::Options::shuffle and window > 0: the epoch is ordered by ShardWindows of `window`
/// shards of `starts` instead of one permutation of all samples.
struct SamplerWindows {
  std::size_t window = 0;
  std::vector<std::size_t> starts;
};

/// The order of one epoch for one rank, from (seed, epoch) only. The epoch's global order is
/// the dataset's positions permuted (or not). A run of the epoch starts at a global position P
/// (0: its beginning; a resumed run: where the job stood, whatever its world size and batch
/// size were): rank r takes global positions P + r, P + r + W, P + r + 2W, ..., padding by
/// wrapping around to the epoch's first positions (or dropping the remainder with drop_last),
/// so every rank gets the same count, and cuts them into batches. Ranks in lockstep: once every
/// rank has received k batches, exactly the global positions [P, P + k x batch_size x W) are
/// consumed (capped at the dataset size), so a run from P = k x batch_size x W is the run from 0
/// without its first k batches. With shuffle_window, the global order is ShardWindows'.
class Sampler {
 public:
  struct Options {
    std::size_t batch_size = 1;
    bool shuffle = false;
    std::uint64_t seed = 0;
    bool drop_last = false;
    std::size_t rank = 0;
    std::size_t world_size = 1;
  };

  /// `dataset_size`: the samples of an epoch (its positions). `selecting`: a dataset that
  /// chooses its epochs' samples (Dataset::selection_key() != 0), whose epoch_indices() map the
  /// positions to its indices; it outlives the sampler. Null: position p is index p.
  /// \pre start <= dataset_size, and dataset_size + world_size does not overflow.
  Sampler(std::size_t dataset_size, Options options, SamplerWindows windows = {},
          std::uint64_t start = 0, const Dataset* selecting = nullptr) noexcept;

  /// Samples this rank sees in the run (padding included).
  std::size_t samples_per_rank() const noexcept { return per_rank_; }
  std::size_t batches() const noexcept { return batches_; }
  /// The global position the run starts at.
  std::uint64_t start() const noexcept { return start_; }
  /// The run of the same epoch order from global position `position` (<= the dataset size).
  Sampler from(std::uint64_t position) const {
    return {n_, options_, windows_, position, selecting_};
  }
  /// The number of the run's first batch among the batches of a run from 0: the batch reaching
  /// the run's start (start = k x batch_size x world_size, or the epoch's end), else 0.
  std::size_t number_offset() const noexcept;
  /// Samples in batch k. \pre k < batches().
  std::size_t batch_size(std::size_t k) const noexcept;
  /// The global order of `epoch`: a permutation of the positions, or its shard windows (none
  /// for a dataset that orders its epochs itself, Dataset::orders_epoch), then the selecting
  /// dataset's epoch_indices() (or its epoch_index() of each position, when it
  /// indexes_epoch()). Built once per epoch (the windows cost O(shards), the indices O(epoch),
  /// none by position); it refers to this sampler, and to the selecting dataset, which must
  /// outlive it.
  /// \throws ConfigError as selected_indices().
  class Order {
   public:
    /// The dataset index at global position `position` (< the dataset size).
    std::uint64_t operator()(std::uint64_t position) const { return index(place(position)); }
    /// The epoch's position that global position `position` is dealt (shuffled or not).
    std::uint64_t place(std::uint64_t position) const noexcept {
      if (windows_) return (*windows_)(position);
      return shuffle_ ? permutation_(position) : position;
    }
    /// The dataset index at an epoch's position `p` (place()'s result).
    /// \throws ConfigError when a dataset that gives its indices by position gives one past
    /// its size (as selected_indices() checks a list).
    std::uint64_t index(std::uint64_t p) const {
      if (indexing_ != nullptr) {
        const std::uint64_t i = indexing_->epoch_index(seed_, epoch_, p);
        if (i >= size_) refuse_index(p, i);
        return i;
      }
      return selected_ ? (*selected_)[p] : p;
    }
    /// Whether index() maps through the epoch's list of indices, whose entries are read in
    /// shuffled order: prefetch_index() starts loading one.
    bool listed() const noexcept { return selected_ != nullptr; }
    void prefetch_index(std::uint64_t p) const noexcept {
      __builtin_prefetch(selected_->data() + p);
    }

   private:
    friend class Sampler;
    Order(Permutation permutation, bool shuffle) noexcept
        : permutation_(permutation), shuffle_(shuffle) {}
    Permutation permutation_;
    bool shuffle_;
    std::optional<ShardWindows> windows_;
    // The epoch's indices, of a dataset that chooses them: position p's sample is selected_[p].
    std::shared_ptr<const std::vector<std::uint64_t>> selected_;
    // Or, of one that gives them by position (Dataset::indexes_epoch), no list: it is asked.
    const Dataset* indexing_ = nullptr;
    std::uint64_t size_ = 0;  // indexing_'s size()
    std::uint64_t seed_ = 0;
    [[noreturn]] void refuse_index(std::uint64_t position, std::uint64_t index) const;
    std::uint64_t epoch_ = 0;
  };
  Order order(std::uint64_t epoch) const;
  /// Writes batch k's dataset indices, in the epoch `order`, into `out` (resized), and, when
  /// `places` is given, their epoch positions (Order::place(), before the selecting dataset's
  /// list: a sample an epoch holds twice is at two places).
  /// \pre k < batches(); `order` is this sampler's.
  void batch(const Order& order, std::size_t k, std::vector<std::uint64_t>& out,
             std::vector<std::uint64_t>* places = nullptr) const;
  /// The same with the order of `epoch` built for this one batch.
  void batch(std::uint64_t epoch, std::size_t k, std::vector<std::uint64_t>& out) const {
    batch(order(epoch), k, out);
  }
  /// The epoch's global position once every rank has received the run's first k batches:
  /// start + k x batch_size x world_size, at most the dataset size.
  std::uint64_t position_after(std::size_t k) const noexcept;

 private:
  std::size_t n_;
  Options options_;
  SamplerWindows windows_;
  std::uint64_t start_;
  const Dataset* selecting_;
  std::size_t per_rank_;
  std::size_t batches_;
};

}  // namespace ferry::detail
