// Worker processes for a Python dataset, the parent's side: the give-backs of staging slots'
// pages. A slot let go (released()) has its pages given back by a process that maps it, with its
// next tasks or at once when it idles; a slot written again (reused()) calls that off or waits it
// out. Their state words (TaskState) lie in the pool's control region.

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <vector>

#include "workers.hpp"
#include "workers_internal.hpp"

namespace ferry::python {

namespace {

/// Whether process `pid` still runs (not ended, nor a zombie): a process that has ended can no
/// longer write into shared memory.
bool running(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char text[512];
  const std::size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = 0;
  const char* end = std::strrchr(text, ')');  // the name may hold anything; the state follows
  return end != nullptr && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X' && end[2] != 0;
}

}  // namespace

void ProcessPool::released(std::span<std::byte> slot) noexcept {
  if (control_ == nullptr) return;
  SharedRegion region;
  // A slot is a SharedBuffer of its own: its pages go from the first byte to the last.
  if (!shared_region(slot.data(), slot.size(), region) || region.offset != 0) return;
  if (queue_discard(region.id)) send_to_idle(region.id);
}

void ProcessPool::send_to_idle(std::uint64_t region) noexcept {
  // A give-back goes with the next tasks sent to a process that maps the region; where none is
  // being sent tasks (the epoch's last batches, or between epochs), an idle one takes it now.
  Child* idle = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    for (Child& c : children_) {
      if (c.busy || c.dead || !c.ready ||
          std::find(c.regions.begin(), c.regions.end(), region) == c.regions.end()) {
        continue;
      }
      c.busy = true;
      idle = &c;
      break;
    }
  }
  if (idle != nullptr) release(*idle);  // which sends it the give-backs waiting
}

bool ProcessPool::queue_discard(std::uint64_t region) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return false;
  try {
    // Those of regions freed since (a loader gone, autotune's slots given back) go first.
    std::erase_if(discards_, [this](const Discard& d) {
      if (shared_region_live(d.region)) return false;
      if (!d.sent) {
        unsent_.fetch_sub(1);
        return true;
      }
      if (!settle(d, /*wait=*/false)) return false;
      free_word(d);
      return true;
    });
    for (const Discard& d : discards_) {
      if (d.region == region) return !d.sent;
    }
    discards_.push_back(Discard{region});
    unsent_.fetch_add(1);
    return true;
  } catch (...) {  // no memory: the slot keeps its pages
    return false;
  }
}

void ProcessPool::reused(std::span<std::byte> slot) noexcept {
  if (control_ == nullptr) return;
  SharedRegion region;
  if (!shared_region(slot.data(), slot.size(), region)) return;
  Discard d;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(discards_.begin(), discards_.end(),
                                 [&](const Discard& e) { return e.region == region.id; });
    if (it == discards_.end()) return;
    d = *it;
    discards_.erase(it);
    if (!d.sent) {
      unsent_.fetch_sub(1);
      return;
    }
  }
  settle(d, /*wait=*/true);
  const std::lock_guard<std::mutex> lock(mutex_);
  free_word(d);
}

bool ProcessPool::settle(const Discard& d, bool wait) noexcept {
  TaskState state(control_ + d.word, d.token);
  // Being done: that takes the time of freeing a slot's pages, unless the process ends first.
  while (state.cancel() == TaskState::Code::writing) {
    if (!running(d.pid)) return true;
    if (!wait) return false;
    ::usleep(100);
  }
  return true;
}

void ProcessPool::send_discards(Child& c, std::vector<std::byte>& out) noexcept {
  if (unsent_.load() == 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  try {
    for (Discard& d : discards_) {
      if (d.sent || words_used_ == ~std::uint64_t{0} ||
          std::find(c.regions.begin(), c.regions.end(), d.region) == c.regions.end()) {
        continue;
      }
      const auto word = static_cast<std::size_t>(std::countr_one(words_used_));
      // <QQQ region, its word's place, token>: give the region's pages back. Room first, so
      // that the message goes whole or not at all.
      out.reserve(out.size() + 4 + 3 * sizeof(std::uint64_t));
      out.insert(out.end(), {std::byte{0}, std::byte{0}, std::byte{0}, std::byte{24}});
      put_u64(out, d.region);
      put_u64(out, word * sizeof(std::uint64_t));
      put_u64(out, discard_token_);
      words_used_ |= std::uint64_t{1} << word;
      d.sent = true;
      d.pid = c.pid;
      d.word = word * sizeof(std::uint64_t);
      d.token = discard_token_++;
      TaskState(control_ + d.word, d.token).open();
      unsent_.fetch_sub(1);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory: they wait for the next message
  }
}

}  // namespace ferry::python
