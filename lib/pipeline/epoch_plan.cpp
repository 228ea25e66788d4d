#include "pipeline/epoch_plan.hpp"

#include <algorithm>
#include <string>

#include "ferry/error.hpp"
#include "pipeline/ragged.hpp"
#include "pipeline/sampler.hpp"

namespace ferry::detail {

std::uint64_t EpochPlan::tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                                const LoaderOptions& options) noexcept {
  if (options.ragged == RaggedBatch::pack) return sum;
  return samples * static_cast<std::uint64_t>(round_up_rows(longest, options.pad_multiple));
}

std::uint64_t EpochPlan::plan_key(const LoaderOptions& options) noexcept {
  // Shard windows order the epoch differently too (they exclude bucketing).
  if (options.shuffle && options.shuffle_window > 0) {
    const std::uint64_t key = mix64(options.shuffle_window ^ 0x7368617264ULL);
    return key == 0 ? 1 : key;
  }
  if (options.bucket_window == 0) return 0;
  std::uint64_t key = mix64(options.bucket_window ^ 0x77696e646f77ULL);
  key = mix64(key ^ options.batch_size);
  key = mix64(key ^ options.max_tokens);
  key = mix64(key ^ static_cast<std::uint64_t>(options.ragged));
  key = mix64(key ^ static_cast<std::uint64_t>(options.pad_multiple));
  return key == 0 ? 1 : key;
}

namespace {

struct Item {
  std::uint64_t index;
  std::int64_t length;
};

// Cuts items [begin, end) into batches, greedily, appending [first, last) ranges to `out`.
void cut(const std::vector<Item>& items, std::size_t begin, std::size_t end,
         const LoaderOptions& options, std::vector<std::pair<std::uint64_t, std::uint64_t>>& out) {
  const std::size_t cap = std::max<std::size_t>(options.batch_size, 1);
  std::size_t first = begin;
  std::int64_t longest = 0;
  std::uint64_t sum = 0;
  for (std::size_t i = begin; i < end; ++i) {
    const std::size_t in = i - first;
    const std::int64_t l = items[i].length;
    const bool fits = in < cap && (options.max_tokens == 0 ||
                                   EpochPlan::tokens(in + 1, std::max(longest, l),
                                                     sum + static_cast<std::uint64_t>(l),
                                                     options) <= options.max_tokens);
    if (in > 0 && !fits) {
      out.emplace_back(first, i);
      first = i;
      longest = 0;
      sum = 0;
    }
    longest = std::max(longest, l);
    sum += static_cast<std::uint64_t>(l);
  }
  if (first < end) out.emplace_back(first, end);
}

}  // namespace

EpochPlan::EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
                     std::uint64_t epoch, std::uint64_t start)
    : rank_(static_cast<std::size_t>(options.rank)),
      world_(static_cast<std::size_t>(options.world_size)) {
  const std::size_t n = epoch_length(dataset);
  start = std::min<std::uint64_t>(start, n);
  // The same order as the sampler's: the epoch's positions permuted, each position's sample
  // (the dataset's choice of indices for the epoch, when it makes one) with its length.
  std::vector<Item> items(n);
  const Permutation perm = epoch_permutation(n, options.seed, epoch);
  const auto selected = selected_indices(dataset, options.seed, epoch);
  const bool shuffle = options.shuffle && !(selected && dataset.orders_epoch());
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t p = shuffle ? perm(i) : i;
    const std::uint64_t index = selected ? (*selected)[p] : p;
    items[i] = {index, dataset.length(index, field)};
  }

  const std::size_t window =
      options.bucket_window == 0 ? std::max<std::size_t>(n, 1) : options.bucket_window;
  for (std::size_t w0 = 0; w0 < n; w0 += window) {
    const std::size_t w1 = std::min(n, w0 + window);
    if (options.bucket_window != 0) {
      std::stable_sort(items.begin() + static_cast<std::ptrdiff_t>(w0),
                       items.begin() + static_cast<std::ptrdiff_t>(w1),
                       [](const Item& a, const Item& b) { return a.length < b.length; });
    }
    const std::size_t first_batch = global_.size();
    cut(items, w0, w1, options, global_);
    if (options.bucket_window != 0 && options.shuffle) {
      // The window's batches in a random order, from (seed, epoch, window) only, so that lengths
      // do not come in rising order.
      std::uint64_t state = mix64(mix64(options.seed ^ 0x6275636b6574ULL) ^ mix64(epoch) ^ w0);
      for (std::size_t i = global_.size() - 1; i > first_batch; --i) {
        state = mix64(state + 0x9e3779b97f4a7c15ULL);
        const std::size_t j = first_batch + state % (i - first_batch + 1);
        std::swap(global_[i], global_[j]);
      }
    }
  }
  // Where the run starts: the global batch after which `start` samples were delivered. A start
  // inside a batch (another batch_size or max_tokens cut the epoch before): without bucketing,
  // the batches are cut again from there; with it, the samples before it are not a prefix of
  // this plan's batches.
  const auto sum_up = [&] {
    prefix_.assign(global_.size() + 1, origin_);
    for (std::size_t g = 0; g < global_.size(); ++g) {
      prefix_[g + 1] = prefix_[g] + (global_[g].second - global_[g].first);
    }
  };
  sum_up();
  const auto at = std::lower_bound(prefix_.begin(), prefix_.end(), start);
  if (at != prefix_.end() && *at == start) {
    first_ = static_cast<std::size_t>(at - prefix_.begin());
  } else if (options.bucket_window == 0) {
    global_.clear();
    origin_ = start;
    cut(items, static_cast<std::size_t>(start), n, options, global_);
    sum_up();
  } else {
    throw ConfigError("Loader: the state's position " + std::to_string(start) +
                      " falls inside a batch of epoch " + std::to_string(epoch) +
                      "'s bucketed plan; resume a bucketed epoch with the same bucket_window, "
                      "batch_size, max_tokens, ragged and pad_multiple");
  }
  order_.resize(n - static_cast<std::size_t>(origin_));
  for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = items[origin_ + i].index;
  const auto rank_batches = [&](std::size_t global) {
    return options.drop_last ? global / world_
                             : global / world_ + static_cast<std::size_t>(global % world_ != 0);
  };
  count_ = rank_batches(global_.size() - first_);
  if (first_ == global_.size()) {
    number_offset_ = rank_batches(global_.size());
  } else if (first_ % world_ == 0) {
    number_offset_ = first_ / world_;
  }
}

void EpochPlan::batch(std::size_t k, std::vector<std::uint64_t>& out) const {
  // Past the last global batch, padding wraps around to the plan's first ones.
  const auto [first, last] = global_[(first_ + rank_ + k * world_) % global_.size()];
  out.assign(order_.begin() + static_cast<std::ptrdiff_t>(first - origin_),
             order_.begin() + static_cast<std::ptrdiff_t>(last - origin_));
}

std::uint64_t EpochPlan::position_after(std::size_t k) const noexcept {
  // count_ x world_ <= global batches + world_: no overflow.
  const std::size_t done = std::min(global_.size() - first_, std::min(k, count_) * world_);
  return prefix_[first_ + done];
}

}  // namespace ferry::detail
