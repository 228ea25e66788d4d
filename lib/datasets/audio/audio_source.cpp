// A libsndfile handle over a file's descriptor or over memory: every read goes through
// libsndfile's virtual I/O, so a file and a shard member take the same path.

#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
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
  // A header's forged size may ask for a seek past any position (2^63 - 1): refused, not
  // overflowed.
  if ((whence == SEEK_CUR && __builtin_add_overflow(to, s.position, &to)) ||
      (whence == SEEK_END && __builtin_add_overflow(to, s.size, &to))) {
    return -1;
  }
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
                                static_cast<std::size_t>(n - done), s.base + s.position + done);
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

namespace {

// libsndfile's count for a stream whose header gives no length (SF_COUNT_MAX, or near it).
bool unknown_length(sf_count_t frames) {
  return frames >= std::numeric_limits<std::int64_t>::max() / 2;
}

}  // namespace

std::size_t read_at(ByteSource& source, std::int64_t offset, std::byte* out, std::size_t n) {
  const std::int64_t saved = source.position;
  source.position = offset;
  const auto got =
      static_cast<std::size_t>(audio_vio_read(out, static_cast<sf_count_t>(n), &source));
  source.position = saved;
  return got;
}

struct FrameCounts::State {
  std::unique_ptr<std::atomic<std::int64_t>[]> frames;
  std::unique_ptr<std::atomic<std::int64_t>[]> ends;  // the size + 1 whose end decoded; 0: none
  std::unique_ptr<std::atomic<std::int64_t>[]> containers;  // the size + 1 checked; 0: none
  mutable std::mutex mutex;
  std::unordered_map<std::size_t, std::string> errors;
};

FrameCounts::FrameCounts(std::size_t files) : state_(std::make_unique<State>()) {
  state_->frames = std::make_unique<std::atomic<std::int64_t>[]>(files);
  state_->ends = std::make_unique<std::atomic<std::int64_t>[]>(files);
  state_->containers = std::make_unique<std::atomic<std::int64_t>[]>(files);
  for (std::size_t i = 0; i < files; ++i) {
    state_->frames[i].store(0);
    state_->ends[i].store(0);
    state_->containers[i].store(0);
  }
}

FrameCounts::~FrameCounts() = default;

std::int64_t FrameCounts::frames(std::size_t file) const {
  return state_->frames[file].load(std::memory_order_acquire);
}

std::string FrameCounts::error(std::size_t file) const {
  const std::lock_guard<std::mutex> lock(state_->mutex);
  const auto it = state_->errors.find(file);
  return it == state_->errors.end() ? std::string() : it->second;
}

void FrameCounts::remember(std::size_t file, std::int64_t frames) {
  state_->frames[file].store(frames, std::memory_order_release);
}

bool FrameCounts::end_decoded(std::size_t file, std::int64_t size) const {
  return state_->ends[file].load(std::memory_order_relaxed) == size + 1;
}

void FrameCounts::remember_end(std::size_t file, std::int64_t size) {
  state_->ends[file].store(size + 1, std::memory_order_relaxed);
}

std::optional<bool> FrameCounts::container_checked(std::size_t file, std::int64_t size) const {
  const std::int64_t v = state_->containers[file].load(std::memory_order_relaxed);
  if (v / 2 != size + 1) return std::nullopt;
  return v % 2 == 1;
}

void FrameCounts::remember_container(std::size_t file, std::int64_t size, bool seek_unsafe) {
  state_->containers[file].store(2 * (size + 1) + (seek_unsafe ? 1 : 0), std::memory_order_relaxed);
}

void FrameCounts::remember_error(std::size_t file, std::string message) {
  {
    const std::lock_guard<std::mutex> lock(state_->mutex);
    state_->errors[file] = std::move(message);
  }
  state_->frames[file].store(-1, std::memory_order_release);
}

