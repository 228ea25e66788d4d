#pragma once

// cudasim's stand-in for CUDA's binary16 header, for kernels run on the CPU (cudasim_device.hpp):
// the conversions the kernels use, rounding as ferry's own rules do (ties to even).

#include <cstdint>

#include "core/convert_rules.hpp"

struct __half {
  std::uint16_t bits;
};

inline __half __float2half_rn(float v) { return __half{ferry::detail::rules::half_bits(v)}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
