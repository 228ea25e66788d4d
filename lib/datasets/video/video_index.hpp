#pragma once

// A video's index, made from its container's packets without decoding (but AVI with B-frames):
// frame k is the one whose presentation timestamp is the k-th smallest (so B-frames' reordering and
// variable frame rates count right), and the keyframes with the timestamp a seek to each one asks
// for.

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "ferry/video.hpp"

namespace ferry::detail {

struct VideoIndex {
  int stream = -1;                      // the video stream's index in the container
  std::vector<std::int64_t> pts;        // sorted: frame k's timestamp (the stream's time base)
  std::vector<std::int64_t> keyframes;  // frame numbers of the keyframes a seek may start at
  std::vector<std::int64_t> seek_ts;    // per keyframe: its pts (counted: min(pts, dts))
  std::int64_t discarded = 0;  // packets read and decoded that are no frames (before an edit
                               // list's start, before the first keyframe, or leading it)
  /// The container stores no presentation timestamps (AVI): frame k is the k-th frame the decoder
  /// gives, and pts holds each frame's packet's dts in decoding order. A seek is kept only where
  /// decoding order is presentation order (an intra-only codec, or one that reorders no frames:
  /// a decode after a seek that meets a B-frame starts again from the first frame).
  bool counted = false;
  /// Frame number of timestamp `ts` (the first of the frames that share it); -1 when no frame
  /// has it.
  std::int64_t frame_of(std::int64_t ts) const noexcept;
};

namespace video {

class AvInput;

/// Indexes the opened container `in`. \throws DataError `name` + ": <why>" for no video stream,
/// a duration (by the header: the stream's or the file's, the longer) over `max_seconds`, a
/// packet without timestamps (but leading ones of a cut stream, which are no frames), a corrupt
/// or truncated packet (naming its frame), a keyframe the container's own index lists that no
/// packet holds (a damaged region the demuxer skipped), timestamps that go backwards (an edit
/// list that repeats or reorders its media), a read error, a packet the decoder refuses where it
/// counts frames by decoding (AVI with B-frames), or no frames.
/// `seconds`, when given, receives the duration the header claims (negative: none).
VideoIndex index_video(AvInput& in, const std::string& name, double max_seconds,
                       double* seconds = nullptr);

/// DataError `name` + ": its header claims ..." when seconds > max_seconds.
void check_video_seconds(double seconds, double max_seconds, const std::string& name);

/// The index of `file`: from its sidecar "<file>.ferryidx" while that matches the file's size and
/// modification time (options.index_files), else index_video() of the file, then kept in the
/// sidecar where the folder can be written (silently not otherwise). \throws as index_video().
VideoIndex load_video_index(const std::filesystem::path& file, const std::string& name,
                            const VideoOptions& options);

/// The frames a clip of a video of `n` frames takes (options.frames of them, non-decreasing,
/// clamped to n - 1), with the sample's `seed` for ClipStart::random. \pre n >= 1.
std::vector<std::int64_t> clip_frame_numbers(std::int64_t n, const VideoOptions& options,
                                             std::uint64_t seed);

/// Decodes the frames `frames` (non-decreasing frame numbers of `index`) of the opened container
/// `in` (fresh: nothing read from it yet) into `out`, u8 [T, height, width, 3] RGB. One seek to
/// the keyframe at or before frames[0] (the keyframe before when the decode starts past it),
/// then forward-only decoding that stops after the last frame. \throws DataError `name` +
/// ": <why>", naming the frame where there is one.
void decode_clip(AvInput& in, const VideoIndex& index, std::span<const std::int64_t> frames,
                 const VideoOptions& options, std::uint8_t* out, const std::string& name);

/// The frames a decode of stream `stream` of `in` (reopened from its start) gives from the first
/// keyframe it gives on, as decode_clip() numbers counted frames. \throws DataError `name` +
/// ": <why>" for a packet the decoder refuses or a read error.
std::int64_t count_decoded_frames(AvInput& in, int stream, const std::string& name);

/// ConfigError `who` + ": VideoOptions::<member> ..." for options out of range.
void check_video_options(const VideoOptions& options, const char* who);

}  // namespace video
}  // namespace ferry::detail
