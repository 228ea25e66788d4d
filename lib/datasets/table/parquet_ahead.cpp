#include "datasets/table/parquet_ahead.hpp"

#include <algorithm>
#include <exception>
#include <limits>

#include "core/read_stop.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

namespace {
constexpr std::size_t kParquetAheadNone = std::numeric_limits<std::size_t>::max();
}

AheadFetcher::AheadFetcher(const ParquetTable& table)
    : table_(table),
      rank_(table.groups.size(), kParquetAheadNone),
      taken_(table.groups.size(), false),
      thread_([this] { run(); }) {}

AheadFetcher::~AheadFetcher() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  for (const ParquetFile& f : table_.files) {
    if (f.remote) f.remote->cancel();
  }
  changed_.notify_all();
  thread_.join();
}

void AheadFetcher::plan(std::span<const std::size_t> indices) noexcept {
  try {
    std::vector<std::size_t> order;
    std::vector<std::size_t> rank(table_.groups.size(), kParquetAheadNone);
    for (const std::size_t i : indices) {
      if (i >= table_.size) continue;
      const auto g =
          static_cast<std::size_t>(std::upper_bound(table_.starts.begin(), table_.starts.end(), i) -
                                   table_.starts.begin() - 1);
      if (rank[g] != kParquetAheadNone || !table_.files[table_.groups[g].file].remote) continue;
      rank[g] = order.size();
      order.push_back(g);
    }
    {
      const std::lock_guard lock(mutex_);
      order_ = std::move(order);
      rank_ = std::move(rank);
      std::fill(taken_.begin(), taken_.end(), false);
      next_ = 0;
      reached_ = 0;
      ready_.clear();
      failed_.clear();
      ++generation_;
    }
    stale_.store(true);
    changed_.notify_all();
  } catch (...) {
    // A hint: dropped.
  }
}

std::optional<ParquetTable::FetchedChunks> AheadFetcher::take(std::size_t g) {
  std::unique_lock lock(mutex_);
  if (g >= rank_.size() || rank_[g] == kParquetAheadNone) return std::nullopt;
  taken_[g] = true;
  const std::size_t r = rank_[g];
  if (r + 1 > reached_) {
    reached_ = r + 1;
    // Row groups fetched that the reads passed long ago: their decoded columns were cached.
    for (auto it = ready_.begin(); it != ready_.end();) {
      it = rank_[it->first] + 2 * kAhead < r ? ready_.erase(it) : std::next(it);
    }
    changed_.notify_all();
  }
  wait_unless_stopped(changed_, lock, [&] { return fetching_ != g; });
  if (const auto failed = failed_.find(g); failed != failed_.end()) {
    const std::exception_ptr error = failed->second;
    failed_.erase(failed);
    std::rethrow_exception(error);
  }
  const auto it = ready_.find(g);
  if (it == ready_.end()) return std::nullopt;
  ParquetTable::FetchedChunks out = std::move(it->second);
  ready_.erase(it);
  return out;
}

void AheadFetcher::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stop_ ||
             (next_ < order_.size() && next_ < reached_ + kAhead && ready_.size() < 2 * kAhead);
    });
    if (stop_) return;
    const std::size_t g = order_[next_++];
    if (taken_[g]) continue;              // a read fetched it itself
    if (table_.cache.holds(g)) continue;  // decoded still: no read will fetch it
    fetching_ = g;
    const std::uint64_t generation = generation_;
    stale_.store(false);
    lock.unlock();
    std::optional<ParquetTable::FetchedChunks> fetched;
    std::exception_ptr error;
    try {
      const ReadStopScope scope(&stale_);  // a later plan stops it (ReadStopped: kept for no one)
      fetched = table_.fetch_chunks(g);
    } catch (const DataError&) {
      error = std::current_exception();  // the read meets it, without fetching again
    } catch (const std::exception&) {
      fetched.reset();  // out of memory: kept for no one, the read fetches again itself
    }
    lock.lock();
    fetching_.reset();
    if (generation == generation_ && !stop_) {
      if (fetched) ready_.emplace(g, std::move(*fetched));
      if (error) failed_.emplace(g, error);
    }
    changed_.notify_all();
  }
}

}  // namespace ferry::detail
