#pragma once

#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/export.hpp"
#include "ferry/tensor.hpp"

namespace ferry {

/// Per-channel normalization of uint8 images: out = (x * scale - mean[c]) / std[c], computed as
/// fma(x, scale / std[c], -mean[c] / std[c]) in f32 and then rounded to `dtype`, identically on
/// every device. With the default scale, mean and std are in PyTorch's 0..1 units
/// (torchvision's ToTensor + Normalize), e.g. {0.485, 0.456, 0.406} / {0.229, 0.224, 0.225};
/// Normalize{} alone scales pixels to [0, 1], as ToTensor does.
struct Normalize {
  std::vector<float> mean = {0.0f};  ///< one per channel, or one for all
  std::vector<float> std = {1.0f};   ///< one per channel, or one for all; none may be 0
  float scale = 1.0f / 255.0f;       ///< 1 to give mean/std in pixel units (as DALI)
  DType dtype = DType::f32;          ///< f32, f16 or bf16
  friend bool operator==(const Normalize&, const Normalize&) = default;
};

/// uint8 images [N, H, W, C] (or [H, W, C]) to `norm.dtype` [N, C, H, W] (or [C, H, W]), on the
/// images' device: a CUDA kernel on a GPU (queued on the copy stream, after the copy that
/// brought the images), its CPU twin on the CPU. \throws ConfigError on a bad shape, dtype,
/// channel count or a zero std.
FERRY_API Tensor normalize_images(const Tensor& images, const Normalize& norm);

/// Images [N, H, W, C] (or [H, W, C]) of any dtype to [N, C, H, W] (or [C, H, W]), same dtype,
/// on the images' device.
FERRY_API Tensor hwc_to_chw(const Tensor& images);

}  // namespace ferry
