// samples/train_images/reference.hpp: the slow, plain way to turn a JPEG into a 28x28 sample,
// written here without ferry's image code, for train_images to compare ferry's fast path with.
//
// The whole JPEG is decoded by libjpeg-turbo's TurboJPEG (no cropping, no DCT scaling), then
// resized as torchvision's Resize(size) does with PIL's antialiased bilinear filter, computed in
// double precision, and the centre cut out as CenterCrop does.

#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace reference {

// A grayscale image: height rows of width bytes.
struct GrayImage {
  std::size_t width = 0, height = 0;
  std::vector<std::uint8_t> pixels;
};

// The whole JPEG file decoded to gray by TurboJPEG. Throws std::runtime_error naming the file
// when it cannot be read or decoded.
GrayImage decode_jpeg_file(const std::filesystem::path& file);

// torchvision's Resize(resize) + CenterCrop((out_height, out_width)) of `image`, as
// out_height x out_width bytes:
//  * Resize: the shorter side to `resize`, the longer to int(resize * long / short), by PIL's
//    bilinear filter (a triangle, widened by the scale factor when shrinking, each output's
//    weights normalized to sum 1, PIL's rounding of each window's ends), in double precision,
//    rounded to bytes once at the end (PIL rounds to bytes between its two passes too);
//  * CenterCrop: the window starting at round((resized - out) / 2), a half rounded to even as
//    Python's round() does.
// Throws std::invalid_argument when the crop does not fit in the resized image.
std::vector<std::uint8_t> resize_then_center_crop(const GrayImage& image, std::size_t resize,
                                                  std::size_t out_height, std::size_t out_width);

}  // namespace reference
