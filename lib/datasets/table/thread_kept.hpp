#pragma once

// Decoded data that each reading thread keeps between its reads of one table (the row group or
// record batch it read last, so that the next read of it takes no lock), owned by the table: it
// goes with the table, instead of staying with the threads (oneTBB's, which outlive loaders)
// until they read another table.

#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "ferry/export.hpp"

namespace ferry::detail {

template <class T>
class FERRY_HIDDEN ThreadKept {
 public:
  /// Keeps `p` for the calling thread in place of what it kept, which is dropped.
  void keep(std::shared_ptr<const T> p) {
    std::shared_ptr<const T> dropped;  // freed after the lock is let go
    const std::lock_guard lock(mutex_);
    std::shared_ptr<const T>& slot = kept_[std::this_thread::get_id()];
    dropped = std::move(slot);
    slot = std::move(p);
  }

 private:
  std::mutex mutex_;
  std::map<std::thread::id, std::shared_ptr<const T>> kept_;
};

}  // namespace ferry::detail
