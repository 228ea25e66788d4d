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
// A worker goes when the others would stay under kSpare of their capacity without it.
constexpr double kSpare = 0.50;
// Idle windows in a row after which the floors (slots, workers) go down by one.
constexpr int kFloorWindows = 8;
// A raise is judged on the batches/s of kTrialWindows windows after the first one (which holds
// the change's transient: slots made, a worker joining), and kept when they beat the rate
// before by kGain; an undone raise of the same kind waits kRetryWindows windows before it is
// tried again, twice as long after each failure, up to kMaxBackoff.
constexpr int kTrialWindows = 4;
constexpr double kGain = 0.02;
constexpr std::uint64_t kRetryWindows = 8;
constexpr std::uint64_t kMaxBackoff = 256;
// The weight of a window's rate against the ones before it in the rate of a setting.
constexpr double kSettledDecay = 0.75;
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

// The worker time since the capacity was last counted joins it.
void add_capacity(Tuning& t) noexcept {
  const auto now = Clock::now();
  t.capacity_ns.fetch_add(nanos_since(t.capacity_start) *
                          static_cast<std::uint64_t>(t.workers.load()));
  t.capacity_start = now;
}

TuningCounters counters(const LoaderImpl& impl) noexcept {
  return {impl.batches.load(), impl.consumer_wait_ns.load(), impl.read_ns.load(),
          impl.consumer_inside_ns.load()};
}

void open_window(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  t.window_open = true;
  t.window_start = Clock::now();
  t.window = counters(impl);
}

// The window paused at the last run's end goes on from here: its snapshots move forward by what
// happened since the pause (the gap between runs, this run's start-up and first batch).
void resume_window(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  t.window_open = true;
  t.window_paused = false;
  t.window_start += Clock::now() - t.paused_at;
  t.window += counters(impl) - t.paused;
}

}  // namespace

void tuning_begin(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  if (!t.enabled) return;
  // The window opens (or a paused one resumes) once the run has delivered a batch: the wait for
  // the first one is the run's start-up, not what the settings do.
  t.window_open = false;
  t.run_open = true;
  t.run_start_batches = impl.batches.load();
  t.capacity_start = Clock::now();  // the worker time until the first window counts too
}

void tuning_end(LoaderImpl& impl) noexcept {
  Tuning& t = impl.tuning;
  if (!t.enabled || !t.run_open) return;  // a planner that never started
  if (t.window_open) {
    // Paused, with what the consumer took after the planner's last step (the run's last
    // batches) in it.
    t.window_paused = true;
    t.paused_at = Clock::now();
    t.paused = counters(impl);
  }
  t.window_open = false;
  t.run_open = false;
  add_capacity(t);
}

