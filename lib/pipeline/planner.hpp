#pragma once

#include "pipeline/loader_impl.hpp"

namespace ferry::detail {

/// The planner thread's body: for each batch of the run, takes a free slot (the only place a
/// thread waits for one; TBB workers never do), writes the batch's indices into it, queues it
/// for the copy stage, and hands its reading to the fill stage. A failure travels in its
/// batch's slot.
void run_planner(RunState& run);

}  // namespace ferry::detail
