#pragma once

// The machine's own limits for the image workloads of bench/compare, measured on one thread
// (ferry_side limits multiplies them by the cores):
//   PNG   each file opened, sized (fstat), read into a reused buffer and closed, then decoded
//         from memory by libspng (gray 8-bit as G8, anything else as RGB8): what a loader of
//         loose PNG files cannot beat;
//   JPEG  libjpeg-turbo's decode of the whole image (TurboJPEG, RGB, from memory, the files
//         read beforehand): what a loader that decoded every pixel would reach.

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

/// Medians of `reps` passes over `files` after a warm-up one.
ImageLimit png_limit(const std::vector<std::filesystem::path>& files, int reps);
ImageLimit jpeg_limit(const std::vector<std::filesystem::path>& files, int reps);

}  // namespace bench
