#pragma once

// A remote table's row groups fetched ahead: will_read() gives the loader's order, which
// becomes the row groups in order of first use; a thread of its own fetches the chunks of the
// next kAhead row groups past the farthest one a read has taken (ParquetTable::fetch_chunks()),
// and decode() takes them from here instead of fetching them itself, waiting for a fetch under
// way; a row group the decoded cache holds is not fetched. A fetch that fails with a DataError
// (after its retries) is kept as that error, which the read that takes the row group throws:
// the row group is fetched once, not again by its read; fetched row groups that no read takes
// (their decoded columns were still cached) are dropped once the reads are 2 * kAhead row groups
// past them.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "datasets/table/parquet_table.hpp"

namespace ferry::detail {

class AheadFetcher {
 public:
  /// Row groups fetched ahead of the farthest one read.
  static constexpr std::size_t kAhead = 2;

  explicit AheadFetcher(const ParquetTable& table);
  AheadFetcher(const AheadFetcher&) = delete;
  AheadFetcher& operator=(const AheadFetcher&) = delete;
  /// Ends the fetch under way (its transfers cancelled) and the thread.
  ~AheadFetcher();

  /// The samples' reading order (replaces the one before). Never throws: a plan that cannot be
  /// made is dropped.
  void plan(std::span<const std::size_t> indices) noexcept;
  /// Row group g's chunks when they were fetched ahead (or are being fetched: waits for them);
  /// else nothing, and the caller fetches them. \throws DataError: the fetch ahead failed.
  std::optional<ParquetTable::FetchedChunks> take(std::size_t g);

 private:
  void run();

  const ParquetTable& table_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Under mutex_:
  std::vector<std::size_t> order_;  // row groups in order of first use
  std::vector<std::size_t> rank_;   // per row group: its place in order_; npos: not planned
  std::vector<bool> taken_;         // per row group: a read took it (or fetched it itself)
  std::size_t next_ = 0;            // the next place of order_ to fetch
  std::size_t reached_ = 0;         // 1 + the farthest place a read took
  std::optional<std::size_t> fetching_;
  std::map<std::size_t, ParquetTable::FetchedChunks> ready_;
  std::map<std::size_t, std::exception_ptr> failed_;  // fetches that threw a DataError
  std::uint64_t generation_ = 0;                      // plan() calls
  bool stop_ = false;
  // Set by plan(): the fetch under way (an earlier plan's, maybe a loader's that is gone, stalled
  // on its server) stops, as a loader's read does when its loader stops (core/read_stop.hpp),
  // and the thread goes on with the new plan, not waiting out the stalled fetch's retries.
  std::atomic<bool> stale_{false};
  std::thread thread_;
};

}  // namespace ferry::detail
