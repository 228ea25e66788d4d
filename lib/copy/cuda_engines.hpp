#pragma once

// The GPUs' copy engines as the rest of ferry sees them: no CUDA types here. Implemented by
// copy/cuda/cuda_engines.cpp when ferry is built with CUDA, by copy/no_cuda/ otherwise.

#include <memory>

#include "copy/copy_engine.hpp"

namespace ferry::detail::cuda {

/// The process-wide copy engine of cuda:index, made on first use.
/// \throws DeviceError when the device is not usable.
CopyEngine& engine(int index);
/// A copy engine of its own for cuda:index (its own stream), as a loader's copy stage uses.
/// \throws DeviceError when the device is not usable.
std::unique_ptr<CopyEngine> make_engine(int index);

}  // namespace ferry::detail::cuda