SoundFile::SoundFile(ByteSource& source, std::string_view name, double max_seconds, CountMemo memo)
    : source_(source), name_(name), memo_(memo) {
  if (source.size == 0) fail(name, "empty file (no bytes)");
  SF_INFO sf{};
  open(sf);
  try {
    info_ = {sf.frames, sf.samplerate, sf.channels};
    if (sf.frames <= 0 || sf.samplerate <= 0 || sf.channels <= 0) {
      fail(name, "no frames (" + std::to_string(sf.frames) + " frames, " +
                     std::to_string(sf.samplerate) + " Hz, " + std::to_string(sf.channels) +
                     " channels by its header)");
    }
    const int major = sf.format & SF_FORMAT_TYPEMASK;
    if (major == SF_FORMAT_OGG && sf.channels >= 3 && sf.channels <= 8) {
      // The Vorbis I specification's orders (section 4.3.9), for WAVE's default masks.
      static constexpr std::array<std::array<int, 8>, 6> kWaveOrder{{{0, 2, 1},
                                                                     {0, 1, 2, 3},
                                                                     {0, 2, 1, 3, 4},
                                                                     {0, 2, 1, 5, 3, 4},
                                                                     {0, 2, 1, 6, 5, 3, 4},
                                                                     {0, 2, 1, 7, 5, 6, 3, 4}}};
      wave_order_ = kWaveOrder[static_cast<std::size_t>(sf.channels - 3)].data();
    }
    if (major != SF_FORMAT_WAV && major != SF_FORMAT_WAVEX && major != SF_FORMAT_RF64 &&
        major != SF_FORMAT_FLAC && major != SF_FORMAT_OGG && major != SF_FORMAT_MPEG) {
      // libsndfile reads more (AIFF, AU, W64, ...), but ferry checks the containers it names
      // for what libsndfile lets through (a file cut short reads short there).
      SF_FORMAT_INFO format{major, nullptr, nullptr};
      const bool named = sf_command(nullptr, SFC_GET_FORMAT_INFO, &format, sizeof format) == 0 &&
                         format.name != nullptr;
      fail(name, std::string("a file of ") + (named ? format.name : "another format") +
                     ": ferry reads WAV, FLAC, Ogg Vorbis/Opus and MP3");
    }
    mpeg_ = major == SF_FORMAT_MPEG;
    if (major == SF_FORMAT_OGG && unknown_length(sf.frames)) {
      // libsndfile takes an Ogg stream's length from its last page, which a whole file has.
      fail(name, "truncated or corrupt: its Ogg stream's last page is missing");
    }
    // An Ogg file's pages are walked once a file with a memo (while its size stays the same).
    const std::optional<bool> checked = memo.counts != nullptr
                                            ? memo.counts->container_checked(memo.file, source.size)
                                            : std::nullopt;
    if (major == SF_FORMAT_OGG && checked) {
      seek_from_start_ = *checked;
    } else if (major == SF_FORMAT_OGG) {
      bool unsafe = false;
      const std::string problem = ogg_problem(source, unsafe);
      if (!problem.empty()) fail(name, problem);
      if (memo.counts != nullptr) memo.counts->remember_container(memo.file, source.size, unsafe);
      seek_from_start_ = unsafe;
    }
    if (major == SF_FORMAT_WAV || major == SF_FORMAT_WAVEX || major == SF_FORMAT_RF64) {
      if (const auto cut = wav_data_cut(source)) {
        fail(name, "truncated: its data chunk's header gives " + std::to_string(cut->first) +
                       " bytes, the file holds " + std::to_string(cut->second) + " after it");
      }
    }
    if (unknown_length(sf.frames) || (mpeg_ && !mp3_length_tag(source))) {
      const std::int64_t known = memo.counts ? memo.counts->frames(memo.file) : 0;
      if (known > 0) {  // counted before: the frames it found
        counted_ = true;
        info_.frames = known;
      } else if (known < 0) {  // counted before, and refused
        throw DataError(memo.counts->error(memo.file));
      } else if (memo.counts == nullptr) {
        count(max_seconds);
      } else {
        try {
          count(max_seconds);
        } catch (const DataError& e) {
          memo.counts->remember_error(memo.file, e.what());
          throw;
        }
        memo.counts->remember(memo.file, info_.frames);
      }
    }
  } catch (...) {
    sf_close(file_);
    file_ = nullptr;
    throw;
  }
  // Integer samples become floats in [-1, 1) (libsndfile's default); nothing is clipped.
}

void SoundFile::open(SF_INFO& sf) {
  SF_VIRTUAL_IO io{audio_vio_length, audio_vio_seek, audio_vio_read, audio_vio_write,
                   audio_vio_tell};
  source_.position = 0;
  file_ = sf_open_virtual(&io, SFM_READ, &sf, &source_);
  // libsndfile's reason for a failed open lives in a global that other threads may be writing;
  // the message says what it means instead.
  if (file_ == nullptr) {
    fail(name_,
         "not a sound file libsndfile reads (WAV, FLAC, Ogg Vorbis/Opus, MP3): unknown format, "
         "or a corrupt or truncated header");
  }
  frame_ = 0;
}

