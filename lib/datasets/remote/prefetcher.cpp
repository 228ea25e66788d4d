#include "datasets/remote/prefetcher.hpp"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <utility>

#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace {

constexpr std::size_t kPrefetchNone = ~std::size_t{0};

}  // namespace

Prefetcher::Prefetcher(std::vector<std::string> urls, std::vector<std::uint64_t> sizes,
                       const RemoteOptions& options, std::string who)
    : urls_(std::move(urls)),
      sizes_(std::move(sizes)),
      options_(options),
      who_(std::move(who)),
      bound_(cache_bound(options)),
      entries_(urls_.size()),
      order_(urls_.size()),
      parts_([this] {
        const std::lock_guard lock(mutex_);
        changed_.notify_all();
      }) {
  std::iota(order_.begin(), order_.end(), std::size_t{0});
  // A thread per connection, unless there are fewer transfers to make (files, or their parts).
  std::uint64_t transfers = 0;
  for (std::size_t i = 0; i < urls_.size(); ++i) {
    transfers += in_parts(i) ? (sizes_[i] + options_.part_bytes - 1) / options_.part_bytes : 1;
  }
  const auto count = static_cast<std::size_t>(
      std::min<std::uint64_t>(transfers, static_cast<std::uint64_t>(options_.connections)));
  // The fetchers first (they check the options and make the cache folder: errors at open).
  std::vector<std::unique_ptr<Fetcher>> fetchers;
  for (std::size_t t = 0; t < count; ++t) {
    fetchers.push_back(std::make_unique<Fetcher>(options_, who_, &stop_, &parts_));
  }
  try {
    for (auto& f : fetchers) {
      threads_.emplace_back([this, fetcher = std::shared_ptr<Fetcher>(std::move(f))] {
        pthread_setname_np(pthread_self(), "ferry-fetch");
        work(*fetcher);
      });
    }
  } catch (...) {
    stop_ = true;
    changed_.notify_all();
    for (std::thread& t : threads_) t.join();
    throw;
  }
}

Prefetcher::~Prefetcher() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : threads_) t.join();
}

std::uint64_t Prefetcher::held_bytes_locked() const {
  std::uint64_t held = 0;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.state == State::fetching || (e.state == State::ready && (!planned_ || e.left > 0))) {
      held += sizes_[i];
    }
  }
  return held;
}

bool Prefetcher::in_parts(std::size_t i) const noexcept {
  return options_.connections > 1 && options_.part_bytes > 0 && sizes_[i] > options_.part_bytes &&
         !urls_[i].starts_with("file://") && !urls_[i].starts_with("FILE://");
}

std::size_t Prefetcher::urgent_locked() {
  // The latest read to wait first.
  while (!urgent_.empty()) {
    const std::size_t i = urgent_.back();
    urgent_.pop_back();
    if (entries_[i].state == State::pending) return i;
  }
  return kPrefetchNone;
}

std::size_t Prefetcher::planned_locked() {
  // Nothing ahead before a plan or a first read says that reading begins.
  if (!planned_ && !asked_) return kPrefetchNone;
  // The plan's order, while the files held for reads to come leave room in the cache.
  while (cursor_ < order_.size() && entries_[order_[cursor_]].state != State::pending) ++cursor_;
  for (std::size_t c = cursor_; c < order_.size(); ++c) {
    const std::size_t i = order_[c];
    const Entry& e = entries_[i];
    if (e.state != State::pending || (planned_ && e.left == 0)) continue;
    const std::uint64_t held = held_bytes_locked();
    if (held > 0 && held + sizes_[i] > bound_) return kPrefetchNone;
    return i;
  }
  return kPrefetchNone;
}

std::size_t Prefetcher::helpable_locked(bool waited, bool& soon) const {
  soon = false;
  for (const std::size_t i : under_way_) {
    if (waited && entries_[i].waiting == 0) continue;
    const PartBoard::Offer o = parts_.offer(urls_[i]);
    if (o == PartBoard::Offer::part) return i;
    soon = soon || o == PartBoard::Offer::soon;
  }
  return kPrefetchNone;
}

