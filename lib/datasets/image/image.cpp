#include "ferry/image.hpp"

#include <string>
#include <utility>

#include "datasets/image/image_decode.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

constexpr const char* kImageWho = "ImageOptions";

// `out` when it is the image's size under `options` (which passed check_image_options()).
std::uint8_t* checked_out(std::span<std::uint8_t> out, const ImageOptions& o) {
  // Each side is at most max_pixels (2^28): the product fits in 64 bits.
  const auto bytes = static_cast<std::uint64_t>(o.height) * static_cast<std::uint64_t>(o.width) *
                     static_cast<std::uint64_t>(o.channels);
  if (out.size() != bytes) {
    throw ConfigError("decode_image: out has " + std::to_string(out.size()) + " bytes, the image " +
                      std::to_string(o.height) + " x " + std::to_string(o.width) + " x " +
                      std::to_string(o.channels) + " takes " + std::to_string(bytes));
  }
  return out.data();
}

}  // namespace

std::vector<std::int64_t> image_shape(const ImageOptions& options) {
  detail::check_image_options(options, kImageWho);
  return {options.height, options.width, options.channels};
}

FieldSpec image_field(const ImageOptions& options, std::string name) {
  FieldSpec field{std::move(name), DType::u8, image_shape(options)};
  field.normalize = options.normalize;
  return field;
}

void decode_image(std::span<const std::byte> encoded, const ImageOptions& options,
                  std::uint64_t seed, std::span<std::uint8_t> out, std::string_view name) {
  detail::check_image_options(options, kImageWho);
  std::uint8_t* const to = checked_out(out, options);
  detail::decode_image({reinterpret_cast<const std::uint8_t*>(encoded.data()), encoded.size()},
                       options, seed, to, name);
}

void decode_image_file(const std::filesystem::path& file, const ImageOptions& options,
                       std::uint64_t seed, std::span<std::uint8_t> out, std::string_view name) {
  detail::check_image_options(options, kImageWho);
  std::uint8_t* const to = checked_out(out, options);
  if (name.empty()) name = file.native();
  detail::decode_image(detail::read_file_bytes(file, name, detail::max_file_bytes(options)),
                       options, seed, to, name);
}

}  // namespace ferry
