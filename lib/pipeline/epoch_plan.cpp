#include "pipeline/epoch_plan.hpp"

#include <algorithm>

#include "pipeline/ragged.hpp"
#include "pipeline/sampler.hpp"

namespace ferry::detail {

std::uint64_t EpochPlan::tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                                const LoaderOptions& options) noexcept {
  if (options.ragged == RaggedBatch::pack) return sum;
  return samples * static_cast<std::uint64_t>(round_up_rows(longest, options.pad_multiple));
}

EpochPlan::EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
                     std::uint64_t epoch)
    : rank_(static_cast<std::size_t>(options.rank)),
      world_(static_cast<std::size_t>(options.world_size)) {
  const std::size_t n = dataset.size();
  // The same permutation as the sampler's: the order of the whole dataset for this epoch,
  // with each sample's length.
  struct Item {
    std::uint64_t index;
    std::int64_t length;
  };
  std::vector<Item> items(n);
  const Permutation perm = epoch_permutation(n, options.seed, epoch);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t index = options.shuffle ? perm(i) : i;
    items[i] = {index, dataset.length(index, field)};
  }

  const std::size_t window =
      options.bucket_window == 0 ? std::max<std::size_t>(n, 1) : options.bucket_window;
  const std::size_t cap = std::max<std::size_t>(options.batch_size, 1);
  for (std::size_t w0 = 0; w0 < n; w0 += window) {
    const std::size_t w1 = std::min(n, w0 + window);
    if (options.bucket_window != 0) {
      std::stable_sort(items.begin() + static_cast<std::ptrdiff_t>(w0),
                       items.begin() + static_cast<std::ptrdiff_t>(w1),
                       [](const Item& a, const Item& b) { return a.length < b.length; });
    }
    // Cut the window into batches, greedily.
    const std::size_t first_batch = global_.size();
    std::size_t begin = w0;
    std::int64_t longest = 0;
    std::uint64_t sum = 0;
    for (std::size_t i = w0; i < w1; ++i) {
      const std::size_t in = i - begin;
      const std::int64_t l = items[i].length;
      const bool fits =
          in < cap && (options.max_tokens == 0 ||
                       tokens(in + 1, std::max(longest, l), sum + static_cast<std::uint64_t>(l),
                              options) <= options.max_tokens);
      if (in > 0 && !fits) {
        global_.emplace_back(begin, i);
        begin = i;
        longest = 0;
        sum = 0;
      }
      longest = std::max(longest, l);
      sum += static_cast<std::uint64_t>(l);
    }
    if (begin < w1) global_.emplace_back(begin, w1);
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
  order_.resize(n);
  for (std::size_t i = 0; i < n; ++i) order_[i] = items[i].index;
  const std::size_t g = global_.size();
  count_ = options.drop_last ? g / world_ : g / world_ + static_cast<std::size_t>(g % world_ != 0);
}

void EpochPlan::batch(std::size_t k, std::vector<std::uint64_t>& out) const {
  const auto [first, last] = global_[(rank_ + k * world_) % global_.size()];
  out.assign(order_.begin() + static_cast<std::ptrdiff_t>(first),
             order_.begin() + static_cast<std::ptrdiff_t>(last));
}

}  // namespace ferry::detail