void Prefetcher::work(Fetcher& fetcher) {
  std::unique_lock lock(mutex_);
  while (!stop_) {
    // A file a read waits for first (its parts, else itself), then the parts of the files
    // under way, then the plan's next file. A file under way whose parts are about to be posted
    // is waited for (a moment), not passed for the next one.
    bool soon = false;
    std::size_t i = helpable_locked(true, soon);
    if (i == kPrefetchNone && !soon) {
      if (const std::size_t u = urgent_locked(); u != kPrefetchNone) {
        fetch_locked(fetcher, lock, u);
        continue;
      }
      i = helpable_locked(false, soon);
    }
    if (i == kPrefetchNone && soon) {
      changed_.wait(lock);
      continue;
    }
    if (i != kPrefetchNone) {
      lock.unlock();
      static_cast<void>(fetcher.help(urls_[i]));
      lock.lock();
      continue;
    }
    if (const std::size_t p = planned_locked(); p != kPrefetchNone) {
      fetch_locked(fetcher, lock, p);
      continue;
    }
    changed_.wait(lock);
  }
}

void Prefetcher::fetch_locked(Fetcher& fetcher, std::unique_lock<std::mutex>& lock, std::size_t i) {
  entries_[i].state = State::fetching;
  under_way_.push_back(i);
  // Its parts are posted once its download starts: until then the others wait for them.
  if (in_parts(i)) parts_.announce(urls_[i]);
  lock.unlock();
  std::shared_ptr<const CachedFile> held;
  std::exception_ptr error;
  try {
    std::optional<CachedFile> file = fetcher.fetch(Request{urls_[i], {}, false, sizes_[i]});
    struct stat st {};
    if (::fstat(file->fd(), &st) != 0 || static_cast<std::uint64_t>(st.st_size) != sizes_[i]) {
      throw DataError(who_ + ": " + urls_[i] + ": the downloaded file has " +
                      std::to_string(st.st_size) + " bytes, " + std::to_string(sizes_[i]) +
                      " when the dataset was opened (the file changed on the server: give a "
                      "changed file a new name)");
    }
    held = std::make_shared<const CachedFile>(std::move(*file));
  } catch (...) {
    error = std::current_exception();
  }
  lock.lock();
  under_way_.erase(std::find(under_way_.begin(), under_way_.end(), i));
  Entry& e = entries_[i];
  if (error) {
    e.state = State::failed;
    e.error = error;
  } else {
    e.state = State::ready;
    e.held = std::move(held);
  }
  changed_.notify_all();
}

std::shared_ptr<const CachedFile> Prefetcher::get(std::size_t i) {
  std::unique_lock lock(mutex_);
  Entry& e = entries_[i];
  if (e.state == State::ready) return e.held;
  asked_ = true;
  const auto start = std::chrono::steady_clock::now();
  ++e.waiting;
  changed_.notify_all();  // a file under way: the idle threads take its parts
  std::shared_ptr<const CachedFile> out;
  std::exception_ptr error;
  for (;;) {
    if (e.state == State::ready) {
      out = e.held;
      break;
    }
    if (e.state == State::failed) {
      error = e.error;
      break;
    }
    if (stop_) {
      error = std::make_exception_ptr(
          DataError(who_ + ": " + urls_[i] + ": the dataset is closing; not fetched"));
      break;
    }
    if (e.state == State::pending &&
        std::find(urgent_.begin(), urgent_.end(), i) == urgent_.end()) {
      urgent_.push_back(i);
      changed_.notify_all();
    }
    changed_.wait(lock);
  }
  --e.waiting;
  lock.unlock();
  wait_ns_.fetch_add(
      static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start)
                                     .count()),
      std::memory_order_relaxed);
  if (error) std::rethrow_exception(error);
  return out;
}

void Prefetcher::plan(std::span<const std::size_t> order, std::span<const std::size_t> reads) {
  {
    const std::lock_guard lock(mutex_);
    planned_ = true;
    order_.assign(order.begin(), order.end());
    cursor_ = 0;
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      Entry& e = entries_[i];
      e.left = i < reads.size() ? reads[i] : 0;
      if (e.state == State::failed) {
        e.state = State::pending;
        e.error = nullptr;
      } else if (e.state == State::ready && e.left == 0) {
        e.held.reset();  // not read this time: the cache may evict it
        e.state = State::pending;
      }
    }
  }
  changed_.notify_all();
}

void Prefetcher::read_done(std::size_t i) {
  {
    const std::lock_guard lock(mutex_);
    Entry& e = entries_[i];
    if (!planned_ || e.left == 0 || --e.left > 0) return;
    if (e.state != State::ready) return;
    e.held.reset();  // the reads that have it in hand keep it until they end
    e.state = State::pending;
  }
  changed_.notify_all();
}

}  // namespace ferry::detail::remote
