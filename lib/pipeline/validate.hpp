#pragma once

// Loader option checks (validate.cpp), run first when a Loader is made.

#include "ferry/loader.hpp"

namespace ferry::detail {

struct SimulatedCopy;

/// Bounds on counts of threads and buffers: beyond them a loader is a mistake, not a choice.
inline constexpr int kMaxWorkers = 1024;
inline constexpr int kMaxBuffers = 1024;

/// Checks `o` and `dataset` before a loader over them is built.
/// \throws ConfigError naming the option, field or count at fault.
void validate_options(const Dataset* dataset, const LoaderOptions& o, const SimulatedCopy& sim);

}  // namespace ferry::detail
