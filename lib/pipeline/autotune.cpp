#include "pipeline/autotune.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>

#include "pipeline/loader_impl.hpp"

namespace ferry::detail {

namespace {

// A window ends after this many delivered batches and at least kMinWindow, or after kMaxWindow
// with at least two batches (slow batches).
constexpr std::uint64_t kWindowBatches = 16;
constexpr auto kMinWindow = std::chrono::milliseconds(10);
constexpr auto kMaxWindow = std::chrono::milliseconds(100);
// The consumer waits above kWaits of the window: input-bound; under kIdle: compute-bound.
constexpr double kWaits = 0.10;
constexpr double kIdle = 0.02;
// Workers above kBusy of their capacity are the bottleneck; under kSpare one can go.
constexpr double kBusy = 0.60;
constexpr double kSpare = 0.50;
// Workers above kSaturated of their capacity gain nothing from more batches in flight.
constexpr double kSaturated = 0.90;
// Fewer slots in use than this would stop batches overlapping the consumer.
constexpr int kMinSlotsInUse = 2;

std::string pct(double fraction) {
  return std::to_string(std::lround(std::clamp(fraction, 0.0, 9.99) * 100)) + "%";
}

void record(LoaderImpl& impl, std::uint64_t batch, int workers, int prefetch, std::string why) {
  Tuning& t = impl.tuning;
  std::lock_guard lock(t.decisions_mutex);
  if (t.decisions.size() == Tuning::kKeptDecisions) t.decisions.pop_front();
  t.decisions.push_back(AutotuneDecision{batch, workers, prefetch, std::move(why)});
}

}  // namespace

namespace {

void open_window(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  t.capacity_ns.fetch_add(nanos_since(t.window_start) *
                          static_cast<std::uint64_t>(t.workers.load()));
  t.window_open = true;
  t.window_start = Clock::now();
  t.window_batches = impl.batches.load();
  t.window_wait_ns = impl.consumer_wait_ns.load();
  t.window_read_ns = impl.read_ns.load();
}

}  // namespace

void tuning_begin(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  if (!t.enabled) return;
  // The first window opens once the run has delivered a batch: the wait for the first one is
  // the epoch's start-up, not what the settings do.
  t.window_open = false;
  t.run_open = true;
  t.run_start_batches = impl.batches.load();
  t.window_start = Clock::now();  // the worker time until the first window counts too
}

void tuning_end(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  if (!t.enabled || !t.run_open) return;  // a planner that never started
  t.window_open = false;
  t.run_open = false;
  t.capacity_ns.fetch_add(nanos_since(t.window_start) *
                          static_cast<std::uint64_t>(t.workers.load()));
}

void tuning_step(LoaderImpl& impl) {
  Tuning& t = impl.tuning;
  if (!t.enabled) return;
  if (!t.window_open) {
    if (impl.batches.load() > t.run_start_batches) open_window(impl);
    return;
  }
  const auto now = Clock::now();
  const auto elapsed = now - t.window_start;
  const std::uint64_t batches = impl.batches.load();
  const std::uint64_t delivered = batches - t.window_batches;
  if (!(delivered >= kWindowBatches && elapsed >= kMinWindow) &&
      !(delivered >= 2 && elapsed >= kMaxWindow)) {
    return;
  }
  const auto window_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  const std::uint64_t wait_ns = impl.consumer_wait_ns.load();
  const std::uint64_t read_ns = impl.read_ns.load();
  const int workers = t.workers.load();
  const double span = std::max(1.0, static_cast<double>(window_ns));
  const double wait = static_cast<double>(wait_ns - t.window_wait_ns) / span;
  const double busy = static_cast<double>(read_ns - t.window_read_ns) / (span * workers);
  t.capacity_ns.fetch_add(window_ns * static_cast<std::uint64_t>(workers));
  t.window_start = now;
  t.window_batches = batches;
  t.window_wait_ns = wait_ns;
  t.window_read_ns = read_ns;

  BufferRing& ring = *impl.ring;
  const int slots = ring.limit();
  const auto made = static_cast<std::uint64_t>(ring.slot_count());
  const int high = t.workers_high.load();
  int new_workers = workers;
  int new_slots = slots;
  std::string why;
  const std::string measured =
      "the consumer waited " + pct(wait) + " while workers were " + pct(busy) + " busy";
  const bool can_add_worker = workers < t.max_workers &&
                              t.fits(made, static_cast<std::uint64_t>(std::max(high, workers + 1)));
  t.waiting_windows = wait > kWaits ? t.waiting_windows + 1 : 0;
  if (wait > kWaits) {
    if (busy >= kBusy && can_add_worker) {
      // The workers are the bottleneck: one more, as the cores and the budget (its scratch)
      // allow.
      new_workers = workers + 1;
      why = "raised workers: " + measured;
    } else if (busy < kSaturated && t.waiting_windows >= 2) {
      // Workers idle part of the time while the consumer waits (or no worker can be added):
      // too few batches in flight to keep them going between batches. Deepen, up to the slots
      // the budget lets exist with the scratch already counted.
      std::uint64_t affordable = ring.slot_capacity();
      if (t.budget != 0) {
        const std::uint64_t fixed = t.bytes(0, static_cast<std::uint64_t>(high));
        affordable =
            t.budget > fixed
                ? std::min<std::uint64_t>(
                      affordable, (t.budget - fixed) / std::max<std::uint64_t>(1, t.slot_bytes))
                : 0;
      }
      const int deeper = std::min(static_cast<int>(affordable), slots + std::max(1, slots / 2));
      if (deeper > slots) {
        new_slots = deeper;
        t.slots_floor = std::max(t.slots_floor, slots + 1);
        why = "raised prefetch: " + measured;
      }
    }
  } else if (wait < kIdle) {
    // The consumer sets the pace: give back a worker it does not need, and a slot.
    if (workers > 1 && busy < kSpare) new_workers = workers - 1;
    // Batches the user keeps hold slots too: never so few that the ring stalls.
    if (slots > std::max({kMinSlotsInUse, t.slots_floor, ring.kept() + kMinSlotsInUse})) {
      new_slots = slots - 1;
    }
    if (new_workers != workers || new_slots != slots) {
      why = "lowered: " + measured;
    }
  }
  if (why.empty()) return;
  if (new_slots != slots) ring.set_limit(new_slots);
  if (new_workers != workers) {
    if (new_workers > high) t.workers_high.store(new_workers);
    t.workers.store(new_workers);
  }
  record(impl, batches, new_workers, ring.limit(), std::move(why));
}

bool tuning_may_make_slot(const LoaderImpl& impl) noexcept {
  const Tuning& t = impl.tuning;
  return t.fits(static_cast<std::uint64_t>(impl.ring->slot_count()) + 1,
                static_cast<std::uint64_t>(t.workers_high.load()));
}

tbb::task_arena& fill_arena(LoaderImpl& impl, int& workers) {
  Tuning& t = impl.tuning;
  if (!t.enabled) {
    workers = impl.workers;
    return impl.arena;
  }
  workers = t.workers.load();
  auto& arena = t.arenas.at(static_cast<std::size_t>(workers));
  if (!arena) arena = std::make_unique<tbb::task_arena>(workers, /*reserved_for_masters=*/0);
  return *arena;
}

std::uint64_t memory_now(const LoaderImpl& impl) noexcept {
  const Tuning& t = impl.tuning;
  return t.bytes(static_cast<std::uint64_t>(impl.ring->slot_count()),
                 static_cast<std::uint64_t>(t.workers_high.load()));
}

}  // namespace ferry::detail
