#pragma once

// What the audio sources share: a libsndfile handle over a file's descriptor or over memory
// (audio_source.cpp), the decode into a clip (audio_decode.cpp) and the log-mel spectrogram
// (audio_mel.cpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/audio.hpp"

struct sf_private_tag;  // <sndfile.h>'s SNDFILE
struct SF_INFO;

namespace ferry::detail::audio {

/// The bytes libsndfile reads: a regular file through its descriptor (pread), or memory.
struct ByteSource {
  int fd = -1;                       ///< >= 0: read from this descriptor (not owned)
  std::span<const std::byte> bytes;  ///< else these
  std::int64_t size = 0;             ///< the file's or the span's size
  std::int64_t position = 0;         ///< where the next read starts
  std::int64_t base = 0;             ///< with fd: where the file's bytes start (a shard member)
};

/// What counting a file's frames found (a file whose header gives no length is decoded whole
/// to count them), kept per file by a dataset so that each file is counted once: the frames, or
/// the DataError's message. Any thread may use it.
class FrameCounts {
 public:
  explicit FrameCounts(std::size_t files);
  ~FrameCounts();
  FrameCounts(const FrameCounts&) = delete;
  FrameCounts& operator=(const FrameCounts&) = delete;
  /// > 0: the frames counted; 0: not counted yet; -1: the count failed with error(file).
  std::int64_t frames(std::size_t file) const;
  std::string error(std::size_t file) const;
  void remember(std::size_t file, std::int64_t frames);
  void remember_error(std::size_t file, std::string message);
  /// Whether the file's last frame decoded when it was `size` bytes (SoundFile::check_end()).
  bool end_decoded(std::size_t file, std::int64_t size) const;
  void remember_end(std::size_t file, std::int64_t size);
  /// Whether the file's container passed its checks (ogg_problem()) when it was `size` bytes.
  /// nothing when not checked at that size; else whether libsndfile's seeks are off in it.
  std::optional<bool> container_checked(std::size_t file, std::int64_t size) const;
  void remember_container(std::size_t file, std::int64_t size, bool seek_unsafe);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Where a SoundFile finds and keeps its count: a dataset's FrameCounts and the file's index.
struct CountMemo {
  FrameCounts* counts = nullptr;
  std::size_t file = 0;
};

/// An open libsndfile handle over a ByteSource (which must outlive it). Move-less, one thread.
class SoundFile {
 public:
  /// Opens and reads the header. A file whose header gives no length (a FLAC written to a
  /// pipe), or only a guess of it (an MP3 without a Xing, Info or VBRI header), is decoded once
  /// to count its frames, at most `max_seconds` of them. \throws DataError "<name>: <why>" when
  /// libsndfile does not read it (unknown format, corrupt or truncated header), an Ogg stream
  /// without its last page (truncated), one with no frames, or a count past max_seconds.
  /// With `memo`, a count already made for the file is taken from it (its frames, or its
  /// DataError again) and a new one is kept there.
  SoundFile(ByteSource& source, std::string_view name, double max_seconds, CountMemo memo = {});
  SoundFile(const SoundFile&) = delete;
  SoundFile& operator=(const SoundFile&) = delete;
  ~SoundFile();

  const AudioInfo& info() const noexcept { return info_; }
  /// The next frame read() reads.
  std::int64_t position() const noexcept { return frame_; }
  /// Moves to frame `frame` (< info().frames): libsndfile's seek, from a few frames before for
  /// an MP3, or (a counted file) a decode forward from the start. \throws DataError naming the
  /// frame.
  void seek(std::int64_t frame);
  /// Reads up to `frames` frames, interleaved, into `out` (frames x channels floats in [-1, 1]);
  /// the frames read, 0 at the end. \throws DataError naming the frame for a decode failure.
  std::int64_t read(float* out, std::int64_t frames);
  /// Decodes the file's last frame, so that a read of part of it (a clip) still finds a file
  /// cut short or damaged at its end: one seek and one frame's decode, whatever the length; once
  /// a file, with a memo (while its size stays the same). \throws DataError "truncated or
  /// corrupt" naming the file when it does not decode.
  void check_end();

