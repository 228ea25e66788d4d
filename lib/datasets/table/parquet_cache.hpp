#pragma once

// The decoded row groups a ParquetDataset keeps for its readers (and the decoded record batches
// of an ArrowDataset), shared by all threads: each is decoded once while it stays (a thread
// asking for one another thread is decoding waits for that decode), and the least recently used
// go when the decoded bytes pass the budget. A shuffled epoch whose window of row groups fits
// the budget (or a table that fits whole) then decodes each row group once.

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "core/read_stop.hpp"
#include "ferry/error.hpp"
#include "ferry/export.hpp"

namespace ferry::detail {

struct DecodedGroup;

/// The bytes a decoded row group holds.
std::size_t decoded_bytes(const DecodedGroup& d) noexcept;

/// `Decoded` is any type with a decoded_bytes(const Decoded&) found beside it.
template <class Decoded>
class FERRY_HIDDEN BasicGroupCache {
 public:
  using Ptr = std::shared_ptr<const Decoded>;

  /// `budget`: decoded bytes kept (at least two row groups are, whatever their size).
  explicit BasicGroupCache(std::size_t budget) : budget_(budget) {}

  /// The most bytes one item decodes to (0: not known), for the decodes under way.
  void set_largest(std::uint64_t largest) {
    const std::lock_guard lock(mutex_);
    largest_ = largest;
  }

  /// Row group g, from the cache or made by decode() (called without the lock). A decode that
  /// throws a DataError fails g: the threads that waited for it, and every later get(g), meet
  /// the same error without decoding it again (until forget_failures()). Any other exception
  /// (out of memory) keeps nothing: the threads that waited decode it themselves. A decode
  /// starts only while the items kept and the decodes under way stay within what
  /// reader_memory() counts (the budget, or two items, and one being decoded); else the thread
  /// waits for a decode under way to end (several threads decoding a row group each held
  /// 1.6 times the budget).
  Ptr get(std::size_t g, const std::function<Ptr()>& decode) {
    std::unique_lock lock(mutex_);
    for (;;) {
      const auto it = entries_.find(g);
      if (it == entries_.end()) {
        if (decoding_ == 0 || !over_with_another()) break;
        const std::uint64_t ends = decodes_ended_;
        wait_unless_stopped(decoded_, lock, [&] { return decodes_ended_ != ends; });
        continue;
      }
      if (it->second.value) {
        it->second.used = ++clock_;
        return it->second.value;
      }
      if (it->second.error) std::rethrow_exception(it->second.error);
      // Another thread decodes it: look again when a decode ends (or give up when this read's
      // loader stops).
      const std::uint64_t ends = decodes_ended_;
      wait_unless_stopped(decoded_, lock, [&] { return decodes_ended_ != ends; });
    }
    entries_.emplace(g, Entry{nullptr, nullptr, ++clock_, 0});
    ++decoding_;
    lock.unlock();
    Ptr p;
    try {
      p = decode();
    } catch (const DataError&) {
      lock.lock();
      --decoding_;
      entries_.at(g).error = std::current_exception();
      ++decodes_ended_;
      decoded_.notify_all();
      throw;
    } catch (...) {
      lock.lock();
      --decoding_;
      entries_.erase(g);
      ++decodes_ended_;
      decoded_.notify_all();
      throw;
    }
    lock.lock();
    --decoding_;
    Entry& e = entries_.at(g);
    e.value = p;
    e.bytes = std::max<std::size_t>(decoded_bytes(*p), 1);
    bytes_ += e.bytes;
    evict();
    ++decodes_ended_;
    decoded_.notify_all();
    return p;
  }

  /// Row groups whose decode failed are decoded again when next asked for (a new pass over the
  /// data: a server that failed may answer now).
  void forget_failures() {
    const std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.error ? entries_.erase(it) : std::next(it);
    }
  }

  /// Row group g when it is decoded in the cache (null otherwise): nothing is decoded or waited
  /// for.
  Ptr find(std::size_t g) const {
    const std::lock_guard lock(mutex_);
    const auto it = entries_.find(g);
    return it == entries_.end() ? nullptr : it->second.value;
  }

  /// Whether g is held (decoded, being decoded, or failed).
  bool holds(std::size_t g) const {
    const std::lock_guard lock(mutex_);
    return entries_.find(g) != entries_.end();
  }

  /// What the reads over this cache hold at most, where the largest item decodes to `largest`
  /// bytes and all of them to `total`: the budget (or two items past it, which it keeps
  /// whatever their size) and a third being decoded, never more than every item decoded.
  std::uint64_t reader_memory(std::uint64_t largest, std::uint64_t total) const {
    const std::lock_guard lock(mutex_);
    return std::min<std::uint64_t>(std::max<std::uint64_t>(budget_, 2 * largest) + largest, total);
  }
  /// Lowers the budget to what `bytes` leaves beside an item being decoded (never raises it).
  void fit(std::uint64_t bytes, std::uint64_t largest) {
    const std::lock_guard lock(mutex_);
    const std::uint64_t room = bytes > largest ? bytes - largest : 0;
    budget_ = static_cast<std::size_t>(std::min<std::uint64_t>(room, budget_));
    evict();
  }

  /// The decoded bytes held now.
  std::size_t bytes() const {
    const std::lock_guard lock(mutex_);
    return bytes_;
  }

 private:
  struct Entry {
    Ptr value;                 // null while being decoded, or failed
    std::exception_ptr error;  // the DataError its decode threw
    std::uint64_t used = 0;
    std::size_t bytes = 0;
  };

  // Whether the items kept, the decodes under way and one more would pass what
  // reader_memory() counts (with mutex_ held).
  bool over_with_another() const {
    if (largest_ == 0) return false;
    const std::uint64_t counted = std::max<std::uint64_t>(budget_, 2 * largest_) + largest_;
    return bytes_ + (decoding_ + 1) * largest_ > counted;
  }

  void evict() {  // with mutex_ held
    while (bytes_ > budget_ && entries_.size() > 2) {
      auto oldest = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        // Only decoded row groups go; one being decoded is waited on by its readers, a failed
        // one holds no bytes, and one a thread holds would stay in memory all the same.
        if (!it->second.value || it->second.value.use_count() > 1) continue;
        if (oldest == entries_.end() || it->second.used < oldest->second.used) oldest = it;
      }
      if (oldest == entries_.end()) return;
      bytes_ -= oldest->second.bytes;
      entries_.erase(oldest);
    }
  }

  std::size_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable decoded_;  // a decode ended (or failed)
  std::unordered_map<std::size_t, Entry> entries_;
  std::uint64_t clock_ = 0;
  std::uint64_t decodes_ended_ = 0;  // decodes ended (or failed): what a waiter looks for
  std::uint64_t decoding_ = 0;       // decodes under way
  std::uint64_t largest_ = 0;        // set_largest()
  std::size_t bytes_ = 0;
};

using GroupCache = BasicGroupCache<DecodedGroup>;

}  // namespace ferry::detail
