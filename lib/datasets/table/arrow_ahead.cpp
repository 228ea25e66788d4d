#include "datasets/table/arrow_ahead.hpp"

#include <algorithm>
#include <exception>
#include <limits>

#include "core/read_stop.hpp"

namespace ferry::detail {

namespace {
constexpr std::size_t kArrowAheadNone = std::numeric_limits<std::size_t>::max();
}

ArrowTable::ArrowTable() = default;
ArrowTable::~ArrowTable() = default;

ArrowAhead::ArrowAhead(const ArrowTable& table)
    : table_(table), rank_(table.batches.size(), kArrowAheadNone), thread_([this] { run(); }) {}

ArrowAhead::~ArrowAhead() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  for (const ArrowFile& f : table_.files) {
    if (f.remote) f.remote->cancel();
  }
  changed_.notify_all();
  thread_.join();
}

void ArrowAhead::plan(std::span<const std::size_t> indices) noexcept {
  try {
    std::vector<std::size_t> order;
    std::vector<std::size_t> rank(table_.batches.size(), kArrowAheadNone);
    for (const std::size_t i : indices) {
      if (i >= table_.size) continue;
      const auto b =
          static_cast<std::size_t>(std::upper_bound(table_.starts.begin(), table_.starts.end(), i) -
                                   table_.starts.begin() - 1);
      if (rank[b] != kArrowAheadNone || !table_.files[table_.batches[b].file].remote) continue;
      rank[b] = order.size();
      order.push_back(b);
    }
    {
      const std::lock_guard lock(mutex_);
      order_ = std::move(order);
      rank_ = std::move(rank);
      next_ = 0;
      reached_ = 0;
    }
    stale_.store(true);
    changed_.notify_all();
  } catch (...) {
    // A hint: dropped.
  }
}

void ArrowAhead::reading(std::size_t b) noexcept {
  {
    const std::lock_guard lock(mutex_);
    if (b >= rank_.size() || rank_[b] == kArrowAheadNone || rank_[b] + 1 <= reached_) return;
    reached_ = rank_[b] + 1;
    next_ = std::max(next_, reached_);  // the reads passed these: the reads make them readable
  }
  changed_.notify_all();
}

void ArrowAhead::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stop_ || (next_ < order_.size() && next_ < reached_ + kAhead && reached_ > 0);
    });
    if (stop_) return;
    const std::size_t b = order_[next_++];
    if (table_.cache.holds(b)) continue;
    stale_.store(false);
    lock.unlock();
    try {
      // A later plan stops it (ReadStopped: the cache keeps nothing, the readers decode it).
      const ReadStopScope scope(&stale_);
      (void)table_.cache.get(b, [&] { return table_.decode(b); });
    } catch (const std::exception&) {
      // Kept for no one: the read decodes it again and meets the error itself.
    }
    lock.lock();
  }
}

}  // namespace ferry::detail
