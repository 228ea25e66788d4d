// ImageFolder's decoder on arbitrary bytes: the first 4 bytes pick the output (height, width,
// channels, geometry, flip, resize, seed), the rest is the file. Only DataError may come out,
// and an image that decodes must decode to the same bytes again (the per-thread buffers carry
// nothing from one image to the next). The limits are lower than ImageOptions' defaults so that
// each input stays quick: 4 megapixels, 32 scans.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "datasets/image/image_decode.hpp"
#include "ferry/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  static constexpr int kChannels[] = {1, 3, 4};
  ferry::ImageOptions o;
  o.height = 1 + data[0] % 48;
  o.width = 1 + data[1] % 48;
  o.channels = kChannels[(data[2] & 3) % 3];
  o.geometry = static_cast<ferry::Geometry>((data[2] >> 2) % 3);
  o.random_flip = (data[2] & 0x20) != 0;
  if (o.geometry == ferry::Geometry::resize_then_center_crop && (data[3] & 0x80) != 0) {
    o.resize = data[3] & 0x7f;  // else 0: automatic (the only value the other geometries take)
  }
  o.max_pixels = std::int64_t{1} << 22;
  o.max_jpeg_scans = 32;
  ferry::detail::check_image_options(o, "fuzz");  // ConfigError here is the harness's bug
  const std::uint64_t seed = data[3];
  const std::span<const std::uint8_t> bytes(data + 4, size - 4);
  const std::size_t n = static_cast<std::size_t>(o.height) * static_cast<std::size_t>(o.width) *
                        static_cast<std::size_t>(o.channels);
  std::vector<std::uint8_t> first(n), again(n);
  try {
    ferry::detail::decode_image(bytes, o, seed, first.data(), "input");
  } catch (const ferry::DataError&) {
    return 0;
  }
  ferry::detail::decode_image(bytes, o, seed, again.data(), "input");
  if (first != again) __builtin_trap();
  return 0;
}
