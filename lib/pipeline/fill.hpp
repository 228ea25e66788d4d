#pragma once

#include <cstdint>

#include "pipeline/loader_impl.hpp"

namespace ferry::detail {

/// Queues the reading of batch `number` into `slot` on the loader's arena: a parallel_for over
/// its samples, each Dataset::read writing in place, then the field operations per sample
/// where there is no copy stage. Failures of samples are settled by the error policy; the
/// fill's own failure becomes the batch's. Then slot.filled is set to number + 1.
/// In a child of fork() whose parent had started oneTBB's pool (which the child lacks), the fill
/// runs at once on the calling thread, its samples one after another.
/// \throws what enqueueing throws (nothing is queued then).
void enqueue_fill(RunState& run, std::uint32_t slot, std::uint64_t number);

}  // namespace ferry::detail
