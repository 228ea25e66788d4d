#pragma once

#include "ferry/export.hpp"

namespace ferry {

/// ferry's version, "major.minor.patch".
inline constexpr const char* kVersion = "0.1.0";

/// True when this build of ferry has its CUDA backend (a GPU may still be absent at run time).
FERRY_API bool built_with_cuda() noexcept;

}  // namespace ferry
