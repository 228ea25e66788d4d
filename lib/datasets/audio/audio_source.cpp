// A libsndfile handle over a file's descriptor or over memory: every read goes through
// libsndfile's virtual I/O, so a file and a shard member take the same path.

#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "datasets/audio/audio_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::audio {
namespace {

ByteSource& audio_source_of(void* user) { return *static_cast<ByteSource*>(user); }

sf_count_t audio_vio_length(void* user) { return audio_source_of(user).size; }

sf_count_t audio_vio_seek(sf_count_t offset, int whence, void* user) {
  ByteSource& s = audio_source_of(user);
  sf_count_t to = offset;
  if (whence == SEEK_CUR) to += s.position;
  if (whence == SEEK_END) to += s.size;
  if (to < 0) return -1;
  s.position = to;
  return to;
}

sf_count_t audio_vio_read(void* ptr, sf_count_t count, void* user) {
  ByteSource& s = audio_source_of(user);
  if (count <= 0 || s.position >= s.size) return 0;
  const sf_count_t n = std::min<sf_count_t>(count, s.size - s.position);
  if (s.fd < 0) {
    std::memcpy(ptr, s.bytes.data() + s.position, static_cast<std::size_t>(n));
    s.position += n;
    return n;
  }
  sf_count_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(s.fd, static_cast<char*>(ptr) + done,
                                static_cast<std::size_t>(n - done), s.position + done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // an error or a file that shrank: libsndfile sees a short read
    done += got;
  }
  s.position += done;
  return done;
}

sf_count_t audio_vio_write(const void* /*ptr*/, sf_count_t /*count*/, void* /*user*/) { return 0; }

sf_count_t audio_vio_tell(void* user) { return audio_source_of(user).position; }

}  // namespace

void fail(std::string_view name, std::string_view what) {
  std::string message(name);
  message += ": ";
  message += what;
  throw DataError(message);
}

SoundFile::SoundFile(ByteSource& source, std::string_view name) : name_(name) {
  SF_VIRTUAL_IO io{audio_vio_length, audio_vio_seek, audio_vio_read, audio_vio_write,
                   audio_vio_tell};
  SF_INFO sf{};
  if (source.size == 0) fail(name, "empty file (no bytes)");
  file_ = sf_open_virtual(&io, SFM_READ, &sf, &source);
  // libsndfile's reason for a failed open lives in a global that other threads may be writing;
  // the message says what it means instead.
  if (file_ == nullptr) {
    fail(name,
         "not a sound file libsndfile reads (WAV, FLAC, Ogg Vorbis/Opus, MP3): unknown format, "
         "or a corrupt or truncated header");
  }
  info_ = {sf.frames, sf.samplerate, sf.channels};
  if (sf.frames <= 0 || sf.samplerate <= 0 || sf.channels <= 0) {
    sf_close(file_);
    fail(name, "no frames (" + std::to_string(sf.frames) + " frames, " +
                   std::to_string(sf.samplerate) + " Hz, " + std::to_string(sf.channels) +
                   " channels by its header)");
  }
  // Integer samples become floats in [-1, 1) (libsndfile's default); nothing is clipped.
}

SoundFile::~SoundFile() {
  if (file_ != nullptr) sf_close(file_);
}

void SoundFile::seek(std::int64_t frame) {
  if (frame == frame_) return;
  if (sf_seek(file_, frame, SEEK_SET) != frame) {
    fail(name_, "cannot seek to frame " + std::to_string(frame) + " of " +
                    std::to_string(info_.frames) + ": " + sf_strerror(file_));
  }
  frame_ = frame;
}

std::int64_t SoundFile::read(float* out, std::int64_t frames) {
  const sf_count_t got = sf_readf_float(file_, out, frames);
  if (got < 0 || sf_error(file_) != SF_ERR_NO_ERROR) {
    fail(name_, "truncated or corrupt: the decode failed at frame " + std::to_string(frame_) +
                    " of the " + std::to_string(info_.frames) +
                    " its header gives: " + sf_strerror(file_));
  }
  // Decoders that reach a corrupt packet report it by returning fewer frames, then none: the
  // caller compares what it got with the header's count.
  for (std::int64_t i = 0; i < got * info_.channels; ++i) {
    if (!std::isfinite(out[i])) {
      fail(name_, "decode failed at frame " + std::to_string(frame_ + i / info_.channels) +
                      ": a sample is not a finite number");
    }
  }
  frame_ += got;
  return got;
}

void SoundFile::check_end() {
  const std::int64_t last = info_.frames - 1;
  std::vector<float> frame(static_cast<std::size_t>(info_.channels));
  const bool decoded = sf_seek(file_, last, SEEK_SET) == last &&
                       sf_readf_float(file_, frame.data(), 1) == 1 &&
                       sf_error(file_) == SF_ERR_NO_ERROR;
  frame_ = -1;  // unknown: the next seek() moves
  if (!decoded) {
    fail(name_, "truncated or corrupt: its last frame (" + std::to_string(last) +
                    " by its header) does not decode");
  }
  frame_ = info_.frames;
}

}  // namespace ferry::detail::audio
