#pragma once

// Test and benchmark knobs, kept out of the public options: a loader whose copy stage runs on
// the host copy engine, standing in for a GPU where there is none.

#include <memory>

#include "ferry/loader.hpp"

namespace ferry::detail {

/// Runs the copy stage on the host copy engine although the device is the CPU: batches are
/// copied into separate host buffers on a copy thread, at `bytes_per_second` if > 0. The
/// batches are the same as without it.
struct SimulatedCopy {
  bool enabled = false;
  double bytes_per_second = 0;
  /// Treat a dataset's rows in CPU memory (Dataset::rows_in_memory) as if they lived in the
  /// simulated device's memory, so batches are gathered "on the device" as for rows on a GPU.
  bool dataset_on_device = false;
};

/// A loader as Loader(dataset, options), with `simulated`. \throws as Loader's constructor, and
/// ConfigError when `simulated` is enabled for a device other than the CPU.
Loader make_loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                   const SimulatedCopy& simulated);

}  // namespace ferry::detail