void SoundFile::count(double max_seconds) {
  // The header gives no length (a FLAC written to a pipe) or guesses it (an MP3 without a Xing
  // header): the file is decoded once to count its frames, at most max_seconds' worth.
  const double most_frames = std::ceil(max_seconds * info_.sample_rate);
  std::vector<float> chunk(static_cast<std::size_t>(4096) *
                           static_cast<std::size_t>(info_.channels));
  std::int64_t frames = 0;
  const std::int64_t guess = info_.frames;
  counted_ = true;
  info_.frames = 0;  // unknown while counting
  while (true) {
    const std::int64_t got = read(chunk.data(), 4096);
    if (got == 0) break;
    frames += got;
    if (static_cast<double>(frames) > most_frames) {
      fail(name_, "more than max_seconds (" + std::to_string(max_seconds) +
                      ") long: its header gives no length, and its decode passed " +
                      std::to_string(frames) + " frames at " + std::to_string(info_.sample_rate) +
                      " Hz");
    }
  }
  if (frames == 0) fail(name_, "no frames (none decode; its header gives no length)");
  // libsndfile reads no further than its guess: an MP3 that decodes to exactly that many may hold
  // more (a VBR file's guess, from its first frame's bitrate, may be any fraction of it).
  if (mpeg_ && frames == guess) {
    fail(name_,
         "an MP3 without a Xing, Info or VBRI header whose length libsndfile cannot tell "
         "(it decodes no further than its guess, " +
             std::to_string(guess) +
             " frames, from the first frame's bitrate: a VBR file): not read");
  }
  info_.frames = frames;
  rewind();
}

std::string SoundFile::frames_said() const {
  if (!counted_) return " of the " + std::to_string(info_.frames) + " its header gives";
  if (info_.frames == 0) return " (its header gives no length)";
  return " of the " + std::to_string(info_.frames) + " its decode counted";
}

void SoundFile::rewind() {
  sf_close(file_);
  file_ = nullptr;
  SF_INFO sf{};
  open(sf);
}

SoundFile::~SoundFile() {
  if (file_ != nullptr) sf_close(file_);
}

void SoundFile::seek(std::int64_t frame) {
  if (frame == frame_) return;
  // A counted file is read forward from its start (its header cannot place a seek); an MP3 is
  // decoded from a few frames before: mpg123's first frames after a seek lack what the frames
  // before give them (the bit reservoir, the overlap), and differ from a decode from the start.
  constexpr std::int64_t kMpegPreroll = std::int64_t{8} * 1152;
  if (counted_ || seek_from_start_) {
    if (frame < frame_ || frame_ < 0) rewind();
  } else {
    const std::int64_t to = mpeg_ ? std::max<std::int64_t>(0, frame - kMpegPreroll) : frame;
    if (sf_seek(file_, to, SEEK_SET) != to) {
      fail(name_, "cannot seek to frame " + std::to_string(to) + " of " +
                      std::to_string(info_.frames) + ": " + sf_strerror(file_));
    }
    frame_ = to;
  }
  std::vector<float> chunk(static_cast<std::size_t>(4096) *
                           static_cast<std::size_t>(info_.channels));
  while (frame_ < frame) {
    const std::int64_t got = read(chunk.data(), std::min<std::int64_t>(4096, frame - frame_));
    if (got == 0) {
      fail(name_, "truncated or corrupt: the decode ended at frame " + std::to_string(frame_) +
                      frames_said());
    }
  }
}

std::int64_t SoundFile::read(float* out, std::int64_t frames) {
  const sf_count_t got = sf_readf_float(file_, out, frames);
  if (got < 0 || sf_error(file_) != SF_ERR_NO_ERROR) {
    fail(name_, "truncated or corrupt: the decode failed at frame " + std::to_string(frame_) +
                    frames_said() + ": " + sf_strerror(file_));
  }
  // Decoders that reach a corrupt packet report it by returning fewer frames, then none: the
  // caller compares what it got with the header's count.
  for (std::int64_t i = 0; i < got * info_.channels; ++i) {
    if (!std::isfinite(out[i])) {
      fail(name_, "decode failed at frame " + std::to_string(frame_ + i / info_.channels) +
                      ": a sample is not a finite number");
    }
  }
  if (wave_order_ != nullptr) {
    // Vorbis's channel order (and Opus's, mapping family 1) to WAVE's, as WAV and FLAC give
    // theirs: 5.1 is FL, FC, FR, BL, BR, LFE in Ogg, FL, FR, FC, LFE, BL, BR in WAV.
    const int n = info_.channels;
    std::array<float, 8> frame{};
    for (std::int64_t f = 0; f < got; ++f) {
      float* at = out + f * n;
      std::copy(at, at + n, frame.begin());
      for (int c = 0; c < n; ++c) at[c] = frame[static_cast<std::size_t>(wave_order_[c])];
    }
  }
  frame_ += got;
  return got;
}

void SoundFile::check_end() {
  if (counted_) return;  // decoded whole when counted
  // libsndfile's seek to the last frame is off too; the page walk found the last page whole.
  if (seek_from_start_) return;
  if (memo_.counts != nullptr && memo_.counts->end_decoded(memo_.file, source_.size)) return;
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
  if (memo_.counts != nullptr) memo_.counts->remember_end(memo_.file, source_.size);
}

}  // namespace ferry::detail::audio
