#pragma once

/// \file Sound to samples: AudioFolder, and what it does to each file, for any dataset. A
/// dataset of one's own (clips in a shard, bytes in a table) declares audio_field() among its
/// fields, answers length() with audio_length() when the field is ragged, and in read() calls
/// decode_audio() with SampleRef::seed(): its samples are then exactly AudioFolder's for the
/// same bytes.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"

namespace ferry {
namespace detail::audio {
class FrameCounts;
}

/// Where a clip of AudioOptions::clip_seconds is taken from a longer file.
enum class AudioCrop {
  random,  ///< the first frame uniform in [0, L - clip], drawn from the sample's seed
  start,   ///< from the first frame
  center,  ///< start = floor((L - clip) / 2)
};

/// A log-mel spectrogram of the (resampled, cropped) waveform, as torchaudio's
/// MelSpectrogram(sample_rate, n_fft, hop_length=hop, n_mels, f_min, f_max) then log: a periodic
/// Hann window of n_fft samples, centered frames (the signal reflect-padded by n_fft / 2),
/// power 2, the "htk" mel scale, no filter normalization.
struct FERRY_API MelOptions {
  int n_fft = 400, hop = 160, n_mels = 80;  ///< n_fft 2..65536, hop >= 1, n_mels >= 1
  double f_min = 0, f_max = 0;              ///< f_max 0: sample_rate / 2
  double log_floor = 1e-10;  ///< log(max(power, floor)), natural log; finite, 1.2e-38 to 3.4e38
};

/// How a sound file becomes a sample (AudioFolder, decode_audio()).
struct FERRY_API AudioOptions {
  /// Every file is resampled to it (libsoxr, high quality); 0: each file's own rate is kept,
  /// and (in a dataset) a file of another rate than the first file's is a DataError naming it.
  int sample_rate = 16000;
  /// 1: the channels averaged; 2: stereo (mono duplicated, more channels: the first two); 0:
  /// the file's own, and (in a dataset) a file with another count than the first file's is a
  /// DataError naming it. A dataset is opened with 0, 1 or 2; any other count (up to 256:
  /// AudioFolder::options() after a 0) takes files of exactly that many channels (another count
  /// is a DataError naming the file).
  int channels = 1;
  /// > 0: a clip of exactly round(clip_seconds * sample_rate) frames, taken where `crop` says,
  /// zero-padded at the end when the file is shorter; 0: the whole file, a ragged field.
  double clip_seconds = 0;
  AudioCrop crop = AudioCrop::random;
  /// Set: the field is the log-mel spectrogram f32 [frames, n_mels] instead of the waveform
  /// (channels must then be 1). Memory: the waveform it is computed from (the clip, or without
  /// one the whole resampled file) is held while it is computed, 4 bytes a frame beside the
  /// spectrogram returned: 3000 s at 16 kHz hold 183 MiB, however small the result (bound it with
  /// max_seconds, or a clip).
  std::optional<MelOptions> mel;
  /// A file whose header claims more is a DataError naming it, before anything is decoded.
  double max_seconds = 3600;
};

/// What a sound file's header says, read without decoding.
struct FERRY_API AudioInfo {
  std::int64_t frames = 0;  ///< per channel
  int sample_rate = 0;
  int channels = 0;
};

/// The header of a WAV, FLAC, Ogg Vorbis/Opus or MP3 file held in memory (libsndfile, read from
/// memory). Any thread may call it. `name` starts the messages. A file whose header gives no
/// length (a FLAC written to a pipe), or only a guess (an MP3 without a Xing, Info or VBRI
/// header), is decoded once to count its frames, up to `max_seconds` of them (a dataset passes
/// its options' max_seconds). Such a count costs a decode of the whole file, or of max_seconds
/// of it: a small file may claim hours at a high rate (1 MB of constant FLAC subframes decodes
/// to 3600 s of 8 channels at 655 kHz, a minute of CPU). AudioFolder counts each file once and
/// keeps the frames (or the refusal) for its later length() and read() calls; this function,
/// decode_audio() and shard members count again at every call.
/// \throws DataError "<name>: <reason>" for bytes that are not a sound file libsndfile reads
/// (unknown, corrupt, truncated header), one with no frames, an Ogg stream without its last page
/// (truncated), an MP3 without a Xing header that decodes to libsndfile's guess (VBR: its
/// length is unknown), or a count past max_seconds.
FERRY_API AudioInfo audio_info(std::span<const std::byte> encoded, std::string_view name,
                               double max_seconds = AudioOptions{}.max_seconds);
/// audio_info() of a file, opened without blocking (regular files only); only its header is
/// read. `name` starts the messages; empty: the file's path.
FERRY_API AudioInfo audio_file_info(const std::filesystem::path& file, std::string_view name = {},
                                    double max_seconds = AudioOptions{}.max_seconds);

/// Frames of the waveform a file of `info` gives under `options`: round(clip_seconds * rate)
/// with a clip, else round(frames * rate / info.sample_rate), ties away from zero, and at least
/// 1 (rate: options.sample_rate, or the file's when 0): a file of a frame or two resampled far
/// down still has a frame, as a file with none is refused. \throws ConfigError for options
/// audio_field() refuses; DataError naming `name` for a file longer than options.max_seconds.
FERRY_API std::int64_t audio_frames(const AudioInfo& info, const AudioOptions& options,
                                    std::string_view name = {});
/// Rows of the field a file of `info` gives: audio_frames(), or with options.mel the
/// spectrogram's frames, 1 + (L + 2 * (n_fft / 2) - n_fft) / hop with L = audio_frames() (integer
/// division, torchaudio's centered frames: 1 + L / hop for an even n_fft, one fewer for an odd
/// n_fft when hop divides L). \throws as audio_frames().
FERRY_API std::int64_t audio_length(const AudioInfo& info, const AudioOptions& options,
                                    std::string_view name = {});

/// The field a dataset declares for sound decoded under `options` with `channels` output
/// channels (options.channels, or the first file's count when that is 0): f32 [T] (one channel)
/// or [T, C], T = ferry::ragged without a clip; with mel, f32 [frames, n_mels].
/// \throws ConfigError naming the member for options decoding refuses (a negative rate or
/// clip, channels negative or over 256, a clip under one frame, mel with more than one channel, mel
/// members out of range, max_seconds not > 0).
FERRY_API FieldSpec audio_field(const AudioOptions& options, int channels,
                                std::string name = "audio");
/// Checks the options a dataset is opened with: as audio_field() does, and channels 0, 1 or 2.
/// \throws ConfigError naming the member.
FERRY_API void check_audio_options(const AudioOptions& options);

/// Decodes one sound file held in memory into `out`: exactly audio_length() rows of the field
/// (times the channels, or n_mels), f32, the waveform clipped to [-1, 1] (a float file's louder
/// samples, a resampler's overshoot). The file is resampled to options.sample_rate (libsoxr,
/// high quality), its channels mixed as options.channels says, and a clip is taken where
/// options.crop says (random from `seed`: pass SampleRef::seed()); only the frames the clip
/// needs are decoded (libsndfile seeks to them), and the file's last frame, so that a file cut
/// short is a DataError whatever the clip. Memory: the clip returned plus fixed buffers,
/// whatever the file's length (with mel, the clip's waveform too: see AudioOptions::mel). Any
/// thread may call it.
/// \throws ConfigError for bad options or an `out` of another size; DataError "<name>: <reason>"
/// for a file audio_info() refuses, one longer than max_seconds, or one that fails or ends early
/// while decoding (corrupt, truncated).
FERRY_API void decode_audio(std::span<const std::byte> encoded, const AudioOptions& options,
                            std::uint64_t seed, std::span<float> out, std::string_view name);
/// decode_audio() of a file, read through its descriptor (only the parts needed). `name` starts
/// the messages; empty: the file's path.
FERRY_API void decode_audio_file(const std::filesystem::path& file, const AudioOptions& options,
                                 std::uint64_t seed, std::span<float> out,
                                 std::string_view name = {});
/// audio_info() and decode_audio() of the `size` bytes at `offset` of the open descriptor `fd`
/// (a member of a shard), read in place (pread, only the parts needed), never copied whole into
/// memory. The same errors as theirs.
FERRY_API AudioInfo audio_info_at(int fd, std::int64_t offset, std::int64_t size,
                                  std::string_view name,
                                  double max_seconds = AudioOptions{}.max_seconds);
FERRY_API void decode_audio_at(int fd, std::int64_t offset, std::int64_t size,
                               const AudioOptions& options, std::uint64_t seed,
                               std::span<float> out, std::string_view name);

/// Sound files in class folders: root/<class>/<file>, classes sorted by name, files with
/// extensions .wav, .flac, .ogg, .opus or .mp3 in any case (others are ignored). Fields "audio"
/// (see audio_field()) and "label" i64 [] (the class's position). A bad file's DataError is
/// raised for its sample (from length() or read()), never by open().
class FERRY_API AudioFolder final : public Dataset {
 public:
  /// Lists the folder. With sample_rate or channels 0, the first file whose header reads gives
  /// the rate or count every file must have. \throws DataError when root is missing, not a
  /// folder, or holds no sound files (or, with a 0 above, none whose header reads);
  /// ConfigError naming the member for bad options.
  static std::shared_ptr<AudioFolder> open(const std::filesystem::path& root,
                                           AudioOptions options = {});

