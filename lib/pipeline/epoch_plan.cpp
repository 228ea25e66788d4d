#include "pipeline/epoch_plan.hpp"

#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <string>

#include "core/memory_need.hpp"
#include "core/tsan.hpp"
#include "ferry/error.hpp"
#include "pipeline/ragged.hpp"

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

// The address that marks for ThreadSanitizer how the counting walk's stages hand windows and
// counts to each other through oneTBB (core/tsan.hpp): at namespace scope, so that a stage names
// it without first reading its closure, which the caller's thread wrote.
constexpr char plan_edge = 0;

// The epoch's order as the sampler has it (no shard windows: a planned epoch is permuted whole).
Sampler::Order epoch_order(const Dataset& dataset, const LoaderOptions& o, std::uint64_t epoch,
                           std::size_t n) {
  const Sampler sampler(n,
                        {o.batch_size, o.shuffle, o.seed, o.drop_last,
                         static_cast<std::size_t>(o.rank), static_cast<std::size_t>(o.world_size)},
                        {}, 0, dataset.selection_key() != 0 ? &dataset : nullptr);
  return sampler.order(epoch);
}

std::string name_of(const Dataset& dataset, std::size_t field) {
  const std::vector<FieldSpec> fields = dataset.fields();
  return field < fields.size() ? fields[field].name : std::to_string(field);
}

}  // namespace

