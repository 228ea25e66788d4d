// One clip: a seek to a keyframe, then forward-only decoding, one frame at a time, each frame
// that the clip takes scaled to RGB straight into its place in the sample.

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "datasets/video/video_av.hpp"
#include "datasets/video/video_index.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::video {
namespace {

struct SwsHolder {
  SwsContext* ctx = nullptr;
  SwsHolder() = default;
  SwsHolder(const SwsHolder&) = delete;
  SwsHolder& operator=(const SwsHolder&) = delete;
  ~SwsHolder() { sws_freeContext(ctx); }
};

// The decoder of the index's stream, opened.
CodecPtr video_decode_open_codec(const AVStream* st, int threads, const std::string& name) {
  const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
  if (codec == nullptr) {
    throw DataError(name + ": no decoder for its codec (" +
                    std::string(avcodec_get_name(st->codecpar->codec_id)) + ")");
  }
  CodecPtr ctx(avcodec_alloc_context3(codec));
  if (!ctx) throw std::bad_alloc();
  int r = avcodec_parameters_to_context(ctx.get(), st->codecpar);
  if (r < 0) throw DataError(name + ": bad codec parameters: " + av_error_text(r));
  ctx->pkt_timebase = st->time_base;
  ctx->thread_count = threads;
  // HEVC's and MJPEG's decoders conceal damage without marking the frame (decode_error_flags,
  // which H.264's and MPEG-4's set): told to fail on what they find instead.
  if (codec->id == AV_CODEC_ID_HEVC || codec->id == AV_CODEC_ID_MJPEG) {
    ctx->err_recognition |= AV_EF_EXPLODE;
  }
  r = avcodec_open2(ctx.get(), codec, nullptr);
  if (r < 0) throw DataError(name + ": cannot open its decoder: " + av_error_text(r));
  return ctx;
}

// Where a clip's decode stands.
class ClipWriter {
 public:
  ClipWriter(std::span<const std::int64_t> frames, const VideoOptions& o, std::uint8_t* out,
             const std::string& name)
      : frames_(frames), o_(o), out_(out), name_(name) {}

  bool done() const noexcept { return next_ == frames_.size(); }
  // The number of the next frame the clip takes (none: past every number).
  std::int64_t wanted() const noexcept {
    return done() ? std::numeric_limits<std::int64_t>::max() : frames_[next_];
  }
  std::size_t next() const noexcept { return next_; }
  bool started() const noexcept { return seen_; }

  // Takes decoded frame number n. False when the decode started past the clip's first frame
  // (the caller then seeks to an earlier keyframe).
  bool take(const AVFrame* frame, std::int64_t n) {
    if (done() || n < frames_[next_]) {
      seen_ = seen_ || n >= 0;
      return true;
    }
    if (n > frames_[next_]) {
      if (next_ == 0 && !seen_) return false;
      throw DataError(name_ + ": the decode skipped frame " + std::to_string(frames_[next_]) +
                      " (it gave frame " + std::to_string(n) + ")");
    }
    seen_ = true;
    const std::size_t frame_bytes =
        static_cast<std::size_t>(o_.height) * static_cast<std::size_t>(o_.width) * 3;
    std::uint8_t* dst = out_ + next_ * frame_bytes;
    scale(frame, dst);
    ++next_;
    // Frames the clip takes twice (past the end, or uniform over a short video): copies.
    while (!done() && frames_[next_] == n) {
      std::memcpy(out_ + next_ * frame_bytes, dst, frame_bytes);
      ++next_;
    }
    return true;
  }

  // A new attempt, from the clip's first frame.
  void restart() noexcept {
    seen_ = false;
    next_ = 0;
  }

