#include "datasets/video/video_index.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

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
  std::int64_t pts;
  std::int64_t seek;  // min(pts, dts)
  bool key;
};

// The duration the header claims, in seconds; negative when it says none.
double video_index_header_seconds(const AVFormatContext* fmt, const AVStream* st) {
  if (st->duration != AV_NOPTS_VALUE && st->duration > 0)
    return static_cast<double>(st->duration) * av_q2d(st->time_base);
  if (fmt->duration != AV_NOPTS_VALUE && fmt->duration > 0)
    return static_cast<double>(fmt->duration) / AV_TIME_BASE;
  return -1;
}

// A header whose duration the frames fall well short of: the file was cut short (a container
// such as Matroska has no frame count to tell). Judged by the stream's own duration, or the
// file's when the video is its only stream; a second, or 5 % of the duration, of slack.
void video_index_check_coverage(const AVFormatContext* fmt, const AVStream* st,
                                const std::vector<VideoIndexPacket>& packets, double seconds,
                                const std::string& name) {
  if (!(seconds > 0) || packets.size() < 2) return;
  if (!(st->duration != AV_NOPTS_VALUE && st->duration > 0) && fmt->nb_streams != 1) return;
  const auto [lo, hi] = std::minmax_element(
      packets.begin(), packets.end(),
      [](const VideoIndexPacket& a, const VideoIndexPacket& b) { return a.pts < b.pts; });
  const auto n = static_cast<double>(packets.size());
  const double covered =
      static_cast<double>(hi->pts - lo->pts) * av_q2d(st->time_base) * n / (n - 1);
  if (seconds - covered > std::max(1.0, 0.05 * seconds)) {
    throw DataError(name + ": truncated: its header claims " + std::to_string(seconds) +
                    " seconds, its frames cover " + std::to_string(covered));
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
  const double seconds = video_index_header_seconds(fmt, st);
  check_video_seconds(seconds, max_seconds, name);
  if (seconds_out != nullptr) *seconds_out = seconds;
  for (unsigned s = 0; s < fmt->nb_streams; ++s) {
    if (static_cast<int>(s) != index.stream) fmt->streams[s]->discard = AVDISCARD_ALL;
  }

  std::vector<VideoIndexPacket> packets;
  std::uint64_t stream_packets = 0;  // the discarded ones too, as the header counts them
  const PacketPtr pkt = make_packet();
  for (;;) {
    r = av_read_frame(fmt, pkt.get());
    if (r == AVERROR_EOF) break;
    if (r < 0) {
      throw DataError(name + ": cannot read the packet of frame " + std::to_string(packets.size()) +
                      ": " + av_error_text(r));
    }
    const bool ours = pkt->stream_index == index.stream;
    const std::int64_t pts = pkt->pts;
    const std::int64_t dts = pkt->dts;
    const int flags = pkt->flags;
    av_packet_unref(pkt.get());
    if (!ours) continue;
    ++stream_packets;
    if ((flags & AV_PKT_FLAG_DISCARD) != 0) continue;  // before an edit list's start
    if ((flags & AV_PKT_FLAG_CORRUPT) != 0) {
      throw DataError(name + ": corrupt or truncated packet at frame " +
                      std::to_string(packets.size()) + " (in decoding order)");
    }
    const std::int64_t ts = pts != AV_NOPTS_VALUE ? pts : dts;
    if (ts == AV_NOPTS_VALUE) {
      throw DataError(name + ": the packet of frame " + std::to_string(packets.size()) +
                      " (in decoding order) has no timestamp");
    }
    packets.push_back(
        {ts, dts != AV_NOPTS_VALUE ? std::min(ts, dts) : ts, (flags & AV_PKT_FLAG_KEY) != 0});
  }
  if (packets.empty()) throw DataError(name + ": no video frames");
  index.discarded = static_cast<std::int64_t>(stream_packets - packets.size());
  // A header that counts more frames than the file holds: the file was cut short.
  if (st->nb_frames > 0 && static_cast<std::uint64_t>(st->nb_frames) > stream_packets) {
    throw DataError(name + ": truncated: its header counts " + std::to_string(st->nb_frames) +
                    " frames, the file holds " + std::to_string(stream_packets));
  }
  video_index_check_coverage(fmt, st, packets, seconds, name);
  std::stable_sort(
      packets.begin(), packets.end(),
      [](const VideoIndexPacket& a, const VideoIndexPacket& b) { return a.pts < b.pts; });
  index.pts.reserve(packets.size());
  for (std::size_t k = 0; k < packets.size(); ++k) {
    index.pts.push_back(packets[k].pts);
    if (packets[k].key) {
      index.keyframes.push_back(static_cast<std::int64_t>(k));
      index.seek_ts.push_back(packets[k].seek);
    }
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
