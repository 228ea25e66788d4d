// ImageFolder's decoder on arbitrary bytes: the first 4 bytes pick the output (height, width,
// channels, geometry, flip, resize, seed), the rest is the file. Only DataError may come out,
// and an image that decodes must decode to the same bytes again (the per-thread buffers carry
// nothing from one image to the next).

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "datasets/image_decode.hpp"
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
  o.resize = (data[3] & 0x80) != 0 ? data[3] & 0x7f : 0;  // 0: automatic
  const std::uint64_t seed = data[3];
  const std::span<const std::uint8_t> bytes(data + 4, size - 4);
  const auto n = static_cast<std::size_t>(o.height * o.width * o.channels);
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
