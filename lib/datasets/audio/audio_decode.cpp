// One file to one clip: the header checked, the clip placed, the frames it needs read (after a
// seek), the channels mixed, the rate converted by libsoxr, and the result written in place.

#include <soxr.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "datasets/audio/audio_internal.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::audio {
namespace {

// Frames read from libsndfile at a time.
constexpr std::int64_t kAudioChunk = 4096;

// splitmix64: the crop's only source of randomness, seeded by the sample's seed.
std::uint64_t audio_splitmix(std::uint64_t state) noexcept {
  std::uint64_t z = state + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// round(frames * to / from), ties away from zero, exact for every count a header can give.
std::int64_t rescale(std::int64_t frames, int to, int from) {
  const std::int64_t whole = frames / from, part = frames % from;  // part * to < 2^44
  return whole * to + (2 * part * to + from) / (2 * static_cast<std::int64_t>(from));
}

int out_rate(const AudioInfo& info, const AudioOptions& o) {
  return o.sample_rate > 0 ? o.sample_rate : info.sample_rate;
}

int out_channels(const AudioInfo& info, const AudioOptions& o) {
  return o.channels > 0 ? o.channels : info.channels;
}

// The first output frame of a clip of `clip` frames in a signal of `length`.
std::int64_t clip_start(std::int64_t length, std::int64_t clip, AudioCrop crop,
                        std::uint64_t seed) {
  if (length <= clip) return 0;
  const std::int64_t room = length - clip;
  switch (crop) {
    case AudioCrop::start:
      return 0;
    case AudioCrop::center:
      return room / 2;
    case AudioCrop::random:
      break;
  }
  // The modulo's bias is below 2^-24 for any length a header may claim.
  return static_cast<std::int64_t>(audio_splitmix(seed) % static_cast<std::uint64_t>(room + 1));
}

// Mixes `frames` interleaved frames of `in_channels` into `channels` (see AudioOptions).
void mix(const float* in, std::int64_t frames, int in_channels, float* out, int channels) {
  if (channels == in_channels) {
    std::copy(in, in + frames * channels, out);
  } else if (channels == 1) {
    const float scale = 1.0F / static_cast<float>(in_channels);
    for (std::int64_t f = 0; f < frames; ++f) {
      float sum = 0;
      for (int c = 0; c < in_channels; ++c) sum += in[f * in_channels + c];
      out[f] = sum * scale;
    }
  } else {  // 2 of 1 (duplicated) or of more (the first two)
    for (std::int64_t f = 0; f < frames; ++f) {
      out[2 * f] = in[f * in_channels];
      out[2 * f + 1] = in[f * in_channels + (in_channels == 1 ? 0 : 1)];
    }
  }
}

struct SoxrDeleter {
  void operator()(soxr* s) const noexcept { soxr_delete(s); }
};

// A resampler from `in_rate` to `out_rate` for `channels`, ready for a fresh signal: the
// thread's last one when it converts the same way (cleared), else a new one. Making one
// designs its filter and allocates its tables, which cost a clip more than resampling it.
soxr* thread_resampler(int in_rate, int out_rate, int channels, std::string_view name) {
  struct Kept {
    int in_rate = 0, out_rate = 0, channels = 0;
    std::unique_ptr<soxr, SoxrDeleter> resampler;
  };
  thread_local Kept kept;
  if (kept.resampler && kept.in_rate == in_rate && kept.out_rate == out_rate &&
      kept.channels == channels && soxr_clear(kept.resampler.get()) == nullptr) {
    return kept.resampler.get();
  }
  kept.resampler.reset();
  soxr_error_t error = nullptr;
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  kept.resampler.reset(soxr_create(in_rate, out_rate, static_cast<unsigned>(channels), &error,
                                   nullptr, &quality, nullptr));
  if (!kept.resampler || error != nullptr) {
    kept.resampler.reset();
    fail(name, std::string("cannot resample: ") + soxr_strerror(error));
  }
  kept.in_rate = in_rate;
  kept.out_rate = out_rate;
  kept.channels = channels;
  return kept.resampler.get();
}

// Writes frames [start, start + count) of the file's signal at `rate` with `channels` into
// `out`; the frames past the signal's end are zeros. Reads only what they need.
class ClipWriter {
 public:
  ClipWriter(SoundFile& file, int rate, int channels, std::string_view name)
      : file_(file), rate_(rate), channels_(channels), name_(name) {}

  void write(std::int64_t start, std::int64_t count, float* out) {
    out_ = out;
    want_ = count;
    written_ = 0;
    const AudioInfo& info = file_.info();
    if (rate_ == info.sample_rate) {
      if (start < info.frames) {
        file_.seek(start);
        copy_through(info.frames - start);
      }
    } else {
      resample_from(start);
    }
    std::fill(out_ + written_ * channels_, out_ + want_ * channels_, 0.0F);
    // The field is documented in [-1, 1]: a float file's louder samples, and a resampler's
    // overshoot at a full-scale edge, are clipped.
    for (float* v = out_; v != out_ + written_ * channels_; ++v) *v = std::clamp(*v, -1.0F, 1.0F);
  }

 private:
  // Reads frames until `count` are read (or the clip is full), mixing them into the clip.
  void copy_through(std::int64_t count) {
    const int in_channels = file_.info().channels;
    raw_.resize(static_cast<std::size_t>(kAudioChunk * in_channels));
    while (written_ < want_ && count > 0) {
      const std::int64_t n = std::min({kAudioChunk, want_ - written_, count});
      const std::int64_t got = file_.read(raw_.data(), n);
      if (got == 0) truncated();
      mix(raw_.data(), got, in_channels, out_ + written_ * channels_, channels_);
      written_ += got;
      count -= got;
    }
  }

  void resample_from(std::int64_t start) {
    const AudioInfo& info = file_.info();
    const int in_rate = info.sample_rate;
    // Start reading at an input frame whose time is an output frame's, far enough before the
    // clip that the filter has settled: the clip is then the same samples (to float rounding) as
    // those of a resampling of the whole file.
    const std::int64_t step = in_rate / std::gcd(in_rate, rate_);
    std::int64_t first = 0;
    if (start > 0) {
      const std::int64_t at = rescale(start, in_rate, rate_) - in_rate / 10 - 64;
      first = std::max<std::int64_t>(0, at / step * step);
    }
    if (first >= info.frames) return;
    std::int64_t skip = start - rescale(first, rate_, in_rate);
    soxr* const resampler = thread_resampler(in_rate, rate_, channels_, name_);
    soxr_error_t error = nullptr;
    file_.seek(first);
    raw_.resize(static_cast<std::size_t>(kAudioChunk * info.channels));
    mixed_.resize(static_cast<std::size_t>(kAudioChunk * channels_));
    resampled_.resize(static_cast<std::size_t>(kAudioChunk * channels_));
    std::int64_t left = info.frames - first;
    while (written_ < want_) {
      std::int64_t got = 0;
      if (left > 0) {
        got = file_.read(raw_.data(), std::min(kAudioChunk, left));
        if (got == 0) truncated();
        left -= got;
        mix(raw_.data(), got, info.channels, mixed_.data(), channels_);
      }
      // got == 0: the end of the input, and soxr gives what it still holds.
      std::int64_t used = 0;
      while (true) {
        std::size_t in_done = 0, out_done = 0;
        error = soxr_process(resampler, got > 0 ? mixed_.data() + used * channels_ : nullptr,
                             static_cast<std::size_t>(got - used), &in_done, resampled_.data(),
                             static_cast<std::size_t>(kAudioChunk), &out_done);
        if (error != nullptr) fail(name_, std::string("cannot resample: ") + error);
        used += static_cast<std::int64_t>(in_done);
        auto produced = static_cast<std::int64_t>(out_done);
        const std::int64_t dropped = std::min(skip, produced);
        skip -= dropped;
        const std::int64_t keep = std::min(produced - dropped, want_ - written_);
        std::copy(resampled_.data() + dropped * channels_,
                  resampled_.data() + (dropped + keep) * channels_, out_ + written_ * channels_);
        written_ += keep;
        if (written_ == want_) return;
        if (got > 0 ? used == got && produced < kAudioChunk : produced == 0) break;
      }
      if (got == 0) return;
    }
  }

  [[noreturn]] void truncated() const {
    fail(name_, "truncated or corrupt: the decode ended at frame " +
                    std::to_string(file_.position()) + " of the " +
                    std::to_string(file_.info().frames) + " its header gives");
  }

  SoundFile& file_;
  int rate_, channels_;
  std::string_view name_;
  float* out_ = nullptr;
  std::int64_t want_ = 0, written_ = 0;
  std::vector<float> raw_, mixed_, resampled_;
};

}  // namespace

void check_duration(const AudioInfo& info, const AudioOptions& options, std::string_view name) {
  // libsndfile's count for a stream whose length its header does not give (a FLAC or Ogg file
  // written to a pipe): not a length.
  if (info.frames >= std::numeric_limits<std::int64_t>::max() / 2) {
    fail(name, "its header gives no length (a stream written without one): not read");
  }
  // Resampling by more than 256 either way is no sound a model trains on, and libsoxr's buffers
  // at ratios of millions crash or spin: refused from the header.
  constexpr double kMaxRateRatio = 256;
  const double ratio = static_cast<double>(out_rate(info, options)) / info.sample_rate;
  if (ratio > kMaxRateRatio || ratio < 1 / kMaxRateRatio) {
    fail(name, std::to_string(info.sample_rate) + " Hz by its header, more than 256 times from " +
                   "the sample_rate asked (" + std::to_string(out_rate(info, options)) + " Hz)");
  }
  const double seconds = static_cast<double>(info.frames) / info.sample_rate;
  if (seconds > options.max_seconds) {
    fail(name, std::to_string(seconds) + " s long by its header (" + std::to_string(info.frames) +
                   " frames at " + std::to_string(info.sample_rate) +
                   " Hz), more than max_seconds (" + std::to_string(options.max_seconds) + ")");
  }
}

std::int64_t wave_frames(const AudioInfo& info, const AudioOptions& options) {
  const int rate = out_rate(info, options);
  if (options.clip_seconds > 0) return std::llround(options.clip_seconds * rate);
  return std::max<std::int64_t>(1, rescale(info.frames, rate, info.sample_rate));
}

std::int64_t row_values(const AudioInfo& info, const AudioOptions& options) {
  return options.mel ? options.mel->n_mels : out_channels(info, options);
}

std::int64_t mel_frames(std::int64_t frames, const MelOptions& mel) {
  return 1 + (frames + 2 * static_cast<std::int64_t>(mel.n_fft / 2) - mel.n_fft) / mel.hop;
}

void decode(SoundFile& file, const AudioOptions& options, std::uint64_t seed, std::span<float> out,
            std::string_view name) {
  const AudioInfo& info = file.info();
  check_duration(info, options, name);
  const int rate = out_rate(info, options);
  const int channels = out_channels(info, options);
  if (channels > 2 && channels != info.channels) {
    fail(name, std::to_string(info.channels) + " channels, not the " + std::to_string(channels) +
                   " asked for");
  }
  const std::int64_t frames = wave_frames(info, options);
  const std::int64_t whole =
      std::max<std::int64_t>(1, rescale(info.frames, rate, info.sample_rate));
  const std::int64_t start = clip_start(whole, frames, options.crop, seed);
  const std::int64_t rows = options.mel ? mel_frames(frames, *options.mel) : frames;
  const std::int64_t per_row = row_values(info, options);
  if (static_cast<std::int64_t>(out.size()) != rows * per_row) {
    fail(name,
         "the file changed: " + std::to_string(out.size() / static_cast<std::size_t>(per_row)) +
             " rows were planned for it, its header now gives " + std::to_string(rows));
  }
  // A clip reads part of the file: its end is decoded too, so that a file cut short is a
  // DataError whatever the clip (the whole file's read finds it anyway).
  if (options.clip_seconds > 0) file.check_end();
  ClipWriter writer(file, rate, channels, name);
  if (!options.mel) {
    writer.write(start, frames, out.data());
    return;
  }
  std::vector<float> wave(static_cast<std::size_t>(frames));
  writer.write(start, frames, wave.data());
  log_mel(wave, *options.mel, rate, out);
}

}  // namespace ferry::detail::audio
