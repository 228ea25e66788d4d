#pragma once

// FFmpeg's objects held by RAII handles, and one opened container (a file, or bytes in memory
// read through a custom AVIOContext). Only lib/datasets/video/ includes FFmpeg's headers.

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>

namespace ferry::detail::video {

/// FFmpeg's text for an error code.
std::string av_error_text(int code);

struct PacketFree {
  void operator()(AVPacket* p) const noexcept { av_packet_free(&p); }
};
struct FrameFree {
  void operator()(AVFrame* f) const noexcept { av_frame_free(&f); }
};
struct CodecFree {
  void operator()(AVCodecContext* c) const noexcept { avcodec_free_context(&c); }
};
struct SwsFree {
  void operator()(SwsContext* s) const noexcept { sws_freeContext(s); }
};
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using CodecPtr = std::unique_ptr<AVCodecContext, CodecFree>;

/// A packet and a frame; \throws std::bad_alloc when FFmpeg cannot allocate them.
PacketPtr make_packet();
FramePtr make_frame();

/// Lowers FFmpeg's logging to fatal messages once, unless the program chose a level of its own
/// (a bad video is reported by ferry's DataError, not by FFmpeg's lines on stderr).
void quiet_ffmpeg_logs() noexcept;

/// An opened container, read through a custom AVIOContext from a file (opened once by
/// detail::OpenFile: regular files only, never blocking) or from bytes in memory. Move-only; the
/// destructor closes it.
class AvInput {
 public:
  /// Opens `file`. \throws DataError `name` + ": cannot open...: <why>".
  static AvInput open_file(const std::filesystem::path& file, const std::string& name);
  /// Opens `bytes` (which must outlive the object) through a custom AVIOContext: no temporary
  /// file. \throws DataError as open_file().
  static AvInput open_memory(std::span<const std::byte> bytes, const std::string& name);

  AvInput(AvInput&& other) noexcept;
  AvInput& operator=(AvInput&&) = delete;
  AvInput(const AvInput&) = delete;
  AvInput& operator=(const AvInput&) = delete;
  ~AvInput();

  AVFormatContext* get() const noexcept { return fmt_; }
  /// Opens the same file (or bytes) again from its start, as a fresh container: the way back to
  /// the first packet that needs no seek (a seek before the first keyframe is not reliable in
  /// every demuxer). get() changes. \throws DataError as open_file().
  void reopen(const std::string& name);
  /// The file's size and modification time when opened (0 for bytes in memory).
  std::uint64_t file_size() const noexcept;
  std::int64_t file_mtime_ns() const noexcept;

  struct Memory;  // what is read (a descriptor or bytes) and the read position

 private:
  AvInput() = default;
  void open_source(const std::string& name);
  AVFormatContext* fmt_ = nullptr;
  AVIOContext* io_ = nullptr;
  std::unique_ptr<Memory> memory_;
};

}  // namespace ferry::detail::video