 private:
  void scale(const AVFrame* frame, std::uint8_t* dst) {
    if (frame->width <= 0 || frame->height <= 0 || frame->format < 0)
      throw DataError(name_ + ": frame " + std::to_string(frames_[next_]) + " has no picture");
    sws_.ctx = sws_getCachedContext(sws_.ctx, frame->width, frame->height,
                                    static_cast<AVPixelFormat>(frame->format), o_.width, o_.height,
                                    AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
    if (sws_.ctx == nullptr) {
      throw DataError(
          name_ + ": cannot convert frame " + std::to_string(frames_[next_]) + " (pixel format " +
          std::string(av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format))
                          ? av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame->format))
                          : "unknown") +
          ")");
    }
    // Scaled into a padded buffer (libswscale's vector code may write past a row's end), then
    // the rows copied into the sample.
    const int row = o_.width * 3;
    const int stride = (row + 63) / 64 * 64 + 64;
    const auto rows = static_cast<std::size_t>(o_.height);
    const auto row_bytes = static_cast<std::size_t>(row);
    const auto stride_bytes = static_cast<std::size_t>(stride);
    buffer_.resize(stride_bytes * (rows + 1));
    std::uint8_t* planes[4] = {buffer_.data(), nullptr, nullptr, nullptr};
    int strides[4] = {stride, 0, 0, 0};
    const int h =
        sws_scale(sws_.ctx, frame->data, frame->linesize, 0, frame->height, planes, strides);
    if (h != o_.height)
      throw DataError(name_ + ": cannot scale frame " + std::to_string(frames_[next_]));
    for (std::size_t y = 0; y < rows; ++y)
      std::memcpy(dst + y * row_bytes, buffer_.data() + y * stride_bytes, row_bytes);
  }

  std::span<const std::int64_t> frames_;
  const VideoOptions& o_;
  std::uint8_t* out_;
  const std::string& name_;
  std::size_t next_ = 0;
  bool seen_ = false;  // a frame of this attempt was decoded
  SwsHolder sws_;
  std::vector<std::uint8_t> buffer_;
};

// The timestamp of a decoded frame.
std::int64_t video_decode_ts(const AVFrame* f) {
  return f->pts != AV_NOPTS_VALUE ? f->pts : f->best_effort_timestamp;
}

enum class Attempt { done, started_late, ended, lost };

// How decoded frames get their numbers in one attempt.
class FrameNumbers {
 public:
  // `first`: the number of the first frame the attempt decodes where frames are counted (the
  // keyframe it seeks to, or 0 from the start); `first_dts`: that keyframe's dts, which the first
  // frame must show (AV_NOPTS_VALUE: from the start, where it must be a keyframe).
  FrameNumbers(const VideoIndex& index, std::int64_t first, std::int64_t first_dts)
      : index_(index), next_(first), first_dts_(first_dts) {}

  // The number of `f`; -1: none (before the index's first frame); -2: it cannot be known here
  // (the attempt must start from the first frame instead).
  std::int64_t of(const AVFrame* f) {
    if (index_.counted) {
      // After a seek, a B-frame means reordering: the count cannot be trusted.
      if (first_dts_ != AV_NOPTS_VALUE && f->pict_type == AV_PICTURE_TYPE_B) return -2;
      if (!started_) {
        // From the start, the frames the decoder gives before the first keyframe (a stream cut
        // from the middle) are not counted, as the index counts none before it.
        if (first_dts_ == AV_NOPTS_VALUE && f->key_frame == 0) return -1;
        started_ = true;
        if (first_dts_ != AV_NOPTS_VALUE && f->pkt_dts != first_dts_) return -2;
      }
      return next_++;
    }
    // By timestamp; frames that share one follow one another in decoding order.
    const std::int64_t ts = video_decode_ts(f);
    if (ts == AV_NOPTS_VALUE) return -1;  // a leading frame the index does not count
    std::int64_t n = index_.frame_of(ts);
    if (n >= 0 && ts == last_ts_ && last_n_ >= n && last_n_ + 1 < std::ssize(index_.pts) &&
        index_.pts[static_cast<std::size_t>(last_n_ + 1)] == ts) {
      n = last_n_ + 1;
    }
    last_ts_ = ts;
    last_n_ = n;
    return n;
  }

