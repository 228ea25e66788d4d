#include "pipeline/sampler.hpp"

#include <algorithm>
#include <bit>
#include <optional>
#include <string>
#include <utility>

#include "core/checked.hpp"
#include "ferry/error.hpp"

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

std::size_t epoch_length(const Dataset& dataset) {
  return dataset.selection_key() != 0 ? dataset.epoch_size() : dataset.size();
}

std::shared_ptr<const std::vector<std::uint64_t>> selected_indices(const Dataset& dataset,
                                                                   std::uint64_t seed,
                                                                   std::uint64_t epoch) {
  if (dataset.selection_key() == 0) return nullptr;
  auto indices =
      std::make_shared<const std::vector<std::uint64_t>>(dataset.epoch_indices(seed, epoch));
  const std::size_t want = dataset.epoch_size();
  if (indices->size() != want) {
    throw ConfigError("Loader: the dataset's epoch_indices(" + std::to_string(seed) + ", " +
                      std::to_string(epoch) + ") gave " + std::to_string(indices->size()) +
                      " indices; its epoch_size() is " + std::to_string(want));
  }
  const std::size_t n = dataset.size();
  bool identity = want == n;
  for (std::size_t p = 0; p < want; ++p) {
    const std::uint64_t i = (*indices)[p];
    if (i >= n) {
      throw ConfigError("Loader: the dataset's epoch_indices() of epoch " + std::to_string(epoch) +
                        " hold index " + std::to_string(i) + ", past its " + std::to_string(n) +
                        " samples");
    }
    identity = identity && i == p;
  }
  // An epoch of every sample once, in index order (a mixture whose shares are its sources'
  // sizes): position p is sample p, and no list need be read.
  if (identity) return nullptr;
  return indices;
}

ShardWindows::ShardWindows(const std::vector<std::size_t>& starts, std::size_t window,
                           std::uint64_t seed, std::uint64_t epoch)
    : window_(window), key_(mix64(mix64(seed) ^ mix64(epoch + 0x5bd1e995))), starts_(&starts) {
  const std::size_t shards = starts.size() - 1;
  const Permutation perm(shards, key_);
  order_.resize(shards);
  before_.resize(shards + 1);
  for (std::size_t t = 0; t < shards; ++t) {
    order_[t] = perm(t);
    before_[t + 1] = before_[t] + (starts[order_[t] + 1] - starts[order_[t]]);
  }
}

std::uint64_t ShardWindows::operator()(std::uint64_t position) const noexcept {
  // The shard (in the epoch's order) whose samples' positions hold `position`, and its window.
  const auto t = static_cast<std::size_t>(
      std::upper_bound(before_.begin(), before_.end(), position) - before_.begin() - 1);
  const std::size_t first = t / window_ * window_;
  const std::size_t last = std::min(first + window_, order_.size());
  const std::uint64_t begin = before_[first];
  // The window's samples, permuted among themselves.
  const Permutation inside(before_[last] - begin, mix64(key_ ^ (first + 1)));
  const std::uint64_t q = begin + inside(position - begin);
  const auto u = static_cast<std::size_t>(
      std::upper_bound(before_.begin() + static_cast<std::ptrdiff_t>(first),
                       before_.begin() + static_cast<std::ptrdiff_t>(last), q) -
      before_.begin() - 1);
  return (*starts_)[order_[u]] + (q - before_[u]);
}

Sampler::Sampler(std::size_t dataset_size, Options options, SamplerWindows windows,
                 std::uint64_t start, const Dataset* selecting) noexcept
    : n_(dataset_size),
      options_(options),
      windows_(std::move(windows)),
      start_(std::min<std::uint64_t>(start, dataset_size)),
      selecting_(selecting) {
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

Sampler::Order Sampler::order(std::uint64_t epoch) const {
  // A dataset that orders its epochs itself is dealt as it is.
  const bool ordered = selecting_ != nullptr && selecting_->orders_epoch();
  Order o(epoch_permutation(n_, options_.seed, epoch), options_.shuffle && !ordered);
  if (options_.shuffle && !ordered && windows_.window > 0) {
    o.windows_.emplace(windows_.starts, windows_.window, options_.seed, epoch);
  }
  if (selecting_ != nullptr && selecting_->indexes_epoch() &&
      n_ > listed_epoch_limit.load(std::memory_order_relaxed)) {
    o.indexing_ = selecting_;
    o.size_ = selecting_->size();
    o.seed_ = options_.seed;
    o.epoch_ = epoch;
  } else if (selecting_ != nullptr) {
    o.selected_ = selected_indices(*selecting_, options_.seed, epoch);
  }
  return o;
}

void Sampler::Order::refuse_index(std::uint64_t position, std::uint64_t index) const {
  throw ConfigError("Loader: the dataset's epoch_index(" + std::to_string(seed_) + ", " +
                    std::to_string(epoch_) + ", position " + std::to_string(position) +
                    ") gave index " + std::to_string(index) + ", past its " +
                    std::to_string(size_) + " samples");
}

void Sampler::batch(const Order& order, std::size_t k, std::vector<std::uint64_t>& out,
                    std::vector<std::uint64_t>* places) const {
  const std::size_t count = batch_size(k);
  out.resize(count);
  const std::size_t w = std::max<std::size_t>(options_.world_size, 1);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t j = k * options_.batch_size + i;  // this rank's j-th sample of the run
    // start + j x w + rank < n + w (j < per_rank), which the loader checks does not overflow;
    // past n, padding wraps around to the epoch's first positions.
    out[i] = order.place((start_ + j * w + options_.rank) % n_);
  }
  if (places != nullptr) places->assign(out.begin(), out.end());
  if (!order.listed()) {
    for (std::size_t i = 0; i < count; ++i) out[i] = order.index(out[i]);
    return;
  }
  // The epoch's list is read in shuffled order: every entry of the batch is asked for before
  // any is used, so that their cache misses overlap instead of coming one after another.
  for (std::size_t i = 0; i < count; ++i) order.prefetch_index(out[i]);
  for (std::size_t i = 0; i < count; ++i) out[i] = order.index(out[i]);
}

std::size_t Sampler::number_offset() const noexcept {
  if (start_ == 0) return 0;
  if (start_ == n_) return Sampler(n_, options_, windows_, 0, selecting_).batches();
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
