#include "datasets/video/video_av.hpp"

extern "C" {
#include <libavutil/error.h>
#include <libavutil/log.h>
#include <libavutil/mem.h>
}

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "datasets/common/file_io.hpp"
#include "datasets/video/video_mp4.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::video {

std::string av_error_text(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(code, text, sizeof text) < 0) return "FFmpeg error " + std::to_string(code);
  return text;
}

PacketPtr make_packet() {
  PacketPtr p(av_packet_alloc());
  if (!p) throw std::bad_alloc();
  return p;
}

FramePtr make_frame() {
  FramePtr f(av_frame_alloc());
  if (!f) throw std::bad_alloc();
  return f;
}

void quiet_ffmpeg_logs() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    if (av_log_get_level() == AV_LOG_INFO) av_log_set_level(AV_LOG_FATAL);
  });
}

struct AvInput::Memory {
  std::span<const std::byte> bytes;  // when fd is empty
  FileDescriptor fd;
  std::int64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t position = 0;
};

namespace {

int video_av_read(void* opaque, std::uint8_t* buf, int size) {
  auto* m = static_cast<AvInput::Memory*>(opaque);
  const std::int64_t n = std::min<std::int64_t>(size, m->size - m->position);
  if (n <= 0) return AVERROR_EOF;
  if (!m->fd) {
    std::memcpy(buf, m->bytes.data() + m->position, static_cast<std::size_t>(n));
    m->position += n;
    return static_cast<int>(n);
  }
  for (;;) {
    const ssize_t got = ::pread(m->fd.get(), buf, static_cast<std::size_t>(n), m->position);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return AVERROR(errno);
    if (got == 0) return AVERROR_EOF;  // the file shrank since it was opened
    m->position += got;
    return static_cast<int>(got);
  }
}

std::int64_t video_av_seek(void* opaque, std::int64_t offset, int whence) {
  auto* m = static_cast<AvInput::Memory*>(opaque);
  const std::int64_t total = m->size;
  std::int64_t to = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
      return total;
    case SEEK_SET:
      to = offset;
      break;
    case SEEK_CUR:
      if (__builtin_add_overflow(m->position, offset, &to)) return AVERROR(EINVAL);
      break;
    case SEEK_END:
      if (__builtin_add_overflow(total, offset, &to)) return AVERROR(EINVAL);
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (to < 0 || to > total) return AVERROR(EINVAL);
  m->position = to;
  return to;
}

/// The sample tables of what `m` holds, before FFmpeg reads them (video_mp4.hpp).
void check_tables(const AvInput::Memory& m, const std::string& name) {
  const ReadAt read = [&m](std::uint64_t at, std::byte* out, std::size_t n) -> std::size_t {
    const auto size = static_cast<std::uint64_t>(m.size);
    if (at >= size) return 0;
    n = static_cast<std::size_t>(std::min<std::uint64_t>(n, size - at));
    if (!m.fd) {
      std::memcpy(out, m.bytes.data() + at, n);
      return n;
    }
    std::size_t done = 0;
    while (done < n) {
      const ssize_t got = ::pread(m.fd.get(), out + done, n - done, static_cast<off_t>(at + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;  // FFmpeg meets the error or the end itself
      done += static_cast<std::size_t>(got);
    }
    return done;
  };
  check_sample_tables(read, static_cast<std::uint64_t>(m.size), name);
}

[[noreturn]] void video_av_open_failed(const std::string& name, int code) {
  throw DataError(name + ": cannot open as a video: " + av_error_text(code));
}

}  // namespace

AvInput AvInput::open_file(const std::filesystem::path& file, const std::string& name) {
  AvInput in;
  in.memory_ = std::make_unique<Memory>();
  OpenFile opened(file, FileLabel{{}, name});
  in.memory_->size = static_cast<std::int64_t>(opened.size());
  in.memory_->mtime_ns = opened.mtime_ns();
  in.memory_->fd = opened.take();
  check_tables(*in.memory_, name);
  in.open_source(name);
  return in;
}

AvInput AvInput::open_memory(std::span<const std::byte> bytes, const std::string& name) {
  AvInput in;
  in.memory_ = std::make_unique<Memory>();
  in.memory_->bytes = bytes;
  in.memory_->size = static_cast<std::int64_t>(bytes.size());
  check_tables(*in.memory_, name);
  in.open_source(name);
  return in;
}

void AvInput::open_source(const std::string& name) {
  quiet_ffmpeg_logs();
  constexpr int kBufferBytes = 64 * 1024;
  auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferBytes));
  if (buffer == nullptr) throw std::bad_alloc();
  io_ = avio_alloc_context(buffer, kBufferBytes, 0, memory_.get(), &video_av_read, nullptr,
                           &video_av_seek);
  if (io_ == nullptr) {
    av_free(buffer);
    throw std::bad_alloc();
  }
  fmt_ = avformat_alloc_context();
  if (fmt_ == nullptr) throw std::bad_alloc();
  fmt_->pb = io_;
  fmt_->flags |= AVFMT_FLAG_CUSTOM_IO;
  const int r = avformat_open_input(&fmt_, nullptr, nullptr, nullptr);
  if (r < 0) video_av_open_failed(name, r);  // the context is freed; ~AvInput frees io_
}

void AvInput::reopen(const std::string& name) {
  if (fmt_ != nullptr) avformat_close_input(&fmt_);
  if (io_ != nullptr) {
    av_freep(&io_->buffer);
    avio_context_free(&io_);
  }
  memory_->position = 0;
  open_source(name);
}

std::uint64_t AvInput::file_size() const noexcept {
  return memory_ && memory_->fd ? static_cast<std::uint64_t>(memory_->size) : 0;
}

std::int64_t AvInput::file_mtime_ns() const noexcept {
  return memory_ && memory_->fd ? memory_->mtime_ns : 0;
}

AvInput::AvInput(AvInput&& other) noexcept
    : fmt_(std::exchange(other.fmt_, nullptr)),
      io_(std::exchange(other.io_, nullptr)),
      memory_(std::move(other.memory_)) {}

AvInput::~AvInput() {
  if (fmt_ != nullptr) avformat_close_input(&fmt_);
  if (io_ != nullptr) {
    av_freep(&io_->buffer);  // FFmpeg may have replaced the buffer given: free the current one
    avio_context_free(&io_);
  }
}

}  // namespace ferry::detail::video