 private:
  void open(SF_INFO& sf);
  void count(double max_seconds);
  void rewind();
  std::string frames_said() const;

  ByteSource& source_;
  sf_private_tag* file_ = nullptr;
  AudioInfo info_;
  std::string_view name_;
  CountMemo memo_;
  std::int64_t frame_ = 0;        // the next frame read
  bool counted_ = false;          // info_.frames was counted by a decode, not read from the header
  bool seek_from_start_ = false;  // libsndfile's seeks are off: decode from the start instead
  bool mpeg_ = false;
  const int* wave_order_ = nullptr;  // Ogg's 3 to 8 channels: the Vorbis channel of each WAVE one
};

/// Reads `n` bytes at `offset` of the source (fewer at its end); leaves its position alone.
std::size_t read_at(ByteSource& source, std::int64_t offset, std::byte* out, std::size_t n);

/// Whether an MP3's first frame carries a Xing, Info or VBRI header: only then does mpg123 (and
/// so libsndfile) know its length (audio_container.cpp).
bool mp3_length_tag(ByteSource& source);

/// A RIFF or RF64 WAV whose data chunk's size (by its header) is more than the bytes the file
/// holds after it: the bytes said and found, or nothing when the file is whole (or not a WAV,
/// or written to a pipe, giving no size).
std::optional<std::pair<std::int64_t, std::int64_t>> wav_data_cut(ByteSource& source);

/// What is wrong with an Ogg file that libsndfile would read without a word: a first audio page
/// (or a header page) failing its checksum, a missing last page, a second stream (chained or
/// multiplexed), granule positions going back. The reason, or an empty string; `seek_unsafe`
/// says whether libsndfile's seeks in it land elsewhere (an Opus stream that starts late or
/// skips more than a packet, pages of more than a second): its clips are then read from the start.
std::string ogg_problem(ByteSource& source, bool& seek_unsafe);

/// Channels and rates a file may have (a dataset keeping them takes no more).
constexpr int kMaxChannels = 256;
constexpr int kMaxRate = 1 << 22;

/// check_audio_options() with channels up to `most_channels`: 2 for the options a dataset is
/// opened with, kMaxChannels for those it decodes with (a 0 replaced by the first file's count).
/// \throws ConfigError naming the member.
void check_options(const AudioOptions& options, int most_channels);

/// DataError "<name>: <what>".
[[noreturn]] void fail(std::string_view name, std::string_view what);

/// Checks `info` against options.max_seconds. \throws DataError naming the file.
void check_duration(const AudioInfo& info, const AudioOptions& options, std::string_view name);

/// The waveform's frames for a file of `info`: the clip's, else the whole resampled length.
std::int64_t wave_frames(const AudioInfo& info, const AudioOptions& options);

/// Values in one row of the field: the output channels, or n_mels.
std::int64_t row_values(const AudioInfo& info, const AudioOptions& options);

/// Spectrogram frames of a waveform of `frames` samples (torchaudio's centered frames).
std::int64_t mel_frames(std::int64_t frames, const MelOptions& mel);

/// Decodes the open `file` into `out` under `options` (already checked): audio_length() rows of
/// the field. \throws DataError naming the file (one whose header gives another size than
/// `out` has "changed").
void decode(SoundFile& file, const AudioOptions& options, std::uint64_t seed, std::span<float> out,
            std::string_view name);

/// The log-mel spectrogram of `wave` (mono, at `sample_rate`) into `out`, mel_frames(wave.size())
/// x n_mels floats, time first. Any thread may call it.
void log_mel(std::span<const float> wave, const MelOptions& mel, int sample_rate,
             std::span<float> out);

}  // namespace ferry::detail::audio
