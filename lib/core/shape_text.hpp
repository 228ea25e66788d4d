#pragma once

// How error messages write a shape: "[2, 3, 4]".

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ferry::detail {

inline std::string shape_text(std::span<const std::int64_t> shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace ferry::detail
