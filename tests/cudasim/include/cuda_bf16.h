#pragma once

// cudasim's stand-in for CUDA's bfloat16 header, for kernels run on the CPU (cudasim_device.hpp):
// the conversions the kernels use, rounding as ferry's own rules do (ties to even).

#include <cstdint>

#include "core/convert_rules.hpp"

struct __nv_bfloat16 {
  std::uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16_rn(float v) {
  return __nv_bfloat16{ferry::detail::rules::bfloat16_bits(v)};
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
