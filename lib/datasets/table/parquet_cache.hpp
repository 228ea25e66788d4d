#pragma once

// The decoded row groups a ParquetDataset keeps for its readers, shared by all threads: each
// row group is decoded once while it stays (a thread asking for one another thread is decoding
// waits for that decode), and the least recently used go when the decoded bytes pass the
// budget. A shuffled epoch whose window of row groups fits the budget (or a table that fits
// whole) then decodes each row group once.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace ferry::detail {

struct DecodedGroup;

class GroupCache {
 public:
  using Ptr = std::shared_ptr<const DecodedGroup>;

  /// `budget`: decoded bytes kept (at least two row groups are, whatever their size).
  explicit GroupCache(std::size_t budget) : budget_(budget) {}

  /// Row group g, from the cache or made by decode() (called without the lock). A decode that
  /// throws keeps nothing: the threads that waited for it decode it themselves (and meet the
  /// same error).
  Ptr get(std::size_t g, const std::function<Ptr()>& decode);

  /// The decoded bytes held now.
  std::size_t bytes() const;

 private:
  struct Entry {
    Ptr value;  // null while being decoded
    std::uint64_t used = 0;
    std::size_t bytes = 0;
  };
  void evict();  // with mutex_ held

  std::size_t budget_;
  mutable std::mutex mutex_;
  std::condition_variable decoded_;  // a decode ended (or failed)
  std::unordered_map<std::size_t, Entry> entries_;
  std::uint64_t clock_ = 0;
  std::size_t bytes_ = 0;
};

/// The bytes a decoded row group holds.
std::size_t decoded_bytes(const DecodedGroup& d) noexcept;

}  // namespace ferry::detail
