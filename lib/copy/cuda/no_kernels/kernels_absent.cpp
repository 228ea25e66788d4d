// Kernel launchers of a build that found the CUDA runtime but no CUDA compiler.

#include "copy/cuda/kernels.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::cuda {

void launch_convert_image(const ImageConvert& /*args*/, void* /*stream*/) {
  throw DeviceError("ferry was built without CUDA kernels (no CUDA compiler was found)");
}

void launch_gather_rows(const void* /*src*/, void* /*dst*/, const std::uint64_t* /*indices*/,
                        std::size_t /*count*/, std::size_t /*row_bytes*/, void* /*stream*/) {
  throw DeviceError("ferry was built without CUDA kernels (no CUDA compiler was found)");
}

void launch_pad_rows(const PadRows& /*args*/, void* /*stream*/) {
  throw DeviceError("ferry was built without CUDA kernels (no CUDA compiler was found)");
}

void launch_convert(const void* /*src*/, DType /*from*/, void* /*dst*/, DType /*to*/,
                    std::size_t /*count*/, void* /*stream*/) {
  throw DeviceError("ferry was built without CUDA kernels (no CUDA compiler was found)");
}

}  // namespace ferry::detail::cuda
