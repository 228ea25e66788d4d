// A video's index kept beside it, "<video>.ferryidx", so that opening the folder again reads one
// small file instead of every packet. It records the video's size and modification time and is
// used only while both still match; anything else wrong with it (magic, version, checksum,
// values out of order) makes it ignored and rebuilt. Written atomically (atomic_file.hpp);
// where the folder cannot be written, silently not at all.
//
// Format (little-endian): "FERRYVID" u32 version, u64 video size, i64 mtime (ns), f64 the
// header's seconds (negative: none), i32 stream, i64 discarded packets, u8 counted (1: frames
// numbered by the decoder's output, pts holding dts), u64 frames, per frame i64
// pts, u64 keyframes, per keyframe i64 frame and i64 seek timestamp; then u64 FNV-1a of all that
// precedes.

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "datasets/common/atomic_file.hpp"
#include "datasets/common/file_io.hpp"
#include "datasets/common/sidecar_bytes.hpp"
#include "datasets/video/video_av.hpp"
#include "datasets/video/video_index.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::video {
namespace {

constexpr std::string_view kVideoSidecarMagic = "FERRYVID";
// 3: leading frames of a cut stream (before or at the first keyframe's time) are not counted.
// 4: a seek asks for the keyframe's pts (min(pts, dts) before, a GOP early in an MP4).
constexpr std::uint32_t kVideoSidecarVersion = 4;

struct VideoStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
};

std::filesystem::path video_sidecar_path(const std::filesystem::path& video) {
  std::filesystem::path p = video;
  p += ".ferryidx";
  return p;
}

std::optional<VideoIndex> video_sidecar_parse(std::string_view bytes, const VideoStamp& stamp,
                                              double& seconds) {
  if (bytes.size() < kVideoSidecarMagic.size() + 8 ||
      bytes.substr(0, kVideoSidecarMagic.size()) != kVideoSidecarMagic) {
    return {};
  }
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  if (SidecarCursor(bytes.substr(body.size())).get<std::uint64_t>() != sidecar_fnv1a(body)) {
    return {};
  }
  SidecarCursor c(body.substr(kVideoSidecarMagic.size()));
  const auto version = c.get<std::uint32_t>();
  const auto size = c.get<std::uint64_t>();
  const auto mtime = c.get<std::int64_t>();
  const auto secs = c.get<double>();
  const auto stream = c.get<std::int32_t>();
  const auto discarded = c.get<std::int64_t>();
  const auto counted = c.get<std::uint8_t>();
  const auto frames = c.get<std::uint64_t>();
  if (version != kVideoSidecarVersion || size != stamp.size || mtime != stamp.mtime_ns || !secs ||
      !stream || *stream < 0 || !discarded || *discarded < 0 || !counted || *counted > 1 ||
      !frames || *frames == 0 || *frames > c.left() / 8) {
    return {};
  }
  VideoIndex index;
  index.stream = *stream;
  index.discarded = *discarded;
  index.counted = *counted == 1;
  index.pts.resize(static_cast<std::size_t>(*frames));
  for (std::int64_t& p : index.pts) p = *c.get<std::int64_t>();
  if (!std::is_sorted(index.pts.begin(), index.pts.end())) return {};
  const auto keys = c.get<std::uint64_t>();
  if (!keys || *keys > c.left() / 16) return {};
  for (std::uint64_t k = 0; k < *keys; ++k) {
    const std::int64_t frame = *c.get<std::int64_t>();
    const std::int64_t seek = *c.get<std::int64_t>();
    if (frame < 0 || frame >= static_cast<std::int64_t>(*frames) ||
        (!index.keyframes.empty() && frame <= index.keyframes.back())) {
      return {};
    }
    index.keyframes.push_back(frame);
    index.seek_ts.push_back(seek);
  }
  if (c.left() != 0) return {};
  seconds = *secs;
  return index;
}

std::optional<VideoIndex> video_sidecar_load(const std::filesystem::path& sidecar,
                                             const VideoStamp& stamp, double& seconds) {
  try {
    const FileLabel label{"", sidecar.native()};
    const OpenFile file(sidecar, label);
    // 8 bytes a frame at the least, and a frame takes more than 8 bytes of the video.
    if (file.size() > 64 + 3 * stamp.size) return {};
    std::string bytes(file.size(), '\0');
    if (file.read_all({reinterpret_cast<std::byte*>(bytes.data()), bytes.size()}) != bytes.size()) {
      return {};
    }
    return video_sidecar_parse(bytes, stamp, seconds);
  } catch (const Error&) {
    return {};
  }
}

void video_sidecar_save(const std::filesystem::path& sidecar, const VideoStamp& stamp,
                        double seconds, const VideoIndex& index) noexcept {
  try {
    std::string out(kVideoSidecarMagic);
    sidecar_put(out, kVideoSidecarVersion);
    sidecar_put(out, stamp.size);
    sidecar_put(out, stamp.mtime_ns);
    sidecar_put(out, seconds);
    sidecar_put(out, static_cast<std::int32_t>(index.stream));
    sidecar_put(out, index.discarded);
    sidecar_put(out, static_cast<std::uint8_t>(index.counted ? 1 : 0));
    sidecar_put(out, static_cast<std::uint64_t>(index.pts.size()));
    for (const std::int64_t p : index.pts) sidecar_put(out, p);
    sidecar_put(out, static_cast<std::uint64_t>(index.keyframes.size()));
    for (std::size_t k = 0; k < index.keyframes.size(); ++k) {
      sidecar_put(out, index.keyframes[k]);
      sidecar_put(out, index.seek_ts[k]);
    }
    sidecar_put(out, sidecar_fnv1a(out));
    const FileLabel label{"", sidecar.native()};
    write_file_atomically(sidecar, std::as_bytes(std::span<const char>(out)), label);
  } catch (...) {  // NOLINT(bugprone-empty-catch): a cache that cannot be written is not kept
  }
}

}  // namespace

VideoIndex load_video_index(const std::filesystem::path& file, const std::string& name,
                            const VideoOptions& options) {
  const std::filesystem::path sidecar = video_sidecar_path(file);
  if (options.index_files) {
    VideoStamp stamp;
    {
      const OpenFile opened(file, FileLabel{{}, name});
      stamp = {opened.size(), opened.mtime_ns()};
    }
    double seconds = -1;
    if (std::optional<VideoIndex> kept = video_sidecar_load(sidecar, stamp, seconds)) {
      check_video_seconds(seconds, options.max_seconds, name);
      return std::move(*kept);
    }
  }
  AvInput in = AvInput::open_file(file, name);
  double seconds = -1;
  VideoIndex index = index_video(in, name, options.max_seconds, &seconds);
  if (options.index_files)
    video_sidecar_save(sidecar, {in.file_size(), in.file_mtime_ns()}, seconds, index);
  return index;
}

}  // namespace ferry::detail::video
