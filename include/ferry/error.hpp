#pragma once

#include <stdexcept>
#include <string>

#include "ferry/export.hpp"

namespace ferry {

/// Base of every error ferry throws.
class FERRY_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Bad input: a missing file, a corrupt sample, a ragged row. The message names the file and
/// the place (line, byte, sample index) where it applies.
class FERRY_API DataError : public Error {
 public:
  using Error::Error;
};

/// A device that cannot be used, or a failed CUDA call. The message carries the CUDA error text.
class FERRY_API DeviceError : public Error {
 public:
  using Error::Error;
};

/// Options or arguments that do not fit together: a bad shape, an unsupported dtype, a
/// negative count.
class FERRY_API ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace ferry
