// The public face of audio decoding (include/ferry/audio.hpp): options, fields, lengths, and
// decode_audio() from memory or from a file.

#include "ferry/audio.hpp"

#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "datasets/audio/audio_internal.hpp"
#include "datasets/common/file_io.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

constexpr int kAudioMaxChannels = detail::audio::kMaxChannels;
constexpr int kAudioMaxRate = detail::audio::kMaxRate;

[[noreturn]] void audio_option_error(const std::string& what) {
  throw ConfigError("AudioOptions: " + what);
}

std::string audio_name(const std::filesystem::path& file, std::string_view name) {
  return name.empty() ? file.string() : std::string(name);
}

// An `out` of the size the file gives under `options`.
void check_out(const AudioInfo& info, const AudioOptions& options, std::span<const float> out,
               std::string_view name) {
  const std::int64_t want =
      audio_length(info, options, name) * detail::audio::row_values(info, options);
  if (static_cast<std::int64_t>(out.size()) != want) {
    throw ConfigError("decode_audio: " + std::string(name) + ": out holds " +
                      std::to_string(out.size()) + " floats, the file gives " +
                      std::to_string(want));
  }
}

// A max_seconds given to a header's read. \throws ConfigError unless > 0.
void check_max_seconds(double max_seconds) {
  if (!(max_seconds > 0)) {
    audio_option_error("max_seconds must be > 0, not " + std::to_string(max_seconds));
  }
}

// The bytes [offset, offset + size) of descriptor `fd`, as a source: they must lie in the file.
// \throws DataError naming `name`.
detail::audio::ByteSource member_source(int fd, std::int64_t offset, std::int64_t size,
                                        std::string_view name) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    detail::audio::fail(name, "not an open file (descriptor " + std::to_string(fd) + ")");
  }
  if (offset < 0 || size < 0 ||
      (S_ISREG(st.st_mode) && (offset > st.st_size || size > st.st_size - offset))) {
    detail::audio::fail(name, "bytes " + std::to_string(offset) + " + " + std::to_string(size) +
                                  " are not within the file's " + std::to_string(st.st_size));
  }
  return {fd, {}, size, 0, offset};
}

}  // namespace

void check_audio_options(const AudioOptions& o) { detail::audio::check_options(o, 2); }

void detail::audio::check_options(const AudioOptions& o, int most_channels) {
  if (o.sample_rate < 0 || o.sample_rate > kAudioMaxRate) {
    audio_option_error("sample_rate " + std::to_string(o.sample_rate) +
                       " is not 0 (keep) or 1 to " + std::to_string(kAudioMaxRate));
  }
  if (o.channels < 0 || o.channels > most_channels) {
    audio_option_error("channels " + std::to_string(o.channels) +
                       (most_channels == 2
                            ? " is not 0 (keep), 1 (mono) or 2 (stereo)"
                            : " is not 0 (keep) or 1 to " + std::to_string(most_channels)));
  }
  if (!(o.clip_seconds >= 0) || !std::isfinite(o.clip_seconds)) {
    audio_option_error("clip_seconds must be 0 (the whole file) or > 0, not " +
                       std::to_string(o.clip_seconds));
  }
  // A clip's frames are counted in 64 bits: far below where clip_seconds * rate overflows.
  constexpr double kMostClipFrames = 1ULL << 40;
  if (o.clip_seconds * (o.sample_rate > 0 ? o.sample_rate : kAudioMaxRate) > kMostClipFrames) {
    std::array<char, 32> seconds{};
    std::snprintf(seconds.data(), seconds.size(), "%g", o.clip_seconds);
    audio_option_error("clip_seconds " + std::string(seconds.data()) +
                       " is out of range: more than 2^40 frames at sample_rate " +
                       std::to_string(o.sample_rate > 0 ? o.sample_rate : kAudioMaxRate));
  }
  if (o.clip_seconds > 0 && o.sample_rate > 0 && std::llround(o.clip_seconds * o.sample_rate) < 1) {
    audio_option_error("clip_seconds " + std::to_string(o.clip_seconds) +
                       " is less than one frame at sample_rate " + std::to_string(o.sample_rate));
  }
  check_max_seconds(o.max_seconds);
  if (o.crop != AudioCrop::random && o.crop != AudioCrop::start && o.crop != AudioCrop::center) {
    audio_option_error("crop " + std::to_string(static_cast<int>(o.crop)) +
                       " is not an AudioCrop (random, start or center)");
  }
  if (o.mel) {
    const MelOptions& m = *o.mel;
    if (o.channels != 1)
      audio_option_error("mel needs channels 1, not " + std::to_string(o.channels));
    if (m.n_fft < 2 || m.n_fft > 65536) {
      audio_option_error("mel.n_fft must be 2 to 65536, not " + std::to_string(m.n_fft));
    }
    if (m.hop < 1) audio_option_error("mel.hop must be >= 1, not " + std::to_string(m.hop));
    if (m.n_mels < 1 || m.n_mels > 4096) {
      audio_option_error("mel.n_mels must be 1 to 4096, not " + std::to_string(m.n_mels));
    }
    if (!(m.f_min >= 0) || !(m.f_max >= 0) || !std::isfinite(m.f_min) || !std::isfinite(m.f_max) ||
        (m.f_max > 0 && m.f_max <= m.f_min)) {
      audio_option_error(
          "mel.f_min and f_max must be finite and >= 0 with f_min < f_max (or f_max 0)");
    }
    const int nyquist = o.sample_rate / 2;
    if (o.sample_rate > 0 && (m.f_max > 0 ? m.f_max : static_cast<double>(nyquist)) <= m.f_min) {
      audio_option_error("mel.f_min must be below f_max (sample_rate / 2 when 0)");
    }
    // The floor is taken as a float: past float's range every value would be +inf, below its
    // least normal a silent frame's log -inf or a denormal's.
    if (!(m.log_floor >= std::numeric_limits<float>::min()) ||
        !(m.log_floor <= std::numeric_limits<float>::max())) {
      std::array<char, 32> floor{};
      std::snprintf(floor.data(), floor.size(), "%g", m.log_floor);
      audio_option_error(
          "mel.log_floor must be finite and > 0 (a float's normal range, 1.2e-38 "
          "to 3.4e+38), not " +
          std::string(floor.data()));
    }
  }
}

