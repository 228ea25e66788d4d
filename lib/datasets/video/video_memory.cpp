// decode_video(): one clip of a video held in memory (WebDataset's members), and video_field().

#include <string>
#include <utility>
#include <vector>

#include "datasets/video/video_av.hpp"
#include "datasets/video/video_index.hpp"
#include "ferry/error.hpp"
#include "ferry/video.hpp"

namespace ferry {

FieldSpec video_field(const VideoOptions& options, std::string name) {
  detail::video::check_video_options(options, "VideoOptions");
  return {std::move(name), DType::u8, {options.frames, options.height, options.width, 3}};
}

void decode_video(std::span<const std::byte> bytes, const VideoOptions& options, std::uint64_t seed,
                  std::span<std::uint8_t> out, const std::string& name) {
  detail::video::check_video_options(options, "VideoOptions");
  const std::size_t want = static_cast<std::size_t>(options.frames) *
                           static_cast<std::size_t>(options.height) *
                           static_cast<std::size_t>(options.width) * 3;
  if (out.size() != want) {
    throw ConfigError(name + ": decode_video() given " + std::to_string(out.size()) +
                      " bytes for a clip of " + std::to_string(want));
  }
  detail::VideoIndex index;
  {
    detail::video::AvInput in = detail::video::AvInput::open_memory(bytes, name);
    index = detail::video::index_video(in, name, options.max_seconds);
  }
  const std::vector<std::int64_t> frames =
      detail::video::clip_frame_numbers(static_cast<std::int64_t>(index.pts.size()), options, seed);
  // A fresh reader for the clip: decode_clip() starts where a container just opened stands.
  detail::video::AvInput in = detail::video::AvInput::open_memory(bytes, name);
  detail::video::decode_clip(in, index, frames, options, out.data(), name);
}

}  // namespace ferry