EpochPlan::EpochPlan(const Dataset& dataset, std::size_t field, const LoaderOptions& options,
                     std::uint64_t epoch, std::uint64_t start)
    : dataset_(&dataset),
      field_(field),
      options_(options),
      epoch_(epoch),
      order_(epoch_order(dataset, options, epoch, epoch_length(dataset))),
      field_name_(name_of(dataset, field)),
      n_(epoch_length(dataset)),
      // A window longer than the epoch is the whole epoch (its end, lo + window, would
      // overflow near the top of size_t and leave the epoch without a window).
      window_(std::min<std::uint64_t>(options.bucket_window == 0 ? kWindow : options.bucket_window,
                                      std::max<std::uint64_t>(n_, 1))),
      rank_(static_cast<std::size_t>(options.rank)),
      world_(static_cast<std::size_t>(options.world_size)) {
  // A window's plan holds an Item a sample: checked against the machine's memory first.
  if (options.bucket_window != 0) {
    check_need("Loader: bucket_window " + std::to_string(options.bucket_window), window_,
               sizeof(Item), "for a window's plan");
  }
  start = std::min<std::uint64_t>(start, n_);
  // Where the plan starts: 0, unless `start` falls inside a batch of its window (another
  // batch_size or max_tokens cut the epoch before). Without bucketing that window is then cut
  // from `start`, the windows after it as always; with it, the samples before `start` are not a
  // prefix of this plan's batches.
  if (start > 0 && start < n_) {
    const std::uint64_t lo = start / window_ * window_;
    plan(lo, std::min(n_, lo + window_), cached_);
    std::uint64_t at = lo;
    bool boundary = at == start;
    for (const auto& [first, last] : cached_.batches) {
      at += last - first;
      boundary = boundary || at == start;
    }
    if (!boundary) {
      if (options.bucket_window != 0) {
        throw ConfigError("Loader: the state's position " + std::to_string(start) +
                          " falls inside a batch of epoch " + std::to_string(epoch) +
                          "'s bucketed plan; resume a bucketed epoch with the same bucket_window, "
                          "batch_size, max_tokens, ragged and pad_multiple");
      }
      origin_ = start;
    }
  }
  // The counting walk: each window planned once, keeping its batch count and the positions that
  // this rank's batches end at. Windows are planned on `workers` threads at once, a few ahead,
  // and counted in their order.
  bool found = false;
  std::uint64_t at = origin_;
  before_.push_back(0);
  const auto count = [&](const Window& window) {
    for (const auto& [first, last] : window.batches) {
      if (!found && at == start) {
        found = true;
        first_ = global_;
      }
      if (found && (global_ - first_) % world_ == 0) after_.push_back(at);
      at += last - first;
      ++global_;
    }
    before_.push_back(global_);
  };
  const std::size_t windows = window_count();
  const int threads =
      options.workers > 0 ? options.workers : tbb::this_task_arena::max_concurrency();
  // The last window planned stays planned (cached_), for the batches that come from it.
  if (threads <= 1 || windows <= 1) {
    for (std::size_t j = 0; j < windows; ++j) {
      const auto [lo, hi] = window_range(j);
      plan(lo, hi, cached_);
      cached_index_ = j;
      count(cached_);
    }
  } else {
    tbb::task_arena arena(threads);
    // At most `threads` windows are between the first stage and the last, so window j can be
    // planned into planned[j % threads]; the stages pass on j alone.
    std::vector<Window> planned(static_cast<std::size_t>(threads));
    const auto slot = [&](std::size_t j) -> Window& { return planned[j % planned.size()]; };
    std::size_t next = 0;
    const tbb::filter<void, void> stages =
        tbb::make_filter<void, std::size_t>(tbb::filter_mode::serial_in_order,
                                            [&](tbb::flow_control& fc) -> std::size_t {
                                              FERRY_TSAN_ACQUIRE(&plan_edge);
                                              if (next == windows) fc.stop();
                                              const std::size_t j = next++;
                                              FERRY_TSAN_RELEASE(&plan_edge);
                                              return j;
                                            }) &
        tbb::make_filter<std::size_t, std::size_t>(tbb::filter_mode::parallel,
                                                   [&](std::size_t j) {
                                                     FERRY_TSAN_ACQUIRE(&plan_edge);
                                                     const auto [lo, hi] = window_range(j);
                                                     plan(lo, hi, slot(j));
                                                     FERRY_TSAN_RELEASE(&plan_edge);
                                                     return j;
                                                   }) &
        tbb::make_filter<std::size_t, void>(tbb::filter_mode::serial_in_order, [&](std::size_t j) {
          FERRY_TSAN_ACQUIRE(&plan_edge);
          count(slot(j));
          if (j + 1 == windows) {
            cached_ = std::move(slot(j));
            cached_index_ = j;
          }
          FERRY_TSAN_RELEASE(&plan_edge);
        });
    FERRY_TSAN_RELEASE(&plan_edge);  // the stages and all before them, to the threads that run them
    try {
      arena.execute([&] { tbb::parallel_pipeline(planned.size(), stages); });
    } catch (...) {  // a window that could not be planned: its error, once the stages are done
      FERRY_TSAN_ACQUIRE(&plan_edge);
      throw;
    }
    FERRY_TSAN_ACQUIRE(&plan_edge);
  }
  if (!found) first_ = global_;  // start is the epoch's end
  const auto rank_batches = [&](std::size_t global) {
    return options.drop_last ? global / world_
                             : global / world_ + static_cast<std::size_t>(global % world_ != 0);
  };
  count_ = rank_batches(global_ - first_);
  if (first_ == global_) {
    number_offset_ = rank_batches(global_);
  } else if (first_ % world_ == 0) {
    number_offset_ = first_ / world_;
  }
}

std::size_t EpochPlan::window_count() const noexcept {
  if (origin_ >= n_) return 0;
  const std::uint64_t base = origin_ / window_ * window_;
  return static_cast<std::size_t>((n_ - base + window_ - 1) / window_);
}

std::pair<std::uint64_t, std::uint64_t> EpochPlan::window_range(std::size_t j) const noexcept {
  const std::uint64_t base = origin_ / window_ * window_;
  const std::uint64_t lo = j == 0 ? origin_ : base + j * window_;
  if (lo >= n_) return {n_, n_};
  return {lo, std::min(n_, base + (j + 1) * window_)};
}