 private:
  const VideoIndex& index_;
  std::int64_t next_;
  std::int64_t first_dts_;
  bool started_ = false;
  std::int64_t last_ts_ = AV_NOPTS_VALUE;
  std::int64_t last_n_ = -1;
};

// Reads, decodes and hands frames to `w` until the clip is done, the decode started past its
// first frame, the frames' numbers are lost, or the stream ended. Where `wanted` (sorted
// timestamps) is not empty, the pictures of packets whose timestamp is not in it that no other
// picture refers to are not decoded.
Attempt video_decode_run(AVFormatContext* fmt, AVCodecContext* ctx, const VideoIndex& index,
                         FrameNumbers numbers, std::int64_t first, ClipWriter& w,
                         std::int64_t max_packets, std::span<const std::int64_t> wanted,
                         const std::string& name) {
  std::int64_t sent = 0;
  bool key_checked = false;  // the first frame numbered from `first` on was looked at
  const PacketPtr pkt = make_packet();
  const FramePtr frame = make_frame();
  bool draining = false;
  for (;;) {
    // Every frame the decoder has ready, before it is given more.
    for (;;) {
      const int r = avcodec_receive_frame(ctx, frame.get());
      if (r == AVERROR(EAGAIN)) break;
      if (r == AVERROR_EOF) return w.done() ? Attempt::done : Attempt::ended;
      if (r < 0) {
        throw DataError(name + ": cannot decode near frame " +
                        std::to_string(w.done() ? 0 : w.next()) +
                        " of the clip: " + av_error_text(r));
      }
      const std::int64_t n = numbers.of(frame.get());
      if (n == -2) {
        av_frame_unref(frame.get());
        return Attempt::lost;
      }
      // A frame the decoder found damaged (its errors concealed), from the attempt's keyframe
      // on: a clip decoded from it would show or build on the damage. Leading frames of an open
      // GOP, which refer to frames before the keyframe, are numbered below it.
      if (n >= first && frame->decode_error_flags != 0) {
        av_frame_unref(frame.get());
        throw DataError(name + ": corrupt data at frame " + std::to_string(n) +
                        ": the decoder found errors in it and concealed them");
      }
      // After a seek, the keyframe sought to must decode as an intra picture: a container may
      // mark recovery points that are not (x264's intra refresh: P-frames refreshed a column at
      // a time), and the frames decoded from one lack their references. The clip is then
      // decoded from the start; so is one whose frame the decoder marks corrupt.
      // (The first frame numbered from the keyframe on must be the keyframe itself: a decoder
      // that holds back the pictures it cannot recover shows a later one first.)
      const bool key_bad = !key_checked && n >= first &&
                           (n != first || (frame->pict_type != AV_PICTURE_TYPE_I &&
                                           frame->pict_type != AV_PICTURE_TYPE_SI));
      key_checked = key_checked || n >= first;
      if (first > 0 &&
          (key_bad || (n >= w.wanted() && (frame->flags & AV_FRAME_FLAG_CORRUPT) != 0))) {
        av_frame_unref(frame.get());
        return Attempt::lost;
      }
      const bool ok = w.take(frame.get(), n);
      av_frame_unref(frame.get());
      if (!ok) return Attempt::started_late;
      if (w.done()) return Attempt::done;
    }
    if (draining) return Attempt::ended;
    if (sent == max_packets) {  // past the clip's packets: drain what the decoder holds
      draining = true;
      const int r = avcodec_send_packet(ctx, nullptr);
      if (r < 0 && r != AVERROR_EOF)
        throw DataError(name + ": cannot finish the decode: " + av_error_text(r));
      continue;
    }
    int r = av_read_frame(fmt, pkt.get());
    if (r == AVERROR_EOF) {
      draining = true;
      r = avcodec_send_packet(ctx, nullptr);
      if (r < 0 && r != AVERROR_EOF)
        throw DataError(name + ": cannot finish the decode: " + av_error_text(r));
      continue;
    }
    if (r < 0) throw DataError(name + ": cannot read a packet: " + av_error_text(r));
    // A packet flagged discard (before an edit list's start) is decoded all the same: later
    // frames may refer to it; the decoder drops its picture, and the index has no number for it.
    // An empty packet (an AVI's dropped frame) is no frame, and would end the decode.
    if (pkt->stream_index != index.stream || pkt->size <= 0) {
      av_packet_unref(pkt.get());
      continue;
    }
    const std::int64_t ts = pkt->pts != AV_NOPTS_VALUE ? pkt->pts : pkt->dts;
    ++sent;
    ctx->skip_frame = !wanted.empty() && pkt->pts != AV_NOPTS_VALUE &&
                              !std::binary_search(wanted.begin(), wanted.end(), pkt->pts)
                          ? AVDISCARD_NONREF
                          : AVDISCARD_DEFAULT;
    r = avcodec_send_packet(ctx, pkt.get());
    av_packet_unref(pkt.get());
    if (r < 0 && r != AVERROR(EAGAIN)) {
      throw DataError(name + ": corrupt data at frame " + std::to_string(index.frame_of(ts)) +
                      ": " + av_error_text(r));
    }
  }
}

}  // namespace

