#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"

namespace ferry {

namespace detail {
struct VideoIndex;
}

/// Where a clip starts in its video (see VideoOptions::start).
enum class ClipStart { random, start, center, uniform };

/// How VideoFolder (and WebDataset's video members) cut clips out of videos.
struct VideoOptions {
  /// T: frames a clip. At least 1.
  int frames = 16;
  /// Every stride-th frame of the video, in presentation order. At least 1.
  int stride = 1;
  /// Each frame is resized (bilinear, libswscale; the aspect is not kept) to height x width.
  int height = 112, width = 112;
  /// With span = (T - 1) * stride + 1 and N frames in the video:
  /// random: the first frame uniform in [0, max(0, N - span)], drawn from the sample's seed;
  /// start: frame 0; center: floor((N - span) / 2), at least 0;
  /// uniform: frame round(k (N - 1) / (T - 1)) for k = 0..T-1, halves rounded up (T = 1: the
  /// middle frame, floor((N - 1) / 2); stride unused). All by frame count, not by time.
  /// Frames past the video's end repeat its last frame.
  ClipStart start = ClipStart::random;
  /// Samples = videos x clips_per_video; sample i is a clip of video i / clips_per_video (each
  /// sample with its own seed, so random clips differ; the other modes give the same clip).
  int clips_per_video = 1;
  /// A video whose header claims a longer duration is a DataError naming it (raised for its
  /// samples), before its packets are read.
  double max_seconds = 4 * 3600;
  /// FFmpeg's threads inside one decode (0: FFmpeg's choice); the loader's workers already
  /// decode videos side by side.
  int decode_threads = 1;
  /// Keep each video's index beside it, as "<video>.ferryidx" (the video's size and
  /// modification time, its frames' timestamps and keyframes), and reuse it while the video is
  /// unchanged; where the folder cannot be written the index stays in memory, silently.
  /// false: always index at open, write nothing.
  bool index_files = true;
};

/// The field a clip takes under `options`: `name` u8 [frames, height, width, 3].
/// \throws ConfigError naming the member for bad options (as VideoFolder::open()).
FERRY_API FieldSpec video_field(const VideoOptions& options, std::string name = "video");

/// Decodes one clip of the video held in `bytes` (any container FFmpeg reads, read from memory
/// through a custom AVIOContext: no temporary file) into `out` (video_field(options)'s bytes),
/// exactly as VideoFolder decodes a file: the video indexed (its packets, no decode), the clip's
/// frames chosen by options.start with `seed`, then one seek and forward-only decoding.
/// WebDataset's video members decode through it. Any thread may call it.
/// \throws DataError `name` + ": <why>" for a bad video (as VideoFolder::read()); ConfigError
/// for bad options or an `out` of another size.
FERRY_API void decode_video(std::span<const std::byte> bytes, const VideoOptions& options,
                            std::uint64_t seed, std::span<std::uint8_t> out,
                            const std::string& name);

/// Videos in class folders: root/<class>/<file>, classes sorted by name, files with extensions
/// .mp4, .mkv, .webm, .avi or .mov in any case (others are ignored). Decoded by FFmpeg's
/// libavformat and libavcodec, scaled to RGB by libswscale.
///
/// Fields: "video" u8 [T, H, W, 3] (RGB) and "label" i64 [] (the class's position in classes()).
/// Frames are exact: frame k is the k-th frame in presentation order (by timestamps, so variable
/// frame rates and B-frames are right; in AVI, which stores none, the decoder's k-th frame), the
/// same frames a decode from the first frame would give. A stream that begins mid-way (a stream
/// copy cut from the middle): frame 0 is its first keyframe; the frames before it, and the leading
/// frames shown before it or at its time (an open GOP's B-frames, whose references were cut away),
/// which cannot be decoded, are not counted, in the index as in every clip's decode.
///
/// Each video is indexed at open from its container's packets, without decoding: the sorted
/// presentation timestamps (frame k has the k-th), and which frames are keyframes. An edit list
/// that shows its media out of order is a DataError. In AVI with a codec that reorders frames
/// (B-frames), where no packet tells which frames lead the first keyframe, the index decodes the
/// video once to count its frames (each clip of such a video decodes from its start anyway).
/// Damage the index detects makes the video a DataError: a corrupt packet, a header whose frame
/// count or duration the packets fall short of (a truncated file), and a keyframe the container's
/// own index (Matroska's cues, MP4's sample tables, AVI's idx1) lists but no packet holds (the
/// demuxer skipped a damaged region). Damage inside a packet is seen only by the decoder: a clip
/// whose decode meets a packet the decoder refuses, or a frame missing from the decode, is a
/// DataError naming the file and frame, raised for the samples whose clips touch it. A clip is one
/// seek to the keyframe at or before its first frame, then forward-only decoding, one frame at
/// a time, that stops after its last frame (should the seek land past the first frame, the
/// keyframe before is tried). A bad video (corrupt, truncated, no video stream, no frames,
/// longer than max_seconds, a decode that stops giving frames) raises DataError naming the file
/// (and the frame where there is one) for that video's samples, never from open().
class FERRY_API VideoFolder final : public Dataset {
 public:
  /// Lists the folder and indexes every video (in parallel). \throws DataError when root is
  /// missing, not a folder, or holds no videos; ConfigError naming the member for bad options.
  static std::shared_ptr<VideoFolder> open(const std::filesystem::path& root,
                                           VideoOptions options = {});
  ~VideoFolder() override;

  std::size_t size() const override { return files_.size() * clips_; }
  std::vector<FieldSpec> fields() const override;
  /// Decodes one clip. \throws DataError naming the file (and frame) for a bad video;
  /// ConfigError for an index >= size(). Any thread may call it.
  void read(std::size_t index, SampleRef out) const override;

  /// Class names, sorted; label i is classes()[i].
  const std::vector<std::string>& classes() const noexcept { return classes_; }
  /// Number of videos (size() / clips_per_video).
  std::size_t videos() const noexcept { return files_.size(); }
  /// Video v's file and label. \throws ConfigError for v >= videos().
  const std::filesystem::path& path(std::size_t video) const;
  std::int64_t label(std::size_t video) const;
  /// Frames of video v, from its index. \throws DataError when the video is bad, ConfigError
  /// for v >= videos().
  std::int64_t frame_count(std::size_t video) const;
  /// The frame numbers sample `index` takes with sample seed `seed` (T of them, in clip order,
  /// past the end clamped to the last frame). \throws as read().
  std::vector<std::int64_t> clip_frames(std::size_t index, std::uint64_t seed) const;
  const VideoOptions& options() const noexcept { return options_; }

 private:
  VideoFolder() = default;
  VideoOptions options_;
  std::size_t clips_ = 1;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
  std::vector<std::shared_ptr<const detail::VideoIndex>> indexes_;
  std::vector<std::string> errors_;  // per video: why it cannot be read; empty when it can
};

}  // namespace ferry
