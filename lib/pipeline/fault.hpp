#pragma once

// Fault injection for the loader's tests: the pipeline calls fault() at named points of its
// background work, and a test installs a hook that throws there, standing in for an allocation
// or thread-start failure that cannot be provoked on demand. Without a hook it costs one atomic
// load per batch.

#include <cstdint>

namespace ferry::detail {

enum class FaultPoint {
  thread_start,  ///< an epoch starting its threads (batch = the epoch's first batch)
  planner,       ///< the planner thread, before it plans `batch`
  fill,          ///< a fill task, before it reads `batch`'s samples
  copy,          ///< the copy thread, before it copies `batch`
};

/// May throw: the exception stands for a failure at that point.
using FaultHook = void (*)(FaultPoint point, std::uint64_t batch);

/// Installs `hook` (nullptr: none) for every loader of the process; returns the previous one.
FaultHook set_fault_hook(FaultHook hook) noexcept;

/// Calls the hook, if any.
void fault(FaultPoint point, std::uint64_t batch);

}  // namespace ferry::detail