std::int64_t count_decoded_frames(AvInput& in, int stream, const std::string& name) {
  in.reopen(name);
  AVFormatContext* fmt = in.get();
  if (stream < 0 || stream >= static_cast<int>(fmt->nb_streams))
    throw DataError(name + ": its video stream changed while it was indexed");
  for (unsigned s = 0; s < fmt->nb_streams; ++s) {
    if (static_cast<int>(s) != stream) fmt->streams[s]->discard = AVDISCARD_ALL;
  }
  const CodecPtr ctx = video_decode_open_codec(fmt->streams[stream], 1, name);
  const PacketPtr pkt = make_packet();
  const FramePtr frame = make_frame();
  std::int64_t count = 0;
  bool started = false;
  bool draining = false;
  for (;;) {
    for (;;) {
      const int r = avcodec_receive_frame(ctx.get(), frame.get());
      if (r == AVERROR(EAGAIN)) break;
      if (r == AVERROR_EOF) return count;
      if (r < 0) {
        throw DataError(name + ": cannot decode near frame " + std::to_string(count) + ": " +
                        av_error_text(r));
      }
      started = started || frame->key_frame != 0;
      count += started ? 1 : 0;
      av_frame_unref(frame.get());
    }
    if (draining) return count;
    int r = av_read_frame(fmt, pkt.get());
    if (r == AVERROR_EOF) {
      draining = true;
      r = avcodec_send_packet(ctx.get(), nullptr);
      if (r < 0 && r != AVERROR_EOF)
        throw DataError(name + ": cannot finish the decode: " + av_error_text(r));
      continue;
    }
    if (r < 0) throw DataError(name + ": cannot read a packet: " + av_error_text(r));
    if (pkt->stream_index != stream || pkt->size <= 0) {
      av_packet_unref(pkt.get());
      continue;
    }
    r = avcodec_send_packet(ctx.get(), pkt.get());
    av_packet_unref(pkt.get());
    if (r < 0 && r != AVERROR(EAGAIN)) {
      throw DataError(name + ": corrupt data at frame " + std::to_string(count) + ": " +
                      av_error_text(r));
    }
  }
}