FieldSpec audio_field(const AudioOptions& options, int channels, std::string name) {
  detail::audio::check_options(options, kAudioMaxChannels);
  std::int64_t rows = ragged;
  const int rate = options.sample_rate;
  if (options.clip_seconds > 0) {
    if (rate == 0) {
      throw ConfigError("AudioOptions: a clip with sample_rate 0 needs the files' rate");
    }
    rows = std::llround(options.clip_seconds * rate);
  }
  if (options.mel) {
    if (rows != ragged) rows = detail::audio::mel_frames(rows, *options.mel);
    return {std::move(name), DType::f32, {rows, options.mel->n_mels}};
  }
  if (channels < 1 || channels > kAudioMaxChannels) {
    throw ConfigError("audio_field: channels " + std::to_string(channels) + " is not 1 to " +
                      std::to_string(kAudioMaxChannels));
  }
  if (channels == 1) return {std::move(name), DType::f32, {rows}};
  return {std::move(name), DType::f32, {rows, channels}};
}

AudioInfo audio_info(std::span<const std::byte> encoded, std::string_view name,
                     double max_seconds) {
  check_max_seconds(max_seconds);
  detail::audio::ByteSource source{-1, encoded, static_cast<std::int64_t>(encoded.size()), 0};
  const detail::audio::SoundFile file(source, name, max_seconds);
  return file.info();
}

AudioInfo audio_file_info(const std::filesystem::path& file, std::string_view name,
                          double max_seconds) {
  check_max_seconds(max_seconds);
  const std::string label = audio_name(file, name);
  const detail::OpenFile open(file, {{}, label});
  detail::audio::ByteSource source{
      open.descriptor(), {}, static_cast<std::int64_t>(open.size()), 0};
  const detail::audio::SoundFile sound(source, label, max_seconds);
  return sound.info();
}

std::int64_t audio_frames(const AudioInfo& info, const AudioOptions& options,
                          std::string_view name) {
  detail::audio::check_options(options, kAudioMaxChannels);
  if (info.frames <= 0 || info.sample_rate <= 0 || info.channels <= 0) {
    throw ConfigError("audio_frames: an AudioInfo of no frames, rate or channels");
  }
  detail::audio::check_duration(info, options, name);
  return detail::audio::wave_frames(info, options);
}

std::int64_t audio_length(const AudioInfo& info, const AudioOptions& options,
                          std::string_view name) {
  const std::int64_t frames = audio_frames(info, options, name);
  return options.mel ? detail::audio::mel_frames(frames, *options.mel) : frames;
}

void decode_audio(std::span<const std::byte> encoded, const AudioOptions& options,
                  std::uint64_t seed, std::span<float> out, std::string_view name) {
  detail::audio::check_options(options, kAudioMaxChannels);
  detail::audio::ByteSource source{-1, encoded, static_cast<std::int64_t>(encoded.size()), 0};
  detail::audio::SoundFile file(source, name, options.max_seconds);
  check_out(file.info(), options, out, name);
  detail::audio::decode(file, options, seed, out, name);
}

void decode_audio_file(const std::filesystem::path& file, const AudioOptions& options,
                       std::uint64_t seed, std::span<float> out, std::string_view name) {
  detail::audio::check_options(options, kAudioMaxChannels);
  const std::string label = audio_name(file, name);
  const detail::OpenFile open(file, {{}, label});
  detail::audio::ByteSource source{
      open.descriptor(), {}, static_cast<std::int64_t>(open.size()), 0};
  detail::audio::SoundFile sound(source, label, options.max_seconds);
  check_out(sound.info(), options, out, label);
  detail::audio::decode(sound, options, seed, out, label);
}

AudioInfo audio_info_at(int fd, std::int64_t offset, std::int64_t size, std::string_view name,
                        double max_seconds) {
  check_max_seconds(max_seconds);
  detail::audio::ByteSource source = member_source(fd, offset, size, name);
  const detail::audio::SoundFile file(source, name, max_seconds);
  return file.info();
}

void decode_audio_at(int fd, std::int64_t offset, std::int64_t size, const AudioOptions& options,
                     std::uint64_t seed, std::span<float> out, std::string_view name) {
  detail::audio::check_options(options, kAudioMaxChannels);
  detail::audio::ByteSource source = member_source(fd, offset, size, name);
  detail::audio::SoundFile file(source, name, options.max_seconds);
  check_out(file.info(), options, out, name);
  detail::audio::decode(file, options, seed, out, name);
}

}  // namespace ferry
