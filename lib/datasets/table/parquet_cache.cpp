#include "datasets/table/parquet_cache.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "datasets/table/parquet_table.hpp"

namespace ferry::detail {

std::size_t decoded_bytes(const DecodedGroup& d) noexcept {
  std::size_t n = 0;
  for (const parquet::RawColumn& c : d.columns) {
    n +=
        c.valid.size() + c.fixed.size() + c.offsets.size() * sizeof(std::uint64_t) + c.bytes.size();
  }
  return n;
}

GroupCache::Ptr GroupCache::get(std::size_t g, const std::function<Ptr()>& decode) {
  std::unique_lock lock(mutex_);
  for (;;) {
    const auto it = entries_.find(g);
    if (it == entries_.end()) break;
    if (it->second.value) {
      it->second.used = ++clock_;
      return it->second.value;
    }
    decoded_.wait(lock);  // another thread decodes it: look again when a decode ends
  }
  entries_.emplace(g, Entry{nullptr, ++clock_, 0});
  lock.unlock();
  Ptr p;
  try {
    p = decode();
  } catch (...) {
    lock.lock();
    entries_.erase(g);
    decoded_.notify_all();
    throw;
  }
  lock.lock();
  Entry& e = entries_.at(g);
  e.value = p;
  e.bytes = std::max<std::size_t>(decoded_bytes(*p), 1);
  bytes_ += e.bytes;
  evict();
  decoded_.notify_all();
  return p;
}

void GroupCache::evict() {
  while (bytes_ > budget_ && entries_.size() > 2) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      // Only decoded row groups go; one being decoded is waited on by its readers.
      if (!it->second.value) continue;
      if (oldest == entries_.end() || it->second.used < oldest->second.used) oldest = it;
    }
    if (oldest == entries_.end()) return;
    bytes_ -= oldest->second.bytes;
    entries_.erase(oldest);
  }
}

std::size_t GroupCache::bytes() const {
  const std::lock_guard lock(mutex_);
  return bytes_;
}

}  // namespace ferry::detail