void decode_clip(AvInput& in, const VideoIndex& index, std::span<const std::int64_t> frames,
                 const VideoOptions& options, std::uint8_t* out, const std::string& name) {
  auto stream_of = [&](AVFormatContext* fmt) {
    if (index.stream < 0 || index.stream >= static_cast<int>(fmt->nb_streams) ||
        fmt->streams[index.stream]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
      throw DataError(name + ": its video stream changed since it was indexed");
    }
    for (unsigned s = 0; s < fmt->nb_streams; ++s) {
      if (static_cast<int>(s) != index.stream) fmt->streams[s]->discard = AVDISCARD_ALL;
    }
    return fmt->streams[index.stream];
  };
  const CodecPtr ctx = video_decode_open_codec(stream_of(in.get()), options.decode_threads, name);
  ClipWriter writer(frames, options, out, name);
  // Frames the clip does not take that no other frame refers to (most B-frames: before the
  // clip, between its frames under a stride, after its last) need no decode: H.264's and HEVC's
  // decoders drop exactly those (nal_ref_idc 0, sub-layer non-reference pictures) under
  // AVDISCARD_NONREF. Only where frames are numbered by timestamp: a count would miss them.
  const AVCodecID codec = ctx->codec_id;
  std::vector<std::int64_t> wanted;
  if (!index.counted && (codec == AV_CODEC_ID_H264 || codec == AV_CODEC_ID_HEVC)) {
    for (const std::int64_t f : frames) {
      if (f >= 0 && static_cast<std::size_t>(f) < index.pts.size())
        wanted.push_back(index.pts[static_cast<std::size_t>(f)]);
    }
    std::sort(wanted.begin(), wanted.end());
  }

  // The keyframe at or before the first frame; -1: none (decode from the start).
  auto key = static_cast<std::ptrdiff_t>(
                 std::upper_bound(index.keyframes.begin(), index.keyframes.end(), frames[0]) -
                 index.keyframes.begin()) -
             1;
  // The decode is bounded by the packets from its keyframe to the clip's last frame, with room
  // for reordering, frame threads, and packets an edit list discards: a damaged video ends in
  // a DataError, never in a read through the rest of a long file.
  const std::int64_t slack = 300 + 2 * std::int64_t{options.decode_threads};
  bool fresh = true;  // nothing read yet: the container stands at its start
  for (int attempt = 0;; ++attempt) {
    const bool from_start = key <= 0 || attempt >= 3;
    if (from_start && !fresh) {
      in.reopen(name);
      stream_of(in.get());
      avcodec_flush_buffers(ctx.get());
    } else if (!from_start) {
      const auto k = static_cast<std::size_t>(key);
      const int r = av_seek_frame(in.get(), index.stream, index.seek_ts[k], AVSEEK_FLAG_BACKWARD);
      if (r < 0) {
        throw DataError(name + ": cannot seek to frame " + std::to_string(index.keyframes[k]) +
                        ": " + av_error_text(r));
      }
      avcodec_flush_buffers(ctx.get());
    }
    fresh = false;
    writer.restart();
    const std::int64_t first = from_start ? 0 : index.keyframes[static_cast<std::size_t>(key)];
    const std::int64_t max_packets =
        frames.back() - first + 1 + slack + (from_start ? index.discarded : 0);
    const std::int64_t first_dts =
        from_start ? AV_NOPTS_VALUE : index.pts[static_cast<std::size_t>(first)];
    switch (video_decode_run(in.get(), ctx.get(), index, FrameNumbers(index, first, first_dts),
                             first, writer, max_packets, wanted, name)) {
      case Attempt::done:
        return;
      case Attempt::lost:
        // Counted frames whose first is not the one expected, or that meet a B-frame after a
        // seek: numbered from the start instead, never shifted.
        if (from_start) {
          throw DataError(name +
                          ": cannot number its frames: the decode from the start does not "
                          "begin with a keyframe");
        }
        key = 0;
        continue;
      case Attempt::started_late:
        if (from_start) {
          throw DataError(name + ": the decode from the first keyframe starts past frame " +
                          std::to_string(frames[0]));
        }
        --key;
        continue;
      case Attempt::ended:
        // Nothing at all after the seek: the keyframe before may do better.
        if (!writer.started() && !from_start) {
          --key;
          continue;
        }
        throw DataError(name + ": the decode stopped giving frames before frame " +
                        std::to_string(frames[writer.next()]) + " (the index has " +
                        std::to_string(index.pts.size()) + ")");
    }
  }
}

}  // namespace ferry::detail::video
