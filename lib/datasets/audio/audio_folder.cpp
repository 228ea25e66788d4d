// AudioFolder: root/<class>/<file>, each sample one file decoded by decode() on the worker.

#include <algorithm>
#include <cctype>
#include <string>
#include <system_error>
#include <utility>

#include "datasets/audio/audio_internal.hpp"
#include "datasets/common/file_io.hpp"
#include "ferry/audio.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace fs = std::filesystem;

namespace {

constexpr const char* kAudioWho = "AudioFolder";

bool audio_hidden(const fs::path& p) {
  const std::string name = p.filename().native();
  return name.empty() || name.front() == '.';
}

bool audio_extension(const fs::path& p) {
  std::string ext = p.extension().native();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".wav" || ext == ".flac" || ext == ".ogg" || ext == ".opus" || ext == ".mp3";
}

// The entries of `dir` that pass `keep`, sorted by name.
template <class Keep>
std::vector<fs::path> audio_list_sorted(const fs::path& dir, Keep keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!audio_hidden(it->path()) && keep(*it)) out.push_back(it->path());
  }
  if (ec)
    throw DataError(std::string(kAudioWho) + ": " + dir.string() +
                    ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().native() < b.filename().native();
  });
  return out;
}

std::size_t audio_sample_index(std::size_t i, std::size_t size) {
  if (i >= size) {
    throw ConfigError(std::string(kAudioWho) + ": sample index " + std::to_string(i) +
                      " out of range (" + std::to_string(size) + " files)");
  }
  return i;
}

// "AudioFolder: <file>", built in a buffer the thread keeps.
const std::string& audio_label(const fs::path& file) {
  thread_local std::string name;
  name.assign(kAudioWho);
  name += ": ";
  name += file.native();
  return name;
}

}  // namespace

std::shared_ptr<AudioFolder> AudioFolder::open(const fs::path& root, AudioOptions options) {
  check_audio_options(options);
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (!fs::exists(status)) {
    throw DataError(std::string(kAudioWho) + ": " + root.string() + ": no such folder");
  }
  if (!fs::is_directory(status)) {
    throw DataError(std::string(kAudioWho) + ": " + root.string() + ": not a folder");
  }
  std::shared_ptr<AudioFolder> ds(new AudioFolder());
  const std::vector<fs::path> class_dirs =
      audio_list_sorted(root, [](const fs::directory_entry& e) {
        std::error_code ignored;
        return e.is_directory(ignored);
      });
  for (const fs::path& dir : class_dirs) {
    const auto label = static_cast<std::int64_t>(ds->classes_.size());
    ds->classes_.push_back(dir.filename().string());
    for (fs::path& file : audio_list_sorted(dir, [](const fs::directory_entry& e) {
           std::error_code ignored;
           return e.is_regular_file(ignored) && audio_extension(e.path());
         })) {
      ds->files_.push_back(std::move(file));
      ds->labels_.push_back(label);
    }
  }
  if (ds->files_.empty()) {
    throw DataError(std::string(kAudioWho) + ": " + root.string() +
                    ": no sound files (.wav, .flac, .ogg, .opus or .mp3 in class folders "
                    "root/<class>/)");
  }
  // A 0 rate or channel count: the first file whose header reads says what every file has.
  ds->keep_rate_ = options.sample_rate == 0;
  ds->keep_channels_ = options.channels == 0;
  ds->options_.max_seconds = options.max_seconds;
  ds->counts_ = std::make_shared<detail::audio::FrameCounts>(ds->files_.size());
  if (ds->keep_rate_ || ds->keep_channels_) {
    bool found = false;
    for (std::size_t i = 0; i < ds->files_.size(); ++i) {
      try {
        const AudioInfo info = ds->header(i, audio_label(ds->files_[i]));
        // A count or rate no dataset takes: that file's sample raises it when it is read.
        if ((ds->keep_channels_ && info.channels > detail::audio::kMaxChannels) ||
            (ds->keep_rate_ && info.sample_rate > detail::audio::kMaxRate)) {
          continue;
        }
        AudioOptions taken = options;
        if (ds->keep_rate_) taken.sample_rate = info.sample_rate;
        if (ds->keep_channels_) taken.channels = info.channels;
        // A rate the options cannot take (a clip under one frame, mel's f_min at or past its
        // Nyquist) is that file's fault, not the options': its sample raises a DataError (its
        // rate is not the one taken from a later file).
        detail::audio::check_options(taken, detail::audio::kMaxChannels);
        options = taken;
        found = true;
        break;
      } catch (const DataError&) {
        // That file's sample raises it when it is read.
      } catch (const ConfigError&) {
        // As above.
      }
    }
    if (!found) {
      throw DataError(std::string(kAudioWho) + ": " + root.string() +
                      ": no file whose header reads and whose rate and channels the options take "
                      "(a clip of at least one frame, mel's f_min below its Nyquist), to take the "
                      "sample rate or channels from");
    }
  }
  ds->options_ = options;
  ds->lengths_ = std::make_unique<std::atomic<std::int64_t>[]>(ds->files_.size());
  for (std::size_t i = 0; i < ds->files_.size(); ++i) ds->lengths_[i].store(-1);
  return ds;
}

