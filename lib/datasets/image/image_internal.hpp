#pragma once

// What the pieces of the image decoder share (image_decode.cpp, the driver and its buffers;
// image_jpeg.cpp; image_png.cpp; image_geometry.cpp, the plan and the resize). Internal to
// lib/datasets/image.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "datasets/image/image_decode.hpp"
#include "datasets/image/image_resample.hpp"

namespace ferry::detail::image {

// Raises DataError: "<name>: <why>".
[[noreturn]] void fail(std::string_view name, const std::string& why);

// A buffer that is never zeroed: one per thread and purpose, so decoding reuses the same memory
// image after image. It grows as needed (by half again, up to kScratchKeepBytes, so that slowly
// growing sizes do not reallocate each time), and trim() releases it when one large image made
// it larger than what is worth keeping.
class Scratch {
 public:
  std::uint8_t* get(std::size_t n) {
    if (n > capacity_) {
      const std::size_t grown = std::max(n, std::min(capacity_ + capacity_ / 2, kScratchKeepBytes));
      data_.reset();  // before allocating the new one: the peak holds one buffer, not two
      capacity_ = 0;
      data_ = std::make_unique_for_overwrite<std::uint8_t[]>(grown);
      capacity_ = grown;
    }
    return data_.get();
  }
  void trim(std::size_t keep) noexcept {
    if (capacity_ > keep) {
      data_.reset();
      capacity_ = 0;
    }
  }
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::unique_ptr<std::uint8_t[]> data_;
  std::size_t capacity_ = 0;
};

// This thread's buffers: the file read, the decoded pixels, the resize's working memory, and
// one more for the AVX2 horizontal pass's transposed rows (and, before it, a PNG's IDAT data
// joined from several chunks).
Scratch& file_scratch();
Scratch& pixel_scratch();
Scratch& resize_scratch();
Scratch& transpose_scratch();

// Raises DataError for an image of width × height pixels, more than max_pixels.
[[noreturn]] void fail_too_large(std::string_view name, const char* format, std::int64_t width,
                                 std::int64_t height, std::int64_t max_pixels);

// The header's size, before anything is allocated for it: within 1 .. max_pixels pixels.
void check_size(std::int64_t width, std::int64_t height, std::int64_t max_pixels,
                std::string_view name, const char* format);

// The big-endian 32-bit number at `p` (PNG's lengths, sizes and CRCs).
inline std::uint32_t big_endian32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

// Bytes of `pixels` pixels (width × height) of `channels` bytes each, in this thread's scratch.
std::uint8_t* pixel_buffer(int width, int height, int channels, std::string_view name);

// ITU-R 601 luma, as PIL's convert("L"): (299 R + 587 G + 114 B) / 1000, rounded (so gray
// stays exactly gray).
inline std::uint8_t luma(unsigned r, unsigned g, unsigned b) {
  return static_cast<std::uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
}

// Decoded pixels of the requested channels: the image (`scale` of its pixels per source pixel,
// below 1 when libjpeg scaled it down) from column `left` and row `top` on, `width` pixels a
// row. A JPEG decodes only the part the output needs; a PNG is whole (left = top = 0).
struct Decoded {
  const std::uint8_t* pixels = nullptr;
  int width = 0;
  int left = 0, top = 0;
  int channels = 0;  ///< 0: the output's; 4 for a 3-channel output where packs_rgbx()
};

// How the plan's source box maps onto its output window, in the decoded image's pixels (an
// image `width` × `height` at `scale`): the resize on each axis, and so the pixels it reads,
// [x.lo, x.hi) × [y.lo, y.hi).
struct Fit {
  ResampleAxis x, y;
  // What each axis was planned for (box, size, output): a dataset of equal-sized images plans
  // once per thread, not once per image.
  struct Key {
    double b0 = -1, b1 = -1;
    int size = -1, out = -1;
    bool operator==(const Key&) const = default;
  };
  Key x_key, y_key;
};

// This thread's Fit for the plan.
// \throws DataError "<name>: resizing ... needs about <n> bytes of working memory, more than
// the <kMaxResizeBytes> ImageFolder allows", before anything is allocated.
Fit& fit_image(const ImagePlan& p, const ImageOptions& o, double scale, int width, int height,
               std::string_view name);

// Applies the plan: zeros where the window leaves the output bare, the window resized (or
// copied, pixel for pixel) from `d`, which holds at least the pixels `f` reads, and the flip.
void place(const Decoded& d, const ImagePlan& p, const Fit& f, const ImageOptions& o,
           std::uint8_t* out);

// Decodes a JPEG (image_jpeg.cpp) or a PNG (image_png.cpp) into `out`, as decode_image().
void decode_jpeg(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                 std::uint8_t* out, std::string_view name);
void decode_png(std::span<const std::uint8_t> bytes, const ImageOptions& o, std::uint64_t seed,
                std::uint8_t* out, std::string_view name);

}  // namespace ferry::detail::image
