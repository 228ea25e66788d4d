#include "runtime/host_sync.hpp"

#include "ferry/stream.hpp"

namespace ferry {
namespace detail {
namespace {

std::atomic<std::uint64_t> g_host_syncs{0};
thread_local std::atomic<std::uint64_t>* t_counter = nullptr;
thread_local bool t_counts = true;
thread_local std::uint64_t t_host_syncs = 0;

}  // namespace

void note_host_sync() noexcept {
  if (!t_counts) return;
  g_host_syncs.fetch_add(1, std::memory_order_relaxed);
  ++t_host_syncs;
  if (t_counter != nullptr) t_counter->fetch_add(1, std::memory_order_relaxed);
}

SyncScope::SyncScope(std::atomic<std::uint64_t>* counter) noexcept
    : previous_(t_counter), previous_counts_(t_counts) {
  t_counter = counter;
  t_counts = true;
}

SyncScope::~SyncScope() {
  t_counter = previous_;
  t_counts = previous_counts_;
}

StreamSideWait::StreamSideWait() noexcept : previous_(t_counts) { t_counts = false; }

StreamSideWait::~StreamSideWait() { t_counts = previous_; }

}  // namespace detail

std::uint64_t host_sync_count() noexcept {
  return detail::g_host_syncs.load(std::memory_order_relaxed);
}

std::uint64_t host_sync_count_this_thread() noexcept { return detail::t_host_syncs; }

}  // namespace ferry