std::vector<FieldSpec> AudioFolder::fields() const {
  return {audio_field(options_, options_.channels), {"label", DType::i64, {}}};
}

AudioInfo AudioFolder::header(std::size_t index, const std::string& name) const {
  const detail::OpenFile open(files_[index], {{}, name});
  detail::audio::ByteSource source{
      open.descriptor(), {}, static_cast<std::int64_t>(open.size()), 0};
  const detail::audio::SoundFile sound(source, name, options_.max_seconds, {counts_.get(), index});
  return sound.info();
}

AudioInfo AudioFolder::checked_info(std::size_t index, const std::string& name) const {
  const AudioInfo info = header(index, name);
  if (keep_rate_ && info.sample_rate != options_.sample_rate) {
    detail::audio::fail(name, std::to_string(info.sample_rate) + " Hz, not the first file's " +
                                  std::to_string(options_.sample_rate) +
                                  " Hz (sample_rate 0 keeps every file's rate, which must agree)");
  }
  if (keep_channels_ && info.channels != options_.channels) {
    detail::audio::fail(name, std::to_string(info.channels) + " channels, not the first file's " +
                                  std::to_string(options_.channels) +
                                  " (channels 0 keeps every file's, which must agree)");
  }
  return info;
}

std::int64_t AudioFolder::length(std::size_t index, std::size_t field) const {
  audio_sample_index(index, files_.size());
  if (field != 0 || options_.clip_seconds > 0) {
    throw ConfigError(std::string(kAudioWho) + ": field " + std::to_string(field) +
                      " is not ragged");
  }
  std::int64_t rows = lengths_[index].load(std::memory_order_relaxed);
  if (rows >= 0) return rows;
  const std::string name = audio_label(files_[index]);
  rows = audio_length(checked_info(index, name), options_, name);
  lengths_[index].store(rows, std::memory_order_relaxed);
  return rows;
}

void AudioFolder::read(std::size_t index, SampleRef out) const {
  const fs::path& file = files_[audio_sample_index(index, files_.size())];
  const std::string& name = audio_label(file);
  const detail::OpenFile open(file, {{}, name});
  detail::audio::ByteSource source{
      open.descriptor(), {}, static_cast<std::int64_t>(open.size()), 0};
  detail::audio::SoundFile sound(source, name, options_.max_seconds, {counts_.get(), index});
  const AudioInfo& info = sound.info();
  if ((keep_rate_ && info.sample_rate != options_.sample_rate) ||
      (keep_channels_ && info.channels != options_.channels)) {
    checked_info(index, name);  // throws the message
  }
  detail::audio::decode(sound, options_, out.seed(),
                        {out.as<float>(0), out.nbytes(0) / sizeof(float)}, name);
  *out.as<std::int64_t>(1) = labels_[index];
}

const fs::path& AudioFolder::path(std::size_t i) const {
  return files_[audio_sample_index(i, files_.size())];
}

std::int64_t AudioFolder::label(std::size_t i) const {
  return labels_[audio_sample_index(i, labels_.size())];
}

}  // namespace ferry