  std::size_t size() const override { return files_.size(); }
  std::vector<FieldSpec> fields() const override;
  /// Decodes one file (see decode_audio_file()). \throws DataError naming the file (as
  /// decode_audio() does, and for a rate or channel count other than the first file's under a
  /// 0 option); ConfigError for an index >= size().
  void read(std::size_t index, SampleRef out) const override;
  /// Rows of the "audio" field of sample `index` (ragged without a clip), from the file's
  /// header, without decoding; kept after the first answer. \throws as read() does for a file
  /// whose header does not read.
  std::int64_t length(std::size_t index, std::size_t field) const override;

  /// Class names, sorted; label i is classes()[i].
  const std::vector<std::string>& classes() const noexcept { return classes_; }
  /// Sample i's file and label. \throws ConfigError for i >= size().
  const std::filesystem::path& path(std::size_t i) const;
  std::int64_t label(std::size_t i) const;
  /// The options, with a 0 sample_rate or channels replaced by the first file's.
  const AudioOptions& options() const noexcept { return options_; }

 private:
  AudioFolder() = default;
  AudioInfo header(std::size_t index, const std::string& name) const;
  AudioInfo checked_info(std::size_t index, const std::string& name) const;
  AudioOptions options_;
  bool keep_rate_ = false, keep_channels_ = false;
  std::vector<std::string> classes_;
  std::vector<std::filesystem::path> files_;
  std::vector<std::int64_t> labels_;
  std::unique_ptr<std::atomic<std::int64_t>[]> lengths_;  // -1: not asked yet
  std::shared_ptr<detail::audio::FrameCounts> counts_;    // files whose frames were counted
};

}  // namespace ferry
