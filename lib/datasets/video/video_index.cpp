#include "datasets/video/video_index.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <string_view>

#include "datasets/video/video_av.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {

std::int64_t VideoIndex::frame_of(std::int64_t ts) const noexcept {
  const auto it = std::lower_bound(pts.begin(), pts.end(), ts);
  if (it == pts.end() || *it != ts) return -1;
  return it - pts.begin();
}

namespace video {
namespace {

// One video packet as the index sees it.
struct VideoIndexPacket {
  std::int64_t pts;       // the dts in decoding order where the container stores no pts
  std::int64_t seek;      // the timestamp a seek to it asks for: pts (counted: min(pts, dts))
  std::int64_t duration;  // 0: unknown
  std::int64_t order;     // its place among the frames in decoding order
  bool key;
};

// The duration the header claims, in seconds; negative when it says none. The stream's own, or
// the file's when the video is its only stream (for the truncation check), or the longer of the
// two (`longest`, for max_seconds).
double video_index_header_seconds(const AVFormatContext* fmt, const AVStream* st, bool longest) {
  const double stream = st->duration != AV_NOPTS_VALUE && st->duration > 0
                            ? static_cast<double>(st->duration) * av_q2d(st->time_base)
                            : -1;
  // For max_seconds, a file whose timestamps start late (a clip cut from a long recording,
  // keeping its times) is as long as from its start: a header may count from time 0 (an MP4's
  // empty edit). (The truncation check counts from either.)
  const double start = fmt->start_time != AV_NOPTS_VALUE && fmt->start_time > 0
                           ? static_cast<double>(fmt->start_time) / AV_TIME_BASE
                           : 0;
  const double file = fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0
                          ? static_cast<double>(fmt->duration) / AV_TIME_BASE
                          : -1;
  if (longest) return std::max(stream, file > start ? file - start : file);
  if (stream > 0) return stream;
  return fmt->nb_streams == 1 ? file : -1;
}

// A header whose duration the frames fall well short of: the file was cut short (a container
// such as Matroska has no frame count to tell). The frames' end is the last frame's timestamp
// plus its duration (the longest such end), from time 0 or from the first frame
// (a header may count either, when the timestamps start late); a quarter of a second, three
// frames or 1 % of the duration of slack, whichever is most.
void video_index_check_coverage(const AVStream* st, const std::vector<VideoIndexPacket>& packets,
                                double seconds, const std::string& name) {
  if (!(seconds > 0) || packets.size() < 2) return;
  const auto [lo, hi] = std::minmax_element(
      packets.begin(), packets.end(),
      [](const VideoIndexPacket& a, const VideoIndexPacket& b) { return a.pts < b.pts; });
  const auto n = static_cast<double>(packets.size());
  const double tb = av_q2d(st->time_base);
  const double step = static_cast<double>(hi->pts - lo->pts) / (n - 1);
  double end = static_cast<double>(hi->pts) + step;
  for (const VideoIndexPacket& p : packets)
    end = std::max(end, static_cast<double>(p.pts) + static_cast<double>(p.duration));
  const double covered = std::max(end, end - static_cast<double>(lo->pts)) * tb;
  if (seconds - covered > std::max({0.25, 3 * step * tb, 0.01 * seconds})) {
    throw DataError(name + ": truncated: its header claims " + std::to_string(seconds) +
                    " seconds, its frames cover " + std::to_string(covered));
  }
}

// A header frame count over the frames the file holds: the file was cut short. AVI counts its
// dropped (empty) frames, which the demuxer skips but its timestamps step over; a muxer that
// wrote to a pipe leaves a placeholder count (2^30) that says nothing.
void video_index_check_count(const AVStream* st, std::uint64_t stream_packets, bool counted,
                             std::int64_t end_dts, bool dropped, const std::string& name) {
  constexpr std::int64_t kPlaceholder = std::int64_t{1} << 30;
  if (st->nb_frames <= 0 || st->nb_frames >= kPlaceholder) return;
  std::uint64_t held = stream_packets;
  if (counted && end_dts > 0) held = std::max(held, static_cast<std::uint64_t>(end_dts));
  // An AVI that marks dropped frames with empty chunks (ffmpeg's stream copy of a variable
  // frame rate: timestamps that step over frames) may end with one, which the demuxer does not
  // give.
  if (counted &&
      (dropped || (end_dts > 0 && static_cast<std::uint64_t>(end_dts) > stream_packets))) {
    ++held;
  }
  if (static_cast<std::uint64_t>(st->nb_frames) > held) {
    throw DataError(name + ": truncated: its header counts " + std::to_string(st->nb_frames) +
                    " frames, the file holds " + std::to_string(held));
  }
}

// Frames that share a timestamp are numbered in decoding order, which is their order only when
// they follow one another in it (a high frame rate in a millisecond time base); elsewhere (an edit
// list that shows some media twice) no order can be trusted.
void video_index_check_shared(const std::vector<VideoIndexPacket>& sorted,
                              const std::string& name) {
  for (std::size_t k = 1; k < sorted.size(); ++k) {
    if (sorted[k].pts == sorted[k - 1].pts && sorted[k].order != sorted[k - 1].order + 1) {
      throw DataError(name + ": frames " + std::to_string(k - 1) + " and " + std::to_string(k) +
                      " share a timestamp but not a place in decoding order (an edit list that "
                      "repeats its media?): not supported");
    }
  }
}

// A keyframe that the container's own index (Matroska's cues, MP4's sample tables, AVI's idx1)
// lists and that no packet read holds: the demuxer skipped a damaged region (a hole in the frames
// that timestamps alone cannot tell from a variable frame rate). `stamps`: sorted, the pts and
// dts of every packet of the stream read.
void video_index_check_holes(AVStream* st, const std::vector<std::int64_t>& stamps,
                             const std::string& name) {
  const int entries = avformat_index_get_entries_count(st);
  for (int i = 0; i < entries; ++i) {
    const AVIndexEntry* e = avformat_index_get_entry(st, i);
    if (e == nullptr || (e->flags & AVINDEX_KEYFRAME) == 0 ||
        (e->flags & AVINDEX_DISCARD_FRAME) != 0 || e->timestamp == AV_NOPTS_VALUE) {
      continue;
    }
    if (!std::binary_search(stamps.begin(), stamps.end(), e->timestamp)) {
      throw DataError(name + ": damaged: its container's index lists a keyframe at " +
                      std::to_string(static_cast<double>(e->timestamp) * av_q2d(st->time_base)) +
                      " seconds that no packet holds (the demuxer skipped a damaged region)");
    }
  }
}

// splitmix64 of the sample's seed: the clip's only source of randomness.
std::uint64_t video_index_mix(std::uint64_t seed) noexcept {
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

void check_video_seconds(double seconds, double max_seconds, const std::string& name) {
  if (seconds > max_seconds) {
    throw DataError(name + ": its header claims " + std::to_string(seconds) +
                    " seconds, more than max_seconds (" + std::to_string(max_seconds) + ")");
  }
}

VideoIndex index_video(AvInput& in, const std::string& name, double max_seconds,
                       double* seconds_out) {
  AVFormatContext* fmt = in.get();
  int r = avformat_find_stream_info(fmt, nullptr);
  if (r < 0) throw DataError(name + ": cannot read the streams: " + av_error_text(r));
  r = av_find_best_stream(fmt, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (r < 0) throw DataError(name + ": no video stream");
  VideoIndex index;
  index.stream = r;
  const AVStream* st = fmt->streams[r];
  const double claimed = video_index_header_seconds(fmt, st, true);
  check_video_seconds(claimed, max_seconds, name);
  if (seconds_out != nullptr) *seconds_out = claimed;
  for (unsigned s = 0; s < fmt->nb_streams; ++s) {
    if (static_cast<int>(s) != index.stream) fmt->streams[s]->discard = AVDISCARD_ALL;
  }
  // AVI stores no presentation timestamps (FFmpeg's are guesses, wrong for H.264's B-frames):
  // its frames are numbered by the decoder's output.
  index.counted = fmt->iformat != nullptr && std::string_view(fmt->iformat->name) == "avi";
  const bool mp4 =
      fmt->iformat != nullptr && std::string_view(fmt->iformat->name).starts_with("mov,");
  const AVCodecDescriptor* desc = avcodec_descriptor_get(st->codecpar->codec_id);
  // Decoding order is presentation order: an intra-only codec, or one that says it reorders no
  // frames (a decode after a seek checks it: a B-frame sends the clip back to the start).
  const bool in_order = (desc != nullptr && (desc->props & AV_CODEC_PROP_INTRA_ONLY) != 0) ||
                        st->codecpar->video_delay == 0;

  std::vector<VideoIndexPacket> packets;
  std::uint64_t stream_packets = 0;  // the discarded ones too, as the header counts them
  std::int64_t last_dts = AV_NOPTS_VALUE;
  std::int64_t end_dts = 0;
  bool dropped = false;  // an empty packet met
  bool seen_key = false;
  std::int64_t key_ts = AV_NOPTS_VALUE;  // the first keyframe's timestamp
  bool placed = false;                   // a frame after the first keyframe has a timestamp
  std::vector<std::int64_t> stamps;      // every packet's pts and dts
  const PacketPtr pkt = make_packet();
  for (;;) {
    r = av_read_frame(fmt, pkt.get());
    if (r == AVERROR_EOF) break;
    if (r < 0) {
      throw DataError(name + ": cannot read the packet of frame " + std::to_string(packets.size()) +
                      ": " + av_error_text(r));
    }
    const bool ours = pkt->stream_index == index.stream;
    const bool empty = pkt->size <= 0;
    const std::int64_t pts = pkt->pts;
    const std::int64_t dts = pkt->dts;
    const std::int64_t duration = pkt->duration;
    const int flags = pkt->flags;
    av_packet_unref(pkt.get());
    if (!ours) continue;
    ++stream_packets;
    if (pts != AV_NOPTS_VALUE) stamps.push_back(pts);
    if (dts != AV_NOPTS_VALUE && dts != pts) stamps.push_back(dts);
    dropped = dropped || empty;
    if (empty) continue;  // a dropped frame (AVI's, an MP4's empty sample): no picture
    if (dts != AV_NOPTS_VALUE) end_dts = dts + std::max<std::int64_t>(duration, 1);
    if ((flags & AV_PKT_FLAG_CORRUPT) != 0 && (flags & AV_PKT_FLAG_DISCARD) == 0) {
      throw DataError(name + ": corrupt or truncated packet at frame " +
                      std::to_string(packets.size()) + " (in decoding order)");
    }
    const bool key = (flags & AV_PKT_FLAG_KEY) != 0;
    // Before the first keyframe (an edit list's discarded one counts): no frame is decoded.
    seen_key = seen_key || key;
    if (key && key_ts == AV_NOPTS_VALUE)
      key_ts = index.counted || pts == AV_NOPTS_VALUE ? dts : pts;
    if (!seen_key) continue;
    if ((flags & AV_PKT_FLAG_DISCARD) != 0) continue;  // before an edit list's start
    // The frames an MP4's edit list shows, in decoding order: their stored dts never go back (a
    // second edit may start again from an earlier keyframe, with packets flagged discard).
    if (mp4 && dts != AV_NOPTS_VALUE) {
      if (last_dts != AV_NOPTS_VALUE && dts < last_dts) {
        throw DataError(name + ": its timestamps go backwards at frame " +
                        std::to_string(packets.size()) +
                        " (in decoding order; an edit list that repeats or reorders its media?): "
                        "not supported");
      }
      last_dts = dts;
    }
    const std::int64_t ts = index.counted || pts == AV_NOPTS_VALUE ? dts : pts;
    if (!index.counted) {
      // Leading frames of a stream cut from the middle (an open GOP's B-frames, a cut with
      // -copyinkf): shown before the first keyframe, or at its time, they refer to pictures cut
      // away; the decoder drops them or gives garbage. Not frames: frame 0 is the first keyframe.
      // The demuxer may give them no timestamp at all (before any later frame has one).
      if (!key && (ts == AV_NOPTS_VALUE ? !placed : ts <= key_ts)) continue;
      placed = placed || (!key && ts != AV_NOPTS_VALUE);
    }
    if (ts == AV_NOPTS_VALUE) {
      throw DataError(name + ": the packet of frame " + std::to_string(packets.size()) +
                      " (in decoding order) has no timestamp");
    }
    const auto order = static_cast<std::int64_t>(packets.size());
    // A seek asks for the keyframe's presentation time where frames are numbered by it: an MP4's
    // demuxer searches its decoding times less the stream's first composition offset, so its dts
    // (earlier by the B-frames' delay) lands on the keyframe before, a whole GOP early. Counted
    // frames have no other time than the dts.
    const std::int64_t seek = !index.counted || dts == AV_NOPTS_VALUE ? ts : std::min(ts, dts);
    packets.push_back({ts, seek, duration, order, key});
  }
  if (packets.empty()) throw DataError(name + ": no video frames");
  index.discarded = static_cast<std::int64_t>(stream_packets - packets.size());
  std::sort(stamps.begin(), stamps.end());
  // A seek makes Matroska's demuxer read the cues it defers (stored after the clusters); where
  // it fails, the index has what it has.
  static_cast<void>(
      av_seek_frame(fmt, index.stream, stamps.empty() ? 0 : stamps.front(), AVSEEK_FLAG_BACKWARD));
  video_index_check_holes(fmt->streams[index.stream], stamps, name);
  const int entries = avformat_index_get_entries_count(st);
  if (mp4 && entries > 0) {
    // An MP4's packets are its index's entries, which an edit list that cuts media (shows 0.4 s
    // from 0 s, then 0.4 s from 1 s) makes fewer than the frames its header counts.
    if (stream_packets < static_cast<std::uint64_t>(entries)) {
      throw DataError(name + ": truncated: its sample tables list " + std::to_string(entries) +
                      " frames, the file holds " + std::to_string(stream_packets));
    }
  } else {
    video_index_check_count(st, stream_packets, index.counted, end_dts, dropped, name);
  }
  // A container with a frame count (MP4, AVI) is judged by it; the header's duration may hold a
  // last frame for long, or be a guess from the bit rate.
  if (st->nb_frames <= 0 && !index.counted)
    video_index_check_coverage(st, packets, video_index_header_seconds(fmt, st, false), name);
  if (!index.counted) {
    std::stable_sort(
        packets.begin(), packets.end(),
        [](const VideoIndexPacket& a, const VideoIndexPacket& b) { return a.pts < b.pts; });
    video_index_check_shared(packets, name);
  }
  if (index.counted && !in_order) {
    // Counted frames of a codec that reorders them: the decoder gives the frames of the packets
    // after the first keyframe, less the leading ones shown before it (a stream cut from the
    // middle), which no packet tells. Counted by decoding, as every clip of such a video decodes
    // from the start anyway; a packet the decoder refuses is a DataError here.
    const std::int64_t n = count_decoded_frames(in, index.stream, name);
    if (n < 1) throw DataError(name + ": no video frames");
    if (n < std::ssize(packets)) packets.resize(static_cast<std::size_t>(n));
    for (std::int64_t k = std::ssize(packets); k < n; ++k)
      packets.push_back({packets.back().pts + 1, packets.back().seek + 1, 0, k, false});
  }
  index.pts.reserve(packets.size());
  for (std::size_t k = 0; k < packets.size(); ++k) {
    index.pts.push_back(packets[k].pts);
    if (!packets[k].key) continue;
    // A seek is trusted where the frame it lands on is known: in counted frames, only where
    // decoding order is presentation order (in_order); by timestamps, only where no other frame
    // shares the keyframe's (a seek lands on one of them, which cannot be told apart).
    const bool shared = (k > 0 && packets[k - 1].pts == packets[k].pts) ||
                        (k + 1 < packets.size() && packets[k + 1].pts == packets[k].pts);
    if (k > 0 && ((index.counted && !in_order) || shared)) continue;
    index.keyframes.push_back(static_cast<std::int64_t>(k));
    index.seek_ts.push_back(packets[k].seek);
  }
  return index;
}

std::vector<std::int64_t> clip_frame_numbers(std::int64_t n, const VideoOptions& options,
                                             std::uint64_t seed) {
  const std::int64_t t_count = options.frames;
  std::vector<std::int64_t> frames(static_cast<std::size_t>(t_count));
  if (options.start == ClipStart::uniform) {
    if (t_count == 1) {
      frames[0] = (n - 1) / 2;
      return frames;
    }
    // round(k (n - 1) / (T - 1)), halves up, in integers.
    for (std::int64_t k = 0; k < t_count; ++k) {
      frames[static_cast<std::size_t>(k)] = (2 * k * (n - 1) + (t_count - 1)) / (2 * (t_count - 1));
    }
    return frames;
  }
  const std::int64_t stride = options.stride;
  const std::int64_t span = (t_count - 1) * stride + 1;
  const std::int64_t room = std::max<std::int64_t>(0, n - span);
  std::int64_t first = 0;
  switch (options.start) {
    case ClipStart::random:
      first =
          static_cast<std::int64_t>(video_index_mix(seed) % (static_cast<std::uint64_t>(room) + 1));
      break;
    case ClipStart::center:
      first = room / 2;
      break;
    default:
      break;
  }
  for (std::int64_t k = 0; k < t_count; ++k)
    frames[static_cast<std::size_t>(k)] = std::min(first + k * stride, n - 1);
  return frames;
}

void check_video_options(const VideoOptions& o, const char* who) {
  const std::string w = std::string(who) + ": VideoOptions::";
  constexpr int kMaxSide = 16384;
  if (o.frames < 1 || o.frames > 65536)
    throw ConfigError(w + "frames must be in [1, 65536], not " + std::to_string(o.frames));
  if (o.stride < 1) throw ConfigError(w + "stride must be >= 1, not " + std::to_string(o.stride));
  if (o.height < 1 || o.height > kMaxSide || o.width < 1 || o.width > kMaxSide) {
    throw ConfigError(w + "height and width must be in [1, " + std::to_string(kMaxSide) +
                      "], not " + std::to_string(o.height) + " x " + std::to_string(o.width));
  }
  if (o.clips_per_video < 1) {
    throw ConfigError(w + "clips_per_video must be >= 1, not " + std::to_string(o.clips_per_video));
  }
  if (!(o.max_seconds > 0) || !std::isfinite(o.max_seconds))
    throw ConfigError(w + "max_seconds must be a positive number");
  if (o.decode_threads < 0 || o.decode_threads > 256) {
    throw ConfigError(w + "decode_threads must be in [0, 256], not " +
                      std::to_string(o.decode_threads));
  }
  switch (o.start) {
    case ClipStart::random:
    case ClipStart::start:
    case ClipStart::center:
    case ClipStart::uniform:
      break;
    default:
      throw ConfigError(w + "start is not a ClipStart");
  }
}

}  // namespace video
}  // namespace ferry::detail