void tuning_step(LoaderImpl& impl) {
  Tuning& t = impl.tuning;
  if (!t.enabled) return;
  if (!t.window_open) {
    if (impl.batches.load() > t.run_start_batches) {
      if (t.window_paused) {
        resume_window(impl);
      } else {
        open_window(impl);
      }
    }
    return;
  }
  const auto now = Clock::now();
  const auto elapsed = now - t.window_start;
  const TuningCounters now_counters = counters(impl);
  const TuningCounters in_window = now_counters - t.window;
  const std::uint64_t batches = now_counters.batches;
  const std::uint64_t delivered = in_window.batches;
  if (!(delivered >= kWindowBatches && elapsed >= kMinWindow) &&
      !(delivered >= 2 && elapsed >= kMaxWindow)) {
    return;
  }
  const auto window_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  const int workers = t.workers.load();
  const double span = std::max(1.0, static_cast<double>(window_ns));
  const double wait = static_cast<double>(in_window.wait_ns) / span;
  const double busy = static_cast<double>(in_window.read_ns) / (span * workers);
  // The loader sets the pace when the consumer spends its time inside next(): waiting for a
  // batch, or (on cores the workers fill) runnable there but not running.
  const double inside = std::max(wait, static_cast<double>(in_window.inside_ns) / span);
  add_capacity(t);
  t.window_start = now;
  t.window = now_counters;

  BufferRing& ring = *impl.ring;
  const int slots = ring.limit();
  const auto made = static_cast<std::uint64_t>(ring.slot_count());
  const int high = t.workers_high.load();
  int new_workers = workers;
  int new_slots = slots;
  std::string why;
  const std::string measured = "the consumer waited " + pct(wait) + " (" + pct(inside) +
                               " in the loader) while workers were " + pct(busy) + " busy";
  const bool can_add_worker = workers < t.max_workers &&
                              t.fits(made, static_cast<std::uint64_t>(std::max(high, workers + 1)));
  // The slots the budget lets exist with the scratch already counted.
  std::uint64_t affordable = ring.slot_capacity();
  if (t.budget != 0) {
    const std::uint64_t fixed = t.bytes(0, static_cast<std::uint64_t>(high));
    affordable =
        t.budget > fixed
            ? std::min<std::uint64_t>(affordable,
                                      (t.budget - fixed) / std::max<std::uint64_t>(1, t.slot_bytes))
            : 0;
  }
  // Deeper by doubling: few trials to reach a deep queue, each with an effect the noise of a
  // shared machine hides less.
  const int deeper = std::min(static_cast<int>(affordable), 2 * slots);
  const double seconds = span * 1e-9;
  const auto count = static_cast<double>(delivered);
  ++t.window_count;
  t.waiting_windows = inside > kWaits ? t.waiting_windows + 1 : 0;
  t.idle_windows = wait < kIdle ? t.idle_windows + 1 : 0;

  if (!t.trial.active) {
    // The rate of the setting in use: every window since it changed, the last few weighing
    // most (a stall that made the consumer wait is one of them, not the whole base).
    t.settled_batches = t.settled_batches * kSettledDecay + count;
    t.settled_seconds = t.settled_seconds * kSettledDecay + seconds;
  }
  if (t.trial.active) {
    // A raise on trial: kept only when the batches/s of the windows since beat those of the
    // setting before by kGain; else undone, and not tried again for a while (twice as long
    // after each failure), since more is not always faster (deeper queues leave the caches, more
    // workers share the cores with the consumer).
    if (t.trial.windows++ > 0) {
      t.trial.batches += count;
      t.trial.seconds += seconds;
    }
    if (t.trial.windows <= kTrialWindows) return;
    t.trial.active = false;
    const double after = t.trial.batches / t.trial.seconds;
    const double before = t.trial.base_rate;
    Trial::Kind& kind = t.trial.worker ? t.worker_kind : t.slot_kind;
    if (after >= before * (1 + kGain)) {
      kind.backoff = kRetryWindows;
      if (t.trial.worker) {
        t.workers_floor = std::max(t.workers_floor, workers);
      } else {
        t.slots_floor = std::max(t.slots_floor, t.trial.slots + 1);
      }
      t.settled_batches = t.trial.batches;  // the rate of the setting kept
      t.settled_seconds = t.trial.seconds;
      return;
    }
    kind.blocked_until = t.window_count + kind.backoff;
    kind.backoff = std::min(kind.backoff * 2, kMaxBackoff);
    new_workers = t.trial.workers;
    new_slots = t.trial.slots;
    why = std::string("undid raised ") + (t.trial.worker ? "workers" : "prefetch") +
          ": no faster (" + std::to_string(std::lround(after)) + " batches/s against " +
          std::to_string(std::lround(before)) + ")";
  } else if (inside > kWaits) {
    // The consumer waits: try a worker more first, as long as the cores and the budget allow
    // (the workers' read time cannot say whether they are the bottleneck: waking a worker for
    // each batch, or a machine shared with other work, is not in it); then a deeper queue
    // (read time cannot say either whether the workers would gain from it: on a machine shared
    // with other work, a deeper queue hides the planner's and the workers' late wake-ups; on a
    // fast dataset, it may leave the caches). From the second waiting window in a row, so that
    // one stall of the machine changes nothing.
    const bool want_worker = can_add_worker && t.window_count >= t.worker_kind.blocked_until;
    const bool slots_ok = deeper > slots && t.window_count >= t.slot_kind.blocked_until;
    if (t.waiting_windows >= 2 && (want_worker || slots_ok)) {
      t.trial = Trial{};
      t.trial.active = true;
      t.trial.worker = want_worker;
      t.trial.workers = workers;
      t.trial.slots = slots;
      t.trial.base_rate = t.settled_batches / std::max(t.settled_seconds, 1e-9);
      if (want_worker) {
        new_workers = workers + 1;
        why = "raised workers: " + measured;
      } else {
        new_slots = deeper;
        why = "raised prefetch: " + measured;
      }
    }
  } else if (wait < kIdle) {
    // The consumer sets the pace: give back a worker it does not need, and a slot. Not below
    // what it was seen waiting at (a floor that each kFloorWindows idle windows in a row lower
    // by one, so that a consumer that turned slow gets its memory back), and a worker only when
    // the others would stay under kSpare without it (else the next window adds it back).
    if (t.idle_windows >= kFloorWindows) {
      t.idle_windows = 0;
      t.slots_floor = std::max(kMinSlotsInUse, t.slots_floor - 1);
      t.workers_floor = std::max(1, t.workers_floor - 1);
    }
    if (workers > std::max(1, t.workers_floor) && busy * workers / (workers - 1) < kSpare) {
      new_workers = workers - 1;
    }
    // Batches the user keeps hold slots too: never so few that the ring stalls.
    if (slots > std::max({kMinSlotsInUse, t.slots_floor, ring.kept() + kMinSlotsInUse})) {
      new_slots = slots - 1;
    }
    if (new_workers != workers || new_slots != slots) {
      why = "lowered: " + measured;
    }
  }
  if (why.empty()) return;
  // The rate of a setting is measured from the window after it changed.
  t.settled_batches = 0;
  t.settled_seconds = 0;
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
