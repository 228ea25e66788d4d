#pragma once

// A remote Arrow table's record batches read ahead: will_read() gives the loader's order, which
// becomes the record batches in order of first use; a thread of its own makes the next kAhead
// record batches past the farthest one a read has taken readable (ArrowTable::decode(): their
// buffers fetched, decompressed) into the decoded cache, where the reads find them (or wait for
// the one under way). A batch the cache holds is skipped; one that fails is not kept (the read
// decodes it again and meets the error).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "datasets/table/arrow_table.hpp"

namespace ferry::detail {

class ArrowAhead {
 public:
  /// Record batches read ahead of the farthest one read.
  static constexpr std::size_t kAhead = 2;

  explicit ArrowAhead(const ArrowTable& table);
  ArrowAhead(const ArrowAhead&) = delete;
  ArrowAhead& operator=(const ArrowAhead&) = delete;
  /// Ends the read under way (the URLs' transfers cancelled) and the thread.
  ~ArrowAhead();

  /// The samples' reading order (replaces the one before). Never throws: a plan that cannot be
  /// made is dropped.
  void plan(std::span<const std::size_t> indices) noexcept;
  /// A read takes record batch b.
  void reading(std::size_t b) noexcept;

 private:
  void run();

  const ArrowTable& table_;
  std::mutex mutex_;
  std::condition_variable changed_;
  // Under mutex_:
  std::vector<std::size_t> order_;  // record batches in order of first use
  std::vector<std::size_t> rank_;   // per record batch: its place in order_; npos: not planned
  std::size_t next_ = 0;            // the next place of order_ to read ahead
  std::size_t reached_ = 0;         // 1 + the farthest place a read took
  bool stop_ = false;
  // Set by plan(): the fetch under way (an earlier plan's, maybe a loader's that is gone, stalled
  // on its server) stops, as a loader's read does when its loader stops (core/read_stop.hpp),
  // and the thread goes on with the new plan, not waiting out the stalled fetch's retries.
  std::atomic<bool> stale_{false};
  std::thread thread_;
};

}  // namespace ferry::detail
