#pragma once

// Launchers of ferry's CUDA kernels (kernels.cu). No CUDA types: the stream is a cudaStream_t
// passed as void*. Each throws DeviceError on a launch failure.

#include <cstddef>
#include <cstdint>

#include "core/image_ops.hpp"
#include "core/row_ops.hpp"
#include "ferry/dtype.hpp"

namespace ferry::detail::cuda {

/// The GPU twin of convert_image_cpu.
void launch_convert_image(const ImageConvert& args, void* stream);
/// dst row i = src row indices[i], for `count` rows of `row_bytes`; indices in device memory.
void launch_gather_rows(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                        std::size_t row_bytes, void* stream);
/// The GPU twin of pad_rows_cpu.
void launch_pad_rows(const PadRows& args, void* stream);
/// The GPU twin of ferry::convert.
void launch_convert(const void* src, DType from, void* dst, DType to, std::size_t count,
                    void* stream);

}  // namespace ferry::detail::cuda