void EpochPlan::plan(std::uint64_t lo, std::uint64_t hi, Window& out) const {
  const LoaderOptions& o = options_;
  std::vector<Item>& items = out.items;
  allocating("Loader: bucket_window " + std::to_string(o.bucket_window), hi - lo, sizeof(Item),
             "for a window's plan", [&] { items.resize(hi - lo); });
  for (std::uint64_t p = lo; p < hi; ++p) {
    const std::uint64_t place = order_.place(p);
    const std::uint64_t index = order_.index(place);
    std::int64_t l = 0;
    try {
      l = dataset_->length(index, field_);
    } catch (const ConfigError& e) {
      throw ConfigError("Loader: field \"" + field_name_ + "\" is ragged: " + e.what());
    } catch (const DataError&) {
      // A bad sample takes no room in its batch, which leaves it out (skip) or fails naming it
      // (raise), from next().
      l = 0;
    }
    if (l < 0) {
      throw DataError("Loader: field \"" + field_name_ + "\": sample " + std::to_string(index) +
                      " has " + std::to_string(l) + " rows");
    }
    items[p - lo] = {place, l};
  }
  if (o.bucket_window != 0) {
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.length < b.length; });
  }
  // Greedy cuts: a batch takes samples while they fit the budget and batch_size.
  auto& batches = out.batches;
  batches.clear();
  const std::size_t cap = std::max<std::size_t>(o.batch_size, 1);
  std::size_t first = 0;
  std::int64_t longest = 0;
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const std::size_t in = i - first;
    const std::int64_t l = items[i].length;
    const bool fits = in < cap && (o.max_tokens == 0 ||
                                   tokens(in + 1, std::max(longest, l),
                                          sum + static_cast<std::uint64_t>(l), o) <= o.max_tokens);
    if (in > 0 && !fits) {
      batches.emplace_back(first, i);
      first = i;
      longest = 0;
      sum = 0;
    }
    longest = std::max(longest, l);
    sum += static_cast<std::uint64_t>(l);
  }
  if (first < items.size()) batches.emplace_back(first, items.size());
  if (o.bucket_window != 0 && o.shuffle) {
    // The window's batches in a random order, from (seed, epoch, window) only, so that lengths
    // do not come in rising order.
    std::uint64_t state = mix64(mix64(o.seed ^ 0x6275636b6574ULL) ^ mix64(epoch_) ^ lo);
    for (std::size_t i = batches.size() - 1; i > 0; --i) {
      state = mix64(state + 0x9e3779b97f4a7c15ULL);
      const std::size_t j = state % (i + 1);
      std::swap(batches[i], batches[j]);
    }
  }
}

void EpochPlan::batch(std::size_t k, std::vector<std::uint64_t>& out,
                      std::vector<std::uint64_t>* places) {
  // Past the last global batch, padding wraps around to the plan's first ones.
  const std::size_t g = (first_ + rank_ + k * world_) % global_;
  const auto j = static_cast<std::size_t>(std::upper_bound(before_.begin(), before_.end(), g) -
                                          before_.begin() - 1);
  if (j != cached_index_) {
    cached_index_ = kNone;  // until planned whole
    const auto [lo, hi] = window_range(j);
    plan(lo, hi, cached_);
    cached_index_ = j;
  }
  const auto [first, last] = cached_.batches[g - before_[j]];
  out.resize(last - first);
  for (std::size_t i = first; i < last; ++i) {
    out[i - first] = order_.index(cached_.items[i].place);
  }
  if (places == nullptr) return;
  places->resize(last - first);
  for (std::size_t i = first; i < last; ++i) (*places)[i - first] = cached_.items[i].place;
}

std::uint64_t EpochPlan::position_after(std::size_t k) const noexcept {
  // count_ x world_ <= global batches + world_: no overflow.
  const std::size_t done = std::min(global_ - first_, std::min(k, count_) * world_);
  if (done == global_ - first_) return n_;
  return after_[done / world_];
}

}  // namespace ferry::detail
