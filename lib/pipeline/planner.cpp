#include "pipeline/planner.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <vector>

#include "pipeline/fault.hpp"
#include "pipeline/fill.hpp"

namespace ferry::detail {

namespace {

// Tells the dataset the samples this run will read, in order (Dataset::will_read): its
// batches' indices, padding included. Nothing for a dataset that takes no such hint, or one
// gathered from rows in memory.
void hint_order(RunState& run) {
  const LoaderImpl& impl = *run.impl;
  if (impl.layout->gather || run.start >= run.end || !impl.dataset->wants_read_order()) return;
  std::vector<std::size_t> order;
  std::vector<std::uint64_t> batch;
  for (std::size_t k = run.start; k < run.end; ++k) {
    if (run.plan) {
      run.plan->batch(k, batch);
    } else {
      run.sampler.batch(run.order, k, batch);
    }
    order.insert(order.end(), batch.begin(), batch.end());
  }
  impl.dataset->will_read(order);
}

}  // namespace

void run_planner(RunState& run) {
  LoaderImpl& impl = *run.impl;
  BufferRing& ring = *impl.ring;
  const auto stop = [&] { return run.stop_requested(); };
  try {
    hint_order(run);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a hint, not needed for the epoch to run
  }
  const auto may_make = [&] { return tuning_may_make_slot(impl); };
  tuning_begin(impl);
  for (std::size_t k = run.start; k < run.end; ++k) {
    // Autotune's window: workers and slots in use change here, between batches, on this thread.
    if (impl.tuning.enabled) {
      try {
        tuning_step(impl);
      } catch (...) {  // NOLINT(bugprone-empty-catch): a decision not recorded changes nothing
      }
    }
    const std::optional<std::uint32_t> id = ring.acquire_slot(stop, &impl.slot_wait_ns, may_make);
    if (!id) break;  // stopping
    if (run.stop_requested()) {
      ring.release_slot(*id);
      break;
    }
    Slot& slot = ring.slot(*id);
    slot.error = nullptr;
    slot.number = k;
    slot.filled.store(0, std::memory_order_relaxed);
    bool planned = false;
    try {
      try {
        slot.copied.synchronize();  // the copy out of this slot (copy stage) has finished
      } catch (...) {
        slot.error = std::current_exception();
      }
      slot.copied = Event();
      fault(FaultPoint::planner, k);
      if (run.plan) {
        run.plan->batch(k, slot.indices, &slot.places);
      } else {
        run.sampler.batch(run.order, k, slot.indices, &slot.places);
      }
      if (impl.layout->gather) {
        // Nothing to read: the slot carries the indices, the copy stage gathers the rows.
        std::memcpy(slot.data, slot.indices.data(), slot.indices.size() * sizeof(std::uint64_t));
        slot.filled.store(k + 1, std::memory_order_release);
        run.planned.push(Planned{*id, k});
        run.planned_signal.notify();
        run.filled.notify();
        continue;
      }
      // No sample has failed yet (a batch before, failed under raise, may have left some).
      std::fill_n(slot.failures.begin(), slot.indices.size(), nullptr);
      // Ragged fields: where each sample's rows go, and the lengths and starts tables.
      if (impl.ragged->any) {
        impl.ragged->plan(*impl.dataset, impl.layout->written, slot.indices, slot.rows, slot.data,
                          slot.failures);
      }
      run.planned.push(Planned{*id, k});
      planned = true;
      run.planned_signal.notify();
      enqueue_fill(run, *id, k);
    } catch (...) {
      // The failure travels in batch k's place: batches before it are delivered, then next()
      // rethrows it, and planning stops here.
      slot.error = std::current_exception();
      slot.filled.store(k + 1, std::memory_order_release);
      if (!planned) run.planned.push(Planned{*id, k});
      run.planned_signal.notify();
      run.filled.notify();
      return;
    }
  }
}

}  // namespace ferry::detail
