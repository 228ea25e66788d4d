#pragma once

// Included first in every C++ file of the library (CMake: -include), for one purpose: the
// dataset headers do not mark their classes FERRY_API yet, and under -fvisibility=hidden they
// would stay inside libferry. Declaring them here first, with default visibility, exports them.
// Remove this file (and its -include in CMakeLists.txt) once those headers say FERRY_API.

// Everything they include, first, with its own visibility.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/limits.hpp"
#include "ferry/ops.hpp"
#include "ferry/tensor.hpp"

namespace ferry {
struct CsvBuilder;  // csv_dataset.hpp's friend: internal
namespace detail {
struct SlotLayout;  // dataset.hpp's SampleRef points to one: internal
}  // namespace detail
}  // namespace ferry

#pragma GCC visibility push(default)
#include "ferry/csv_dataset.hpp"   // IWYU pragma: keep
#include "ferry/dataset.hpp"       // IWYU pragma: keep
#include "ferry/idx_dataset.hpp"   // IWYU pragma: keep
#include "ferry/image_folder.hpp"  // IWYU pragma: keep
#pragma GCC visibility pop
