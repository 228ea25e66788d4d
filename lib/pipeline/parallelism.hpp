#pragma once

// oneTBB's pool size for the whole process. Its pool has one thread fewer than the cores by
// default, and a loader may ask for more workers. tbb::global_control(max_allowed_parallelism)
// raises the bound, but where several are alive the lowest wins: a second loader's higher
// bound would be ignored (and oneTBB would print a warning on the user's terminal). So loaders
// share one control, raised to the largest need of the loaders alive and kept while any is.

#include <cstddef>

namespace ferry::detail {

/// Holds oneTBB's parallelism at `threads` or more while it lives.
class ParallelismLease {
 public:
  explicit ParallelismLease(std::size_t threads);
  ~ParallelismLease();
  ParallelismLease(const ParallelismLease&) = delete;
  ParallelismLease& operator=(const ParallelismLease&) = delete;
};

}  // namespace ferry::detail
