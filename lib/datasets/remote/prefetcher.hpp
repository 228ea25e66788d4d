#pragma once

// Files given as URLs that a dataset fetches while it is read, not at open: the shards of a
// WebDataset whose indexes came at open, a TokenDataset's files whose heads came at open.
// RemoteOptions::connections threads of its own fetch them into the cache (Fetcher: the cache's
// rules, complete files only), in the order the dataset was last told it will read them (plan(),
// from Dataset::will_read), else in index order from the first read on (nothing is fetched before a
// plan or a read); a read of a file not yet here (get()) puts that file first and waits for it
// alone.
//
// Parts (RemoteOptions::part_bytes): a file over part_bytes comes in parts that the threads
// share through a PartBoard. A thread with work to take takes, in this order: a part of a file
// that a get() waits for; a file that a get() waits for and no one fetches yet; a part of a file
// under way (the first started first); the plan's next file. So the file a read waits for comes
// on every connection at once, the files come one after the other rather than side by side, and
// the epoch's last file is not left to one connection.
//
// Holding: a fetched file stays held (flock LOCK_SH, so no process evicts it) while reads of it
// are still planned; after its last planned read (read_done()) the hold goes once no read has
// the file in hand, and the cache may evict it (it is fetched again when read again). Without a
// plan every fetched file is held while the Prefetcher lives. Fetching ahead stops while the
// held files that still have reads to come fill the cache's bound (the next one needed is always
// fetched).
//
// A file that cannot be had (after the retries) is failed until the next plan(): each get() of
// it throws the DataError naming its URL, without another transfer.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "datasets/remote/remote_cache.hpp"
#include "ferry/remote.hpp"

namespace ferry::detail::remote {

class Prefetcher {
 public:
  /// `urls[i]` is file i; `sizes[i]` its size in bytes as the dataset learned it at open (a
  /// shard's index, a token file's head; a download of another size is a DataError). Starts the
  /// transfer threads (idle until a plan or a get()). \throws ConfigError for bad options, Error
  /// when a thread cannot start.
  Prefetcher(std::vector<std::string> urls, std::vector<std::uint64_t> sizes,
             const RemoteOptions& options, std::string who);
  /// Stops the transfers under way and joins the threads.
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// File i, held for as long as the result lives; waits for it (first in line) when it is not
  /// here yet. \throws DataError naming its URL when it cannot be had.
  std::shared_ptr<const CachedFile> get(std::size_t i);
  /// The files in the order they will be read (each once, first use first) and how many reads
  /// of each are planned (reads[i], 0 for a file not read). Replaces the plan before it; failed
  /// files are tried again.
  void plan(std::span<const std::size_t> order, std::span<const std::size_t> reads);
  /// One planned read of file i is over.
  void read_done(std::size_t i);
  /// The number of files.
  std::size_t size() const noexcept { return urls_.size(); }
  /// Seconds get() waited for transfers, over all threads, since construction.
  double wait_seconds() const noexcept {
    return static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) * 1e-9;
  }

 private:
  enum class State { pending, fetching, ready, failed };
  struct Entry {
    State state = State::pending;
    std::shared_ptr<const CachedFile> held;
    std::exception_ptr error;
    std::size_t left = 0;     // planned reads not yet done
    std::size_t waiting = 0;  // get() calls waiting for it
  };

  void work(Fetcher& fetcher);
  // Whether file i comes in parts (Fetcher's rule: a size over part_bytes, not file://).
  bool in_parts(std::size_t i) const noexcept;
  // Fetches file i (state fetching already); `lock` (on mutex_) is let go meanwhile.
  void fetch_locked(Fetcher& fetcher, std::unique_lock<std::mutex>& lock, std::size_t i);
  // A file a get() waits for that no one fetches yet, or npos; under mutex_.
  std::size_t urgent_locked();
  // The plan's next file to fetch, or npos; under mutex_.
  std::size_t planned_locked();
  // A file under way with a part no one took (only one that a get() waits for, when `waited`),
  // the first started first, or npos; `soon` tells whether such a file's parts are about to be
  // posted. Under mutex_.
  std::size_t helpable_locked(bool waited, bool& soon) const;
  std::uint64_t held_bytes_locked() const;

  std::vector<std::string> urls_;
  std::vector<std::uint64_t> sizes_;
  RemoteOptions options_;
  std::string who_;
  std::uint64_t bound_;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  std::vector<std::size_t> order_;      // what to fetch, first first
  std::size_t cursor_ = 0;              // order_[..cursor_) need no look
  std::vector<std::size_t> urgent_;     // files a get() waits for, latest last
  std::vector<std::size_t> under_way_;  // files being fetched, in the order they started
  PartBoard parts_;                     // their downloads in parts
  bool planned_ = false;
  bool asked_ = false;  // a get() came: without a plan, fetch ahead in index order
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> wait_ns_{0};
  std::vector<std::thread> threads_;
};

}  // namespace ferry::detail::remote
