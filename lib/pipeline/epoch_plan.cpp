#include "pipeline/epoch_plan.hpp"

#include <algorithm>
#include <numeric>

#include "pipeline/sampler.hpp"

namespace ferry::detail {

namespace {

std::int64_t round_up(std::int64_t n, std::int64_t multiple) {
  const std::int64_t r = n % multiple;
  return r == 0 ? n : n + (multiple - r);
}

}  // namespace

std::uint64_t EpochPlan::tokens(std::size_t samples, std::int64_t longest, std::uint64_t sum,
                                const LoaderOptions& options) noexcept {
  if (options.ragged == RaggedBatch::pack) return sum;
  return samples * static_cast<std::uint64_t>(round_up(longest, options.pad_multiple));
}

EpochPlan::EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
                     std::uint64_t epoch)
    : rank_(static_cast<std::size_t>(options.rank)),
      world_(static_cast<std::size_t>(options.world_size)) {
  const std::size_t n = dataset.size();
  // The same permutation as the sampler's: the order of the whole dataset for this epoch.
  order_.resize(n);
  const Permutation perm(n, mix64(options.seed) ^ mix64(epoch + 1));
  for (std::size_t i = 0; i < n; ++i) order_[i] = options.shuffle ? perm(i) : i;
  std::vector<std::int64_t> length(n);
  for (std::size_t i = 0; i < n; ++i) length[i] = dataset.length(order_[i], field);

  const std::size_t window =
      options.bucket_window == 0 ? std::max<std::size_t>(n, 1) : options.bucket_window;
  const std::size_t cap = std::max<std::size_t>(options.batch_size, 1);
  std::vector<std::size_t> by_length;  // positions of one window, sorted by length
  for (std::size_t w0 = 0; w0 < n; w0 += window) {
    const std::size_t w1 = std::min(n, w0 + window);
    by_length.resize(w1 - w0);
    std::iota(by_length.begin(), by_length.end(), w0);
    if (options.bucket_window != 0) {
      std::stable_sort(by_length.begin(), by_length.end(),
                       [&](std::size_t a, std::size_t b) { return length[a] < length[b]; });
      std::vector<std::uint64_t> sorted(by_length.size());
      std::vector<std::int64_t> sorted_length(by_length.size());
      for (std::size_t i = 0; i < by_length.size(); ++i) {
        sorted[i] = order_[by_length[i]];
        sorted_length[i] = length[by_length[i]];
      }
      std::copy(sorted.begin(), sorted.end(), order_.begin() + static_cast<std::ptrdiff_t>(w0));
      std::copy(sorted_length.begin(), sorted_length.end(),
                length.begin() + static_cast<std::ptrdiff_t>(w0));
    }
    // Cut the window into batches, greedily.
    const std::size_t first_batch = global_.size();
    std::size_t begin = w0;
    std::int64_t longest = 0;
    std::uint64_t sum = 0;
    for (std::size_t i = w0; i < w1; ++i) {
      const std::size_t in = i - begin;
      const std::int64_t l = length[i];
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
  const std::size_t g = global_.size();
  count_ = options.drop_last ? g / world_ : g / world_ + static_cast<std::size_t>(g % world_ != 0);
}

void EpochPlan::batch(std::size_t k, std::vector<std::uint64_t>& out) const {
  const auto [first, last] = global_[(rank_ + k * world_) % global_.size()];
  out.assign(order_.begin() + static_cast<std::ptrdiff_t>(first),
             order_.begin() + static_cast<std::ptrdiff_t>(last));
}

}  // namespace ferry::detail
