#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::detail {

/// Epoch lists a Mixture has worked out (Mixture::epoch_indices calls, its own and those it makes
/// of the mixtures among its sources): what tests count to see that a nest of mixtures costs the
/// same at every epoch.
inline std::atomic<std::uint64_t> mixture_lists{0};

}  // namespace ferry::detail
