#pragma once

// The machine's own limits for the image workloads of bench/compare, measured on one thread
// (ferry_side limits multiplies them by the cores):
//   PNG   each file opened, sized (fstat), read into a reused buffer and closed, then decoded
//         from memory by libspng (gray 8-bit as G8, anything else as RGB8): what a loader of
//         loose PNG files cannot beat;
//   JPEG  libjpeg-turbo's decode of the whole image (TurboJPEG, RGB, from memory, the files
//         read beforehand): what a loader that decoded every pixel would reach.
//   JPEG crops (jpeg_crop_limit): the training crop's ceiling. For each image a crop box (the
//         caller's: bench/ferry_side draws them with ferry's own RandomResizedCrop plan), decoded
//         through the libjpeg API alone: DCT-scaled by the largest power of two (1/8, 1/4, 1/2:
//         libjpeg-turbo's SIMD IDCTs) that keeps the crop at least `out` pixels on both sides,
//         only the crop's columns (jpeg_crop_scanline), the rows above it skipped
//         (jpeg_skip_scanlines, which still entropy-decodes them), none below it
//         (jpeg_abort_decompress after its last row); RGB, islow IDCT and fancy upsampling as
//         ferry and PIL decode; no resize. Beside it the full decode in the same CPU clock.

#include <cstddef>
#include <filesystem>
#include <vector>

namespace bench {

struct ImageLimit {
  std::size_t images = 0;
  double read_s = 0;    ///< seconds per image to open + fstat + read + close (PNG only)
  double decode_s = 0;  ///< seconds per image to decode
  double per_core() const { return 1 / (read_s + decode_s); }  ///< images/s on one core
};

/// A crop box in source pixels.
struct CropBox {
  int x = 0, y = 0, width = 0, height = 0;
};

/// Thread CPU seconds per image (medians of `reps` passes each, the two kinds interleaved):
/// TurboJPEG's full decode, the crop ceiling above (boxes[i] for files[i]), and the entropy
/// decoding alone of the whole image (the floor of a decode that reads to the last row); how many
/// crops decoded at each scale (1/1, 1/2, 1/4, 1/8).
struct CropLimit {
  std::size_t images = 0;
  double full_s = 0;
  double crop_s = 0;
  double entropy_s = 0;  ///< Huffman decoding alone of the whole image (jpeg_read_coefficients)
  std::size_t at_scale[4] = {0, 0, 0, 0};
};
CropLimit jpeg_crop_limit(const std::vector<std::filesystem::path>& files,
                          const std::vector<CropBox>& boxes, int out, int reps);

/// Medians of `reps` passes over `files` after a warm-up one.
ImageLimit png_limit(const std::vector<std::filesystem::path>& files, int reps);
ImageLimit jpeg_limit(const std::vector<std::filesystem::path>& files, int reps);

}  // namespace bench
