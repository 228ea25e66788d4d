// AudioFolder and decode_audio(): values against sox (an independent decoder and resampler),
// clips and their crop rule, channels, the ragged field through a loader, and every fault.
// Fixtures are made by sox in a temporary folder (a few tenths of a second each).

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sndfile.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "source_dir.hpp"
#include "table_writer.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using ferry::AudioCrop;
using ferry::AudioFolder;
using ferry::AudioOptions;
using ferry::testing::expect_error;

namespace {

class AudioFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v sox >/dev/null 2>&1") != 0) GTEST_SKIP() << "sox is not installed";
    dir_ = fs::temp_directory_path() /
           ("ferry_audio_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs sox with `args` (paths relative to the folder).
  void sox(const std::string& args) const {
    const std::string cmd = "cd '" + dir_.string() + "' && sox " + args + " 2>/dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  // A sound file made by sox: `spec` is what follows `sox -n` up to the output name.
  fs::path synth(const std::string& name, const std::string& format, const std::string& effects) {
    fs::create_directories((dir_ / name).parent_path());
    sox("-R -D -n " + format + " " + name + " " + effects);  // no dither, the same file each run
    return dir_ / name;
  }
  // What sox decodes `name` to, as f32 (after `effects`: a rate, a channel count).
  std::vector<float> sox_values(const std::string& name, const std::string& out_format = "",
                                const std::string& effects = "") const {
    sox(name + " -t raw -e floating-point -b 32 " + out_format + " ref.raw " + effects);
    const std::string bytes = read("ref.raw");
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
    return v;
  }
  void write(const std::string& name, const std::string& bytes) const {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << bytes;
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ / name, std::ios::binary | std::ios::ate);
    std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
    in.seekg(0);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }
  fs::path dir_;
};

// decode_audio_file() of a whole file or clip, as the loader would ask it.
std::vector<float> decode(const fs::path& file, const AudioOptions& o, std::uint64_t seed = 0) {
  const ferry::AudioInfo info = ferry::audio_file_info(file);
  const int channels = o.channels > 0 ? o.channels : info.channels;
  std::vector<float> out(
      static_cast<std::size_t>(ferry::audio_length(info, o) * (o.mel ? o.mel->n_mels : channels)));
  ferry::decode_audio_file(file, o, seed, out, {});
  return out;
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b, std::size_t from = 0,
               std::size_t to = SIZE_MAX) {
  float m = 0;
  for (std::size_t i = from; i < std::min({a.size(), b.size(), to}); ++i) {
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

ferry::LoaderOptions cpu_options(int workers = 1) {
  ferry::LoaderOptions o;
  o.batch_size = 2;
  o.workers = workers;
  o.prefetch = 2;
  o.device = ferry::Device::cpu();
  o.pin_memory = false;
  o.autotune = false;
  return o;
}

AudioOptions keep_rate() {
  AudioOptions o;
  o.sample_rate = 0;
  return o;
}

}  // namespace

TEST_F(AudioFolderTest, PcmWavAndFlacAreSoxsValuesExactly) {
  synth("a/tone.wav", "-r 22050 -c 1 -b 16", "synth 0.3 sine 440 vol 0.5");
  synth("a/noise.flac", "-r 22050 -c 1 -b 24", "synth 0.2 whitenoise vol 0.3");
  synth("b/sweep.wav", "-r 22050 -c 1 -e floating-point -b 32", "synth 0.25 sine 100-3000");
  const auto ds = AudioFolder::open(dir_, keep_rate());
  ASSERT_EQ(ds->size(), 3U);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ds->fields()[0], (ferry::FieldSpec{"audio", ferry::DType::f32, {ferry::ragged}}));
  EXPECT_EQ(ds->options().sample_rate, 22050);
  const char* names[] = {"a/noise.flac", "a/tone.wav", "b/sweep.wav"};  // sorted
  for (std::size_t i = 0; i < 3; ++i) {
    const std::vector<float> want = sox_values(names[i]);
    EXPECT_EQ(ds->length(i, 0), static_cast<std::int64_t>(want.size())) << names[i];
    EXPECT_EQ(decode(ds->path(i), ds->options()), want) << names[i];
    EXPECT_EQ(ds->label(i), i < 2 ? 0 : 1);
  }
}

TEST_F(AudioFolderTest, ResamplingIsSoxsWithinTolerance) {
  // 44.1 kHz to 16 kHz and 8 kHz to 16 kHz, a tone well inside both passbands: libsoxr's high
  // quality against sox's `rate -h` (the same library, sox's own bandwidth of 95%, not 91.3%).
  synth("a/down.wav", "-r 44100 -c 1 -b 16", "synth 0.5 sine 1000 vol 0.5");
  synth("a/up.wav", "-r 8000 -c 1 -b 16", "synth 0.5 sine 440 vol 0.5");
  AudioOptions o;
  o.sample_rate = 16000;
  for (const char* name : {"a/down.wav", "a/up.wav"}) {
    const std::vector<float> want = sox_values(name, "", "rate -h 16000");
    const std::vector<float> got = decode(dir_ / name, o);
    EXPECT_EQ(got.size(), 8000U) << name;  // round(frames * 16000 / rate)
    EXPECT_NEAR(static_cast<double>(got.size()), static_cast<double>(want.size()), 1) << name;
    // The first and last 10 ms see each filter's edge differently.
    EXPECT_LT(max_diff(got, want, 160, got.size() - 160), 5e-6F) << name;  // 3.4e-7 here
  }
}

TEST_F(AudioFolderTest, AClipIsTheWholeDecodesFramesAndSeeksThere) {
  synth("a/long.wav", "-r 44100 -c 1 -b 16", "synth 3 sine 200-2000 vol 0.5");
  synth("a/same.wav", "-r 16000 -c 1 -b 16", "synth 3 sine 300-900 vol 0.5");
  AudioOptions whole;
  const std::vector<float> resampled = decode(dir_ / "a/long.wav", whole);
  const std::vector<float> same = decode(dir_ / "a/same.wav", whole);
  ASSERT_EQ(resampled.size(), 48000U);
  AudioOptions clip;
  clip.clip_seconds = 0.5;
  clip.crop = AudioCrop::center;  // start = (48000 - 8000) / 2
  const std::vector<float> c = decode(dir_ / "a/long.wav", clip);
  ASSERT_EQ(c.size(), 8000U);
  EXPECT_LT(max_diff(c, std::vector<float>(resampled.begin() + 20000, resampled.end())), 2e-6F);
  const std::vector<float> s = decode(dir_ / "a/same.wav", clip);
  EXPECT_EQ(s, std::vector<float>(same.begin() + 20000, same.begin() + 28000));
  clip.crop = AudioCrop::start;
  EXPECT_EQ(decode(dir_ / "a/same.wav", clip),
            std::vector<float>(same.begin(), same.begin() + 8000));
  // random: a start in [0, 40000] drawn from the seed; the same seed, the same clip.
  clip.crop = AudioCrop::random;
  std::vector<std::size_t> starts;
  for (std::uint64_t seed : {1U, 2U, 3U}) {
    const std::vector<float> r = decode(dir_ / "a/same.wav", clip, seed);
    EXPECT_EQ(r, decode(dir_ / "a/same.wav", clip, seed));
    const auto at = std::search(same.begin(), same.end(), r.begin(), r.end());
    ASSERT_NE(at, same.end());
    starts.push_back(static_cast<std::size_t>(at - same.begin()));
    const std::vector<float> rr = decode(dir_ / "a/long.wav", clip, seed);
    EXPECT_LT(max_diff(rr, std::vector<float>(
                               resampled.begin() + static_cast<std::ptrdiff_t>(starts.back()),
                               resampled.end())),
              1e-5F);
  }
  EXPECT_NE(starts[0], starts[1]);
  EXPECT_NE(starts[1], starts[2]);
  // A clip longer than the file: the file, then zeros.
  clip.clip_seconds = 4;
  const std::vector<float> padded = decode(dir_ / "a/same.wav", clip, 7);
  ASSERT_EQ(padded.size(), 64000U);
  EXPECT_EQ(std::vector<float>(padded.begin(), padded.begin() + 48000), same);
  EXPECT_EQ(std::count(padded.begin() + 48000, padded.end(), 0.0F), 16000);
}

TEST_F(AudioFolderTest, ChannelsAreAveragedDuplicatedOrKept) {
  synth("a/stereo.wav", "-r 16000 -c 2 -b 16", "synth 0.2 sine 300 sine 700 vol 0.4");
  synth("a/mono.wav", "-r 16000 -c 1 -b 16", "synth 0.2 sine 500 vol 0.4");
  const std::vector<float> lr = sox_values("a/stereo.wav");
  const std::vector<float> m = sox_values("a/mono.wav");
  AudioOptions o;
  const std::vector<float> avg = decode(dir_ / "a/stereo.wav", o);
  ASSERT_EQ(avg.size(), lr.size() / 2);
  for (std::size_t i = 0; i < avg.size(); ++i) {
    ASSERT_FLOAT_EQ(avg[i], (lr[2 * i] + lr[2 * i + 1]) * 0.5F) << i;
  }
  o.channels = 2;
  EXPECT_EQ(decode(dir_ / "a/stereo.wav", o), lr);
  const std::vector<float> dup = decode(dir_ / "a/mono.wav", o);
  ASSERT_EQ(dup.size(), 2 * m.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    ASSERT_EQ(dup[2 * i], m[i]);
    ASSERT_EQ(dup[2 * i + 1], m[i]);
  }
  // channels 0 keeps the first file's count (mono.wav sorts first): stereo.wav is then refused.
  o.channels = 0;
  const auto ds = AudioFolder::open(dir_, o);
  EXPECT_EQ(ds->options().channels, 1);
  expect_error<ferry::DataError>([&] { ds->length(1, 0); }, {"AudioFolder", "stereo.wav",
                                                             "2 channels, not the first file's 1"});
  o.clip_seconds = 0.1;
  ferry::Loader loader(AudioFolder::open(dir_, o), cpu_options());
  expect_error<ferry::DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
      },
      {"AudioFolder", "stereo.wav", "2 channels, not the first file's 1", "sample 1"});
  o.channels = 2;
  o.clip_seconds = 0.1;
  EXPECT_EQ(AudioFolder::open(dir_, o)->fields()[0],
            (ferry::FieldSpec{"audio", ferry::DType::f32, {1600, 2}}));
}

TEST_F(AudioFolderTest, RaggedWholeFilesThroughALoaderAndTheSameClipsWhateverTheWorkers) {
  // Lengths from the headers (no decode), resampled: round(frames * 16000 / 22050).
  synth("a/x.wav", "-r 22050 -c 1 -b 16", "synth 0.1 sine 300");
  synth("a/y.flac", "-r 16000 -c 1 -b 16", "synth 0.35 sine 600");
  synth("b/z.wav", "-r 8000 -c 2 -b 16", "synth 0.2 sine 900");
  const auto ds = AudioFolder::open(dir_);
  const std::vector<std::int64_t> want = {1600, 5600, 3200};  // 2205, 5600, 1600 frames
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(ds->length(i, 0), want[i]);
  ferry::LoaderOptions lo = cpu_options();
  lo.batch_size = 3;
  const ferry::Loader loader(ds, lo);
  ferry::Loader l(ds, lo);
  std::size_t batches = 0;
  for (const ferry::Batch& b : l.epoch(0)) {
    ++batches;
    const ferry::Tensor& audio = b["audio"];
    EXPECT_EQ(audio.shape(), (std::vector<std::int64_t>{3, 5600}));
    const ferry::Tensor& lengths = b.lengths("audio");
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(lengths.data<std::int64_t>()[i], want[i]);
      const std::vector<float> one = decode(ds->path(i), ds->options());
      const float* row = audio.data<float>() + i * 5600;
      EXPECT_TRUE(std::equal(one.begin(), one.end(), row)) << i;
      EXPECT_EQ(std::count(row + want[i], row + 5600, 0.0F), 5600 - want[i]);
      EXPECT_EQ(b["label"].data<std::int64_t>()[i], i < 2 ? 0 : 1);
    }
  }
  EXPECT_EQ(batches, 1U);
  // max_tokens: batches cut by the headers' lengths (1600, 5600, 3200) under a budget of 7200.
  lo.max_tokens = 7200;
  lo.ragged = ferry::RaggedBatch::pack;
  ferry::Loader budget(ds, lo);
  std::vector<std::vector<std::uint64_t>> cut;
  for (const ferry::Batch& b : budget.epoch(0)) {
    cut.emplace_back(b.indices().begin(), b.indices().end());
    EXPECT_LE(b["audio"].shape()[0], 7200);
  }
  EXPECT_EQ(cut, (std::vector<std::vector<std::uint64_t>>{{0, 1}, {2}}));
  // Random clips, shuffled: the same batches with 1 worker and with 3.
  AudioOptions clip;
  clip.clip_seconds = 0.05;
  const auto clips = AudioFolder::open(dir_, clip);
  auto run = [&](int workers) {
    ferry::LoaderOptions co = cpu_options(workers);
    co.shuffle = true;
    co.seed = 5;
    co.batch_size = 1;
    ferry::Loader cl(clips, co);
    std::vector<float> all;
    for (int e = 0; e < 2; ++e) {
      for (const ferry::Batch& b : cl.epoch(static_cast<std::uint64_t>(e))) {
        const float* p = b["audio"].data<float>();
        all.insert(all.end(), p, p + 800);
      }
    }
    return all;
  };
  const std::vector<float> one = run(1);
  EXPECT_EQ(one.size(), 6U * 800);
  EXPECT_EQ(one, run(3));
}

TEST_F(AudioFolderTest, BadFilesAreDataErrorsNamingThemRaisedForTheirSample) {
  synth("a/good.wav", "-r 16000 -c 1 -b 16", "synth 0.1 sine 300");
  synth("a/long.flac", "-r 8000 -c 1 -b 16", "synth 3 sine 300");
  write("a/empty.wav", "");
  write("a/junk.ogg", std::string(3000, 'x'));
  const std::string flac = read("a/long.flac");
  write("a/truncated.flac", flac.substr(0, flac.size() / 2));
  const std::string wav = read("a/good.wav");
  write("a/cut.wav", wav.substr(0, 30));  // inside the header
  AudioOptions o;
  o.max_seconds = 2;
  const auto ds = AudioFolder::open(dir_, o);  // no file is opened here
  ASSERT_EQ(ds->size(), 6U);
  // cut, empty, good, junk, long, truncated
  expect_error<ferry::DataError>([&] { ds->length(0, 0); }, {"AudioFolder", "cut.wav", "header"});
  expect_error<ferry::DataError>([&] { ds->length(1, 0); }, {"AudioFolder", "empty.wav", "empty"});
  EXPECT_EQ(ds->length(2, 0), 1600);
  expect_error<ferry::DataError>([&] { ds->length(3, 0); }, {"AudioFolder", "junk.ogg"});
  expect_error<ferry::DataError>([&] { ds->length(4, 0); },
                                 {"AudioFolder", "long.flac", "3.0", "max_seconds (2.0"});
  o.max_seconds = 3600;
  const auto all = AudioFolder::open(dir_, o);
  // The truncated FLAC's header claims 3 s: the decode ends early.
  EXPECT_EQ(all->length(5, 0), 48000);
  expect_error<ferry::DataError>(
      [&] { decode(all->path(5), all->options()); },
      {"truncated.flac", "truncated or corrupt", "at frame", "of the 24000 its header gives"});
  // Through a loader: the sample's index and the file; skip leaves out exactly the bad ones.
  ferry::LoaderOptions lo = cpu_options();
  lo.batch_size = 1;
  lo.on_error = ferry::ErrorPolicy::skip;
  o.clip_seconds = 0.05;
  const auto clips = AudioFolder::open(dir_, o);
  ferry::Loader loader(clips, lo);
  std::vector<std::uint64_t> read;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (const std::uint64_t i : b.indices()) read.push_back(i);
  }
  EXPECT_EQ(loader.stats().skipped, 4U);
  EXPECT_EQ(read, (std::vector<std::uint64_t>{2, 4}));
  lo.on_error = ferry::ErrorPolicy::raise;
  ferry::Loader strict(clips, lo);
  expect_error<ferry::DataError>(
      [&] {
        for (const ferry::Batch& b : strict.epoch(0)) static_cast<void>(b);
      },
      {"cut.wav", "sample 0"});
}

TEST_F(AudioFolderTest, OpenRefusesBadOptionsAndFolders) {
  expect_error<ferry::DataError>([&] { AudioFolder::open(dir_ / "nope"); }, {"no such folder"});
  expect_error<ferry::DataError>([&] { AudioFolder::open(dir_); }, {"no sound files"});
  synth("a/x.wav", "-r 16000 -c 1 -b 16", "synth 0.1 sine 300");
  AudioOptions o;
  o.channels = -1;
  expect_error<ferry::ConfigError>([&] { AudioFolder::open(dir_, o); }, {"channels -1"});
  o = {};
  o.clip_seconds = -1;
  expect_error<ferry::ConfigError>([&] { AudioFolder::open(dir_, o); }, {"clip_seconds"});
  o = {};
  o.mel = ferry::MelOptions{};
  o.channels = 2;
  expect_error<ferry::ConfigError>([&] { AudioFolder::open(dir_, o); }, {"mel needs channels 1"});
  o.channels = 1;
  o.mel->hop = 0;
  expect_error<ferry::ConfigError>([&] { AudioFolder::open(dir_, o); }, {"mel.hop"});
  // A 0 rate takes the first file's.
  o = keep_rate();
  o.clip_seconds = 0.5;
  EXPECT_EQ(AudioFolder::open(dir_, o)->fields()[0].shape, (std::vector<std::int64_t>{8000}));
}

TEST_F(AudioFolderTest, MelSpectrogramShapeAndItsPeakAtTheTone) {
  synth("a/tone.wav", "-r 16000 -c 1 -b 16", "synth 0.5 sine 1000 vol 0.5");
  AudioOptions o;
  o.mel = ferry::MelOptions{};
  const auto ds = AudioFolder::open(dir_, o);
  EXPECT_EQ(ds->fields()[0], (ferry::FieldSpec{"audio", ferry::DType::f32, {ferry::ragged, 80}}));
  EXPECT_EQ(ds->length(0, 0), 51);  // 1 + 8000 / 160
  const std::vector<float> mel = decode(ds->path(0), ds->options());
  ASSERT_EQ(mel.size(), 51U * 80);
  // 1 kHz is mel 1000 on the htk scale; the 80 filters' centers are 2840 (k + 1) / 81 mel:
  // 1000 lies between filters 27 (981) and 28 (1016).
  const float* frame = mel.data() + 25 * 80;
  const auto peak = std::max_element(frame, frame + 80) - frame;
  EXPECT_TRUE(peak == 27 || peak == 28) << peak;
  EXPECT_GT(frame[peak], frame[10] + 10);  // log power: far above a filter away from the tone
  o.clip_seconds = 0.1;
  EXPECT_EQ(AudioFolder::open(dir_, o)->fields()[0].shape, (std::vector<std::int64_t>{11, 80}));
}

TEST_F(AudioFolderTest, AClipDecodesOnlyItsPartOfTheFile) {
  // A FLAC whose bytes from 20% to 30% are garbage: a whole decode fails there; a clip after it
  // seeks past it, and one before it stops before it.
  synth("a/long.flac", "-r 8000 -c 1 -b 16", "synth 3 sine 300-900 vol 0.5");
  const std::vector<float> intact = decode(dir_ / "a/long.flac", keep_rate());
  std::string bytes = read("a/long.flac");
  for (std::size_t i = bytes.size() / 5; i < bytes.size() * 3 / 10; ++i)
    bytes[i] = static_cast<char>(i * 7);
  write("a/bad.flac", bytes);
  expect_error<ferry::DataError>([&] { decode(dir_ / "a/bad.flac", keep_rate()); },
                                 {"bad.flac", "truncated or corrupt"});
  AudioOptions clip = keep_rate();
  clip.clip_seconds = 0.5;
  clip.crop = AudioCrop::center;  // frames 10000..14000 of 24000
  EXPECT_EQ(decode(dir_ / "a/bad.flac", clip),
            std::vector<float>(intact.begin() + 10000, intact.begin() + 14000));
  clip.crop = AudioCrop::start;
  clip.clip_seconds = 0.25;
  EXPECT_EQ(decode(dir_ / "a/bad.flac", clip),
            std::vector<float>(intact.begin(), intact.begin() + 2000));
}

TEST_F(AudioFolderTest, OggVorbisOpusAndMp3Decode) {
  // Vorbis written by sox, decoded by sox as the reference; Opus and MP3 written by libsndfile
  // (sox has neither), checked against the signal they were made from.
  synth("a/v.ogg", "-r 16000 -c 1 -t ogg", "synth 0.5 sine 440 vol 0.5");
  const std::vector<float> vorbis = sox_values("a/v.ogg");
  // sox's Vorbis reader gives 16-bit samples: one step is 2^-15.
  EXPECT_LT(max_diff(decode(dir_ / "a/v.ogg", keep_rate()), vorbis), 4e-5F);
  std::vector<float> tone(16000);  // 1 s at 16 kHz (Opus: 48 kHz inside)
  for (std::size_t i = 0; i < tone.size(); ++i) {
    tone[i] = 0.5F * static_cast<float>(
                         std::sin(2 * 3.14159265358979 * 440 * static_cast<double>(i) / 16000));
  }
  for (const auto& [name, format] :
       {std::pair<const char*, int>{"a/o.opus", SF_FORMAT_OGG | SF_FORMAT_OPUS},
        {"a/m.mp3", SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III}}) {
    SF_INFO info{};
    info.samplerate = 16000;
    info.channels = 1;
    info.format = format;
    SNDFILE* f = sf_open((dir_ / name).c_str(), SFM_WRITE, &info);
    if (f == nullptr) {
      ADD_FAILURE() << name << ": libsndfile cannot write it: " << sf_strerror(nullptr);
      continue;
    }
    sf_writef_float(f, tone.data(), static_cast<sf_count_t>(tone.size()));
    sf_close(f);
    AudioOptions o;  // 16 kHz
    const std::vector<float> got = decode(dir_ / name, o);
    EXPECT_NEAR(static_cast<double>(got.size()), 16000.0, 1200) << name;
    // A lossy codec's tone: the same energy, and (after its delay) mostly the same samples.
    double energy = 0;
    for (std::size_t i = 2000; i < 14000; ++i) energy += static_cast<double>(got[i]) * got[i];
    EXPECT_NEAR(energy / 12000, 0.125, 0.01) << name;
  }
  const auto ds = AudioFolder::open(dir_);
  EXPECT_EQ(ds->size(), 3U);  // m.mp3, o.opus, v.ogg
}

TEST_F(AudioFolderTest, WebDatasetMembersDecodeAsAudioFolderFiles) {
  synth("c/k1.wav", "-r 22050 -c 1 -b 16", "synth 0.3 sine 300-900 vol 0.5");
  synth("c/k2.wav", "-r 16000 -c 2 -b 16", "synth 0.2 sine 500 sine 700 vol 0.5");
  synth("c/k3.wav", "-r 8000 -c 1 -b 16", "synth 0.4 pinknoise vol 0.5");
  write("c/k1.cls", "0");
  write("c/k2.cls", "1");
  write("c/k3.cls", "2");
  ASSERT_EQ(std::system(("cd '" + (dir_ / "c").string() +
                         "' && tar -cf ../s.tar k1.cls k1.wav k2.cls k2.wav k3.cls k3.wav")
                            .c_str()),
            0);
  ferry::WebDatasetOptions wo;
  wo.index_files = false;
  wo.audio.clip_seconds = 0.1;
  const auto shards = ferry::WebDataset::open({dir_ / "s.tar"}, wo);
  EXPECT_EQ(shards->fields()[1], (ferry::FieldSpec{"wav", ferry::DType::f32, {1600}}));
  AudioOptions ao;
  ao.clip_seconds = 0.1;
  // The folder holds the .cls files too, but only sound files are samples: k1, k2, k3.
  const auto folder = AudioFolder::open(dir_, ao);
  ASSERT_EQ(folder->size(), 3U);
  ferry::LoaderOptions lo = cpu_options(2);
  lo.shuffle = true;
  lo.seed = 3;
  lo.batch_size = 3;
  ferry::Loader a(shards, lo);
  ferry::Loader b(folder, lo);
  auto ea = a.epoch(1);
  auto eb = b.epoch(1);
  const ferry::Batch& x = *ea.begin();
  const ferry::Batch& y = *eb.begin();
  EXPECT_EQ(std::vector<std::uint64_t>(x.indices().begin(), x.indices().end()),
            std::vector<std::uint64_t>(y.indices().begin(), y.indices().end()));
  EXPECT_TRUE(std::equal(x["wav"].data<float>(), x["wav"].data<float>() + 3 * 1600,
                         y["audio"].data<float>()));
  // Whole members: ragged, their lengths from their headers.
  wo.audio.clip_seconds = 0;
  const auto whole = ferry::WebDataset::open({dir_ / "s.tar"}, wo);
  EXPECT_EQ(whole->max_length(1), -1);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(whole->length(i, 1), (std::vector<std::int64_t>{4800, 3200, 6400})[i]);
  ferry::LoaderOptions po = cpu_options();
  po.batch_size = 3;
  po.ragged = ferry::RaggedBatch::pack;
  ferry::Loader p(whole, po);
  for (const ferry::Batch& batch : p.epoch(0)) {
    const std::vector<float> k2 = decode(dir_ / "c/k2.wav", AudioOptions{});
    EXPECT_TRUE(std::equal(k2.begin(), k2.end(), batch["wav"].data<float>() + 4800));
  }
  // A member that is not a sound file: DataError naming the shard and the member.
  write("c/k2.wav", "not a sound file at all");
  ASSERT_EQ(std::system(("cd '" + (dir_ / "c").string() +
                         "' && tar -cf ../t.tar k1.cls k1.wav k2.cls k2.wav")
                            .c_str()),
            0);
  const auto bad = ferry::WebDataset::open({dir_ / "t.tar"}, wo);
  expect_error<ferry::DataError>([&] { bad->length(1, 1); },
                                 {"WebDataset", "t.tar", "member 'k2.wav'", "not a sound file"});
  wo.audio.sample_rate = 0;
  expect_error<ferry::ConfigError>([&] { ferry::WebDataset::open({dir_ / "t.tar"}, wo); },
                                   {"audio.sample_rate and audio.channels"});
}

TEST_F(AudioFolderTest, TableAudioColumnsDecodeAsAudioFolderFiles) {
  // Hugging Face's Audio struct{bytes, path}, the same bytes as plain binary, in Parquet (written
  // by parquet-wasm) and Arrow IPC (apache-arrow): tests/table/write_audio.js.
  synth("x/a.wav", "-r 16000 -c 1 -b 16", "synth 0.3 sine 300 vol 0.5");
  synth("x/b.flac", "-r 22050 -c 2 -b 16", "synth 0.2 sine 500 vol 0.5");
  synth("x/c.wav", "-r 8000 -c 1 -b 16", "synth 0.25 sine 800 vol 0.5");
  const std::string skip = ferry::testing::run_table_writer(
      FERRY_SOURCE_DIR, "write_audio.js", {"apache-arrow", "parquet-wasm"},
      {(dir_ / "t").string(), (dir_ / "x").string()});
  if (!skip.empty()) GTEST_SKIP() << skip;
  AudioOptions ao;
  ao.clip_seconds = 0.1;
  const auto folder = AudioFolder::open(dir_, ao);
  ASSERT_EQ(folder->size(), 3U);
  ferry::LoaderOptions lo = cpu_options(2);
  lo.shuffle = true;
  lo.seed = 11;
  lo.batch_size = 3;
  const auto batch_of = [&](const std::shared_ptr<const ferry::Dataset>& ds,
                            const std::string& field) {
    ferry::Loader loader(ds, lo);
    auto epoch = loader.epoch(2);
    const ferry::Batch& b = *epoch.begin();
    const float* p = b[field].data<float>();
    return std::vector<float>(p, p + 3 * 1600);
  };
  const std::vector<float> want = batch_of(folder, "audio");
  ferry::TableOptions named;
  named.columns = {"audio", "label"};
  named.audio = {"audio"};
  named.audio_options = ao;
  ferry::TableOptions hf;  // the features say `audio` is an Audio
  hf.columns = {"audio", "label"};
  hf.audio_options = ao;
  ferry::TableOptions raw;
  raw.columns = {"raw"};
  raw.audio = {"raw"};
  raw.audio_options = ao;
  const fs::path t = dir_ / "t";
  for (const auto& [ds, field] :
       std::vector<std::pair<std::shared_ptr<const ferry::Dataset>, std::string>>{
           {ferry::ParquetDataset::open({t / "audio.parquet"}, named), "audio"},
           {ferry::ParquetDataset::open({t / "audio_hf.parquet"}, hf), "audio"},
           {ferry::ParquetDataset::open({t / "audio.parquet"}, raw), "raw"},
           {ferry::ArrowDataset::open({t / "audio.arrow"}, named), "audio"},
           {ferry::ArrowDataset::open({t / "audio_hf.arrow"}, hf), "audio"},
           {ferry::ArrowDataset::open({t / "audio.arrow"}, raw), "raw"}}) {
    EXPECT_EQ(ds->fields()[0], (ferry::FieldSpec{field, ferry::DType::f32, {1600}}));
    EXPECT_EQ(batch_of(ds, field), want) << field;
  }
  // Whole files are not read from tables yet; a column that is not bytes is refused.
  named.audio_options.clip_seconds = 0;
  hf.audio_options.clip_seconds = 0;
  expect_error<ferry::ConfigError>(
      [&] { ferry::ParquetDataset::open({t / "audio.parquet"}, named); }, {"clip_seconds > 0"});
  expect_error<ferry::ConfigError>([&] { ferry::ArrowDataset::open({t / "audio_hf.arrow"}, hf); },
                                   {"clip_seconds > 0"});
  raw.columns = {"label"};
  raw.audio = {"label"};
  raw.audio_options = ao;
  expect_error<ferry::ConfigError>([&] { ferry::ParquetDataset::open({t / "audio.parquet"}, raw); },
                                   {"not an audio column"});
}

namespace {

// The page at `at` of an Ogg file with its checksum made anew (RFC 3533: CRC-32, polynomial
// 0x04c11db7, not reflected, over the page with its checksum field 0).
void sign_ogg_page(std::string& bytes, std::size_t at) {
  const std::size_t segments = static_cast<unsigned char>(bytes[at + 26]);
  std::size_t size = 27 + segments;
  for (std::size_t s = 0; s < segments; ++s) size += static_cast<unsigned char>(bytes[at + 27 + s]);
  std::memset(bytes.data() + at + 22, 0, 4);
  std::uint32_t crc = 0;
  for (std::size_t i = at; i < at + size; ++i) {
    crc ^= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 24U;
    for (int b = 0; b < 8; ++b)
      crc = (crc & 0x80000000U) != 0 ? (crc << 1U) ^ 0x04c11db7U : crc << 1U;
  }
  for (unsigned b = 0; b < 4; ++b) bytes[at + 22 + b] = static_cast<char>(crc >> (8U * b));
}

// The byte offsets of an Ogg file's pages, in order.
std::vector<std::size_t> ogg_pages(const std::string& bytes) {
  std::vector<std::size_t> at;
  std::size_t p = 0;
  while (p + 27 <= bytes.size() && bytes.compare(p, 4, "OggS") == 0) {
    at.push_back(p);
    const auto segments = static_cast<unsigned char>(bytes[p + 26]);
    std::size_t body = 0;
    for (std::size_t k = 0; k < segments; ++k)
      body += static_cast<unsigned char>(bytes[p + 27 + k]);
    p += 27 + segments + body;
  }
  return at;
}

}  // namespace

TEST_F(AudioFolderTest, FilesCutShortAreDataErrorsWhateverTheClip) {
  synth("a/whole.wav", "-r 16000 -c 1 -b 16", "synth 2 sine 300");
  synth("a/whole.ogg", "-r 16000 -c 1 -t ogg", "synth 2 whitenoise vol 0.5");
  const std::string wav = read("a/whole.wav");
  write("b/half.wav", wav.substr(0, 44 + 32000));  // the data chunk still says 64000 bytes
  write("b/less3.wav", wav.substr(0, wav.size() - 3));
  const std::string ogg = read("a/whole.ogg");
  const std::vector<std::size_t> pages = ogg_pages(ogg);
  ASSERT_GT(pages.size(), 4U);
  write("b/nolast.ogg", ogg.substr(0, pages.back()));
  write("b/halfpages.ogg", ogg.substr(0, pages[pages.size() / 2 + 1]));
  AudioOptions whole;
  AudioOptions clip;
  clip.clip_seconds = 0.5;
  clip.crop = AudioCrop::start;
  EXPECT_EQ(decode(dir_ / "a/whole.wav", clip).size(), 8000U);
  EXPECT_EQ(decode(dir_ / "a/whole.ogg", clip).size(), 8000U);
  for (const char* name : {"b/half.wav", "b/less3.wav", "b/nolast.ogg", "b/halfpages.ogg"}) {
    const fs::path file = dir_ / name;
    expect_error<ferry::DataError>([&] { ferry::audio_file_info(file); }, {name, "truncated"});
    expect_error<ferry::DataError>([&] { decode(file, clip); }, {name, "truncated"});
    // From memory, as a shard's member or a table's row is decoded.
    const std::string bytes = read(name);
    const std::span<const std::byte> mem(reinterpret_cast<const std::byte*>(bytes.data()),
                                         bytes.size());
    expect_error<ferry::DataError>([&] { ferry::audio_info(mem, name); }, {name, "truncated"});
    std::vector<float> out(8000);
    expect_error<ferry::DataError>([&] { ferry::decode_audio(mem, clip, 0, out, name); },
                                   {name, "truncated"});
  }
  // A dataset: each bad file's sample, from length() (and read()).
  const auto ds = AudioFolder::open(dir_, whole);
  ASSERT_EQ(ds->size(), 6U);  // a/whole.ogg, a/whole.wav, b/half, halfpages, less3, nolast
  EXPECT_EQ(ds->length(0, 0), 32000);
  EXPECT_EQ(ds->length(1, 0), 32000);
  for (std::size_t i = 2; i < 6; ++i) {
    expect_error<ferry::DataError>([&] { ds->length(i, 0); },
                                   {"AudioFolder", ds->path(i).filename().string(), "truncated"});
  }
  // A WAV written to a pipe gives no data size (sox writes 0x7ffff000): read to its end.
  sox("-R -D -n -b 16 -r 16000 -c 1 -t wav - synth 0.5 sine 300 > pipe.wav");
  EXPECT_EQ(ferry::audio_file_info(dir_ / "pipe.wav").frames, 8000);
}

namespace {

// A 16-bit mono WAV of `frames` zero frames at `rate` Hz (any rate, which sox may refuse).
std::string pcm_wav(std::uint32_t rate, std::uint32_t frames) {
  std::string h = "RIFF";
  const auto le = [&h](std::uint32_t v, int n) {
    for (int i = 0; i < n; ++i) h += static_cast<char>((v >> (8 * i)) & 0xff);
  };
  le(36 + frames * 2, 4);
  h += "WAVEfmt ";
  le(16, 4);
  le(1, 2);  // PCM
  le(1, 2);  // mono
  le(rate, 4);
  le(rate * 2, 4);
  le(2, 2);
  le(16, 2);
  h += "data";
  le(frames * 2, 4);
  return h + std::string(std::size_t{frames} * 2, '\0');
}

}  // namespace

TEST_F(AudioFolderTest, AClipIsTheSameWhateverItsThreadReadBeforeAndAFileCutLaterIsFound) {
  // A worker keeps its resampler between clips of the same rates (cleared), and a dataset
  // remembers a file whose last frame decoded while its size stays the same. Neither may change
  // what a clip holds, nor let a file cut after its first clip read as whole.
  synth("a/x.flac", "-r 44100 -c 1 -b 16", "synth 3 sine 440 sine 1234");
  synth("a/y.flac", "-r 44100 -c 1 -b 16", "synth 2 whitenoise vol 0.5");
  synth("a/z.wav", "-r 22050 -c 2 -b 16", "synth 2 pinknoise vol 0.5");
  AudioOptions clip;
  clip.clip_seconds = 1;
  clip.crop = AudioCrop::random;
  const auto on_new_thread = [&](const std::vector<std::string>& before) {
    std::vector<float> out;
    std::thread([&] {
      for (const std::string& name : before) (void)decode(dir_ / name, clip, 11);
      out = decode(dir_ / "a/x.flac", clip, 5);
    }).join();
    return out;
  };
  const std::vector<float> fresh = on_new_thread({});
  ASSERT_EQ(fresh.size(), 16000U);
  EXPECT_EQ(on_new_thread({"a/y.flac"}), fresh);              // the same rates: cleared
  EXPECT_EQ(on_new_thread({"a/z.wav", "a/y.flac"}), fresh);   // another rate between
  EXPECT_EQ(on_new_thread({"a/x.flac", "a/x.flac"}), fresh);  // itself, another clip of it
  // The dataset: clips at the start of x.flac read; cut to its first half, the next clip there
  // (whose frames are all still in the file) is a DataError, as it was before any clip read.
  clip.crop = AudioCrop::start;
  const auto ds = AudioFolder::open(dir_, clip);
  ASSERT_EQ(ds->path(0).filename(), "x.flac");
  for (int k = 0; k < 3; ++k) EXPECT_EQ(ferry::read_sample(*ds, 0).size(), 2U);
  const std::string flac = read("a/x.flac");
  write("a/x.flac", flac.substr(0, flac.size() / 2));
  for (int k = 0; k < 2; ++k) {
    expect_error<ferry::DataError>([&] { (void)ferry::read_sample(*ds, 0); },
                                   {"x.flac", "truncated or corrupt: its last frame"});
  }
}

TEST_F(AudioFolderTest, AFilesOwnRateTheOptionsCannotTakeIsItsSamplesDataError) {
  write("a/three.wav", pcm_wav(3, 30));       // 10 s at 3 Hz: a 0.1 s clip is no frame
  write("b/fine.wav", pcm_wav(16000, 4000));  // first in no order, but the one that fits
  AudioOptions o = keep_rate();
  o.clip_seconds = 0.1;
  const auto ds = AudioFolder::open(dir_, o);
  EXPECT_EQ(ds->options().sample_rate, 16000);
  ferry::LoaderOptions lo = cpu_options();
  lo.batch_size = 1;
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader loader(ds, lo);
  std::vector<std::uint64_t> read;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (const std::uint64_t i : b.indices()) read.push_back(i);
  }
  EXPECT_EQ(read, std::vector<std::uint64_t>{1});
  // mel's f_min past the first file's Nyquist (4000 Hz: 2000).
  write("a/three.wav", pcm_wav(4000, 4000));
  o.clip_seconds = 0;
  o.mel = ferry::MelOptions{};
  o.mel->f_min = 3000;
  const auto mel = AudioFolder::open(dir_, o);
  EXPECT_EQ(mel->options().sample_rate, 16000);
  expect_error<ferry::DataError>([&] { mel->length(0, 0); }, {"three.wav", "4000 Hz"});
  EXPECT_EQ(mel->length(1, 0), 1 + 4000 / 160);
  // No file the options take: a DataError saying so.
  fs::remove(dir_ / "b/fine.wav");
  expect_error<ferry::DataError>([&] { AudioFolder::open(dir_, o); }, {"no file", "options take"});
}

TEST_F(AudioFolderTest, ABadWholeFileFailsFromNextNamingItsSampleNotFromTheLoader) {
  synth("a/0.wav", "-r 16000 -c 1 -b 16", "synth 0.1 sine 300");
  write("a/1.ogg", std::string(3000, 'x'));
  synth("a/2.wav", "-r 16000 -c 1 -b 16", "synth 0.2 sine 300");
  const auto ds = AudioFolder::open(dir_);  // ragged
  for (const std::size_t max_tokens : {std::size_t{0}, std::size_t{4000}}) {
    ferry::LoaderOptions lo = cpu_options();
    lo.batch_size = 3;
    lo.max_tokens = max_tokens;
    std::unique_ptr<ferry::Loader> loader;
    ASSERT_NO_THROW(loader = std::make_unique<ferry::Loader>(ds, lo));
    expect_error<ferry::DataError>(
        [&] {
          for (const ferry::Batch& b : loader->epoch(0)) static_cast<void>(b);
        },
        {"Loader: sample 1 (batch", "epoch 0)", "1.ogg"});
    lo.on_error = ferry::ErrorPolicy::skip;
    ferry::Loader skipping(ds, lo);
    std::vector<std::uint64_t> read;
    for (const ferry::Batch& b : skipping.epoch(0)) {
      for (const std::uint64_t i : b.indices()) read.push_back(i);
    }
    EXPECT_EQ(read, (std::vector<std::uint64_t>{0, 2}));
    EXPECT_EQ(skipping.stats().skipped, 1U);
  }
}

TEST_F(AudioFolderTest, AFileWithoutItsLengthIsCountedOnceAndItsRefusalKept) {
  // A FLAC whose STREAMINFO gives no total (0, as a FLAC written to a pipe) is decoded to count
  // its frames: once per file, however many times its sample is asked for.
  synth("src/long.flac", "-r 8000 -c 1 -b 16", "synth 3 sine 300");
  synth("src/short.flac", "-r 8000 -c 1 -b 16", "synth 0.5 sine 300");
  const auto no_total = [this](const std::string& name) {
    std::string bytes = read(name);
    bytes[8 + 13] = static_cast<char>(bytes[8 + 13] & 0xf0);  // STREAMINFO's 36-bit total
    std::fill(bytes.begin() + 8 + 14, bytes.begin() + 8 + 18, '\0');
    return bytes;
  };
  write("a/x.flac", no_total("src/long.flac"));
  AudioOptions o;
  o.sample_rate = 8000;
  o.max_seconds = 2;
  const auto ds = AudioFolder::open(dir_ / "a" / "..", o);  // classes a and src
  ASSERT_EQ(ds->path(0).filename(), "x.flac");
  expect_error<ferry::DataError>([&] { ds->length(0, 0); }, {"x.flac", "more than max_seconds"});
  // The refusal is kept: the file is not decoded again (a shorter one in its place still fails).
  write("a/x.flac", no_total("src/short.flac"));
  expect_error<ferry::DataError>([&] { ds->length(0, 0); }, {"x.flac", "more than max_seconds"});
  const auto fresh = AudioFolder::open(dir_, o);
  EXPECT_EQ(fresh->length(0, 0), 4000);
}

namespace {

// The process's peak resident memory since the last reset_peak(), in bytes (0: unknown).
bool reset_peak() { return static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5"); }
std::int64_t peak_bytes() {
  return static_cast<std::int64_t>(ferry::testing::status_bytes("VmHWM:"));
}

}  // namespace

TEST_F(AudioFolderTest, AShardsSoundMemberIsDecodedInPlaceNotReadWhole) {
  {
    const std::string big = pcm_wav(16000, 32U << 20 >> 1);  // 32 MiB of samples: 1049 s
    write("c/k1.wav", big);
  }
  ASSERT_EQ(std::system(("cd '" + (dir_ / "c").string() + "' && tar -cf ../s.tar k1.wav").c_str()),
            0);
  fs::remove(dir_ / "c/k1.wav");
  ferry::WebDatasetOptions wo;
  wo.index_files = false;
  wo.audio.clip_seconds = 1;
  const auto shards = ferry::WebDataset::open({dir_ / "s.tar"}, wo);
  const auto sample = ferry::read_sample(*shards, 0, 0, 0);  // the first read's own allocations
  if (!reset_peak() || peak_bytes() <= 0) GTEST_SKIP() << "no /proc/self/clear_refs or VmHWM";
  const std::int64_t before = peak_bytes();
  for (std::uint64_t seed = 0; seed < 3; ++seed) {
    const auto again = ferry::read_sample(*shards, 0, seed, 0);
    ASSERT_EQ(again.at(0).second.nbytes(), 16000 * sizeof(float));
  }
  EXPECT_LT(peak_bytes() - before, std::int64_t{12} << 20);  // the member: 32 MiB
}

TEST_F(AudioFolderTest, OggPagesThatLibsndfileLetsThroughAreDataErrors) {
  // A first audio page failing its checksum: libogg drops it and libsndfile takes the stream as
  // starting after it (a 2 s file read as shorter and whole). Two streams one after another
  // (chained): libsndfile read the first alone. Granule positions going back: libsndfile seeks
  // by them. Each is a DataError naming the file, the page and why.
  synth("a/v.ogg", "-r 16000 -c 1 -t ogg", "synth 2 whitenoise vol 0.5");
  synth("a/w.ogg", "-r 16000 -c 1 -t ogg", "synth 1 sine 300");
  const std::string v = read("a/v.ogg");
  const std::vector<std::size_t> pages = ogg_pages(v);
  ASSERT_GT(pages.size(), 3U);
  // The first page whose granule position is set: the first of the audio.
  std::size_t audio = 0;
  for (std::size_t k = 0; k < pages.size() && audio == 0; ++k) {
    std::uint64_t granule = 0;
    std::memcpy(&granule, v.data() + pages[k] + 6, 8);
    if (granule != 0) audio = k;
  }
  ASSERT_GT(audio, 0U);
  std::string bad = v;
  const std::size_t at = pages[audio] + 27 + 255;  // inside its body, past its lacing values
  ASSERT_LT(at + 8, pages[audio + 1]);
  for (std::size_t i = at; i < at + 8; ++i) bad[i] = static_cast<char>(~bad[i]);
  write("b/crc.ogg", bad);
  write("b/chained.ogg", v + read("a/w.ogg"));
  // A page near the end whose granule position goes back (libsndfile seeks by them), its
  // checksum made anew.
  std::string back = v;
  const std::uint64_t one = 1;
  std::memcpy(back.data() + pages[pages.size() - 2] + 6, &one, 8);
  sign_ogg_page(back, pages[pages.size() - 2]);
  write("b/back.ogg", back);
  // A page in the middle failing its checksum, and one missing: libogg drops the first, and a
  // decode goes on after either hole (clips across or past it held later samples).
  const std::size_t mid = audio + (pages.size() - audio) / 2;
  ASSERT_GT(mid, audio);
  ASSERT_LT(mid + 1, pages.size());
  std::string damaged = v;
  damaged[pages[mid + 1] - 10] = static_cast<char>(~damaged[pages[mid + 1] - 10]);
  write("b/mid.ogg", damaged);
  write("b/hole.ogg", v.substr(0, pages[mid]) + v.substr(pages[mid + 1]));
  for (const auto& [name, why] :
       {std::pair<const char*, std::string>{
            "b/crc.ogg", "corrupt: Ogg page " + std::to_string(audio) + " (at byte " +
                             std::to_string(pages[audio]) + ") fails its checksum"},
        {"b/chained.ogg", "Ogg page " + std::to_string(pages.size()) + " (at byte " +
                              std::to_string(v.size()) +
                              ") begins a second stream: a chained Ogg file"},
        {"b/back.ogg", "corrupt: Ogg page " + std::to_string(pages.size() - 2) + " (at byte " +
                           std::to_string(pages[pages.size() - 2]) +
                           ") goes back in time (granule position 1 after "},
        {"b/mid.ogg", "corrupt: Ogg page " + std::to_string(mid) + " (at byte " +
                          std::to_string(pages[mid]) + ") fails its checksum"},
        {"b/hole.ogg", "corrupt: Ogg page " + std::to_string(mid) + " (at byte " +
                           std::to_string(pages[mid]) + ") is page " + std::to_string(mid + 1) +
                           " of its stream, after page " + std::to_string(mid - 1) +
                           ": pages are missing"}}) {
    expect_error<ferry::DataError>([&] { ferry::audio_file_info(dir_ / name); }, {name, why});
  }
  EXPECT_EQ(ferry::audio_file_info(dir_ / "a/v.ogg").frames, 32000);
}

TEST_F(AudioFolderTest, OnlyTheContainersItChecksAreReadAndRf64IsCheckedAsWav) {
  if (std::system("command -v ffmpeg >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  const auto ffmpeg = [&](const std::string& args) {
    const std::string cmd = "cd '" + dir_.string() + "' && ffmpeg -loglevel error -y -f lavfi " +
                            "-i sine=frequency=440:duration=2:sample_rate=16000 " + args;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  ffmpeg("-rf64 always a.wav");  // RF64: its data size in the ds64 chunk
  synth("b.aiff", "-r 16000 -c 1 -b 16", "synth 1 sine 300");
  synth("c.au", "-r 16000 -c 1 -b 16", "synth 1 sine 300");
  EXPECT_EQ(ferry::audio_file_info(dir_ / "a.wav").frames, 32000);
  const std::string rf64 = read("a.wav");
  ASSERT_EQ(rf64.compare(0, 4, "RF64"), 0);
  write("cut.wav", rf64.substr(0, rf64.size() / 2));
  expect_error<ferry::DataError>(
      [&] { ferry::audio_file_info(dir_ / "cut.wav"); },
      {"cut.wav", "truncated: its data chunk's header gives 64000 bytes"});
  // A ds64 data size past any file (2^62 and more) is a claim all the same.
  ASSERT_EQ(rf64.compare(12, 4, "ds64"), 0);
  for (const std::uint64_t claim : {std::uint64_t{1} << 62, ~std::uint64_t{0} >> 1}) {
    std::string forged = rf64;
    std::memcpy(forged.data() + 28, &claim, 8);
    write("claim.wav", forged);
    expect_error<ferry::DataError>([&] { ferry::audio_file_info(dir_ / "claim.wav"); },
                                   {"claim.wav", "truncated: its data chunk's header gives"});
  }
  expect_error<ferry::DataError>([&] { ferry::audio_file_info(dir_ / "b.aiff"); },
                                 {"b.aiff", "a file of AIFF", "ferry reads WAV, FLAC, Ogg"});
  expect_error<ferry::DataError>([&] { ferry::audio_file_info(dir_ / "c.au"); },
                                 {"c.au", "ferry reads WAV, FLAC, Ogg Vorbis/Opus and MP3"});
}

TEST_F(AudioFolderTest, TheCApiRefusesWhatIsNoFileOrNoOption) {
  const fs::path file = synth("a.wav", "-r 16000 -c 1 -b 16", "synth 1 sine 300");
  const std::string bytes = read("a.wav");
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const auto size = static_cast<std::int64_t>(bytes.size());
  EXPECT_EQ(ferry::audio_info_at(fd, 0, size, "m").frames, 16000);
  // A failed open()'s -1 read memory at address 0 before.
  for (const int bad : {-1, -2}) {
    expect_error<ferry::DataError>([&] { ferry::audio_info_at(bad, 0, size, "m"); },
                                   {"m: not an open file (descriptor " + std::to_string(bad)});
  }
  for (const auto& [offset, n] :
       {std::pair<std::int64_t, std::int64_t>{0, size + 1}, {size, 1}, {-1, 10}, {0, -1}}) {
    expect_error<ferry::DataError>(
        [&] { ferry::audio_info_at(fd, offset, n, "m"); },
        {"m: bytes ", "are not within the file's " + std::to_string(bytes.size())});
  }
  std::vector<float> out(16000);
  expect_error<ferry::DataError>(
      [&] { ferry::decode_audio_at(-1, 0, size, AudioOptions{}, 0, out, "m"); },
      {"not an open file"});
  ::close(fd);
  for (const double most : {-1.0, 0.0, std::nan("")}) {
    expect_error<ferry::ConfigError>([&] { ferry::audio_file_info(file, {}, most); },
                                     {"max_seconds must be > 0"});
  }
  AudioOptions crop;
  crop.crop = static_cast<AudioCrop>(7);
  expect_error<ferry::ConfigError>([&] { ferry::check_audio_options(crop); },
                                   {"crop 7 is not an AudioCrop"});
  AudioOptions mel;
  mel.mel = ferry::MelOptions{};
  for (const double f : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    mel.mel->f_max = f;
    expect_error<ferry::ConfigError>([&] { ferry::check_audio_options(mel); },
                                     {"mel.f_min and f_max must be finite"});
  }
}

namespace {

// An Ogg page's checksum (polynomial 0x04c11db7, the field itself taken as zero), for pages
// the tests rewrite.
std::uint32_t ogg_checksum(const std::string& page) {
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < page.size(); ++i) {
    crc ^= static_cast<std::uint32_t>(i >= 22 && i < 26 ? 0 : static_cast<unsigned char>(page[i]))
           << 24;
    for (int k = 0; k < 8; ++k)
      crc = (crc & 0x80000000U) != 0 ? (crc << 1) ^ 0x04c11db7U : crc << 1;
  }
  return crc;
}

}  // namespace

TEST_F(AudioFolderTest, AnOpusStreamThatStartsLateIsCutWhereTheWholeDecodeIs) {
  // Every granule position 3 s later (a stream cut from a longer one, checksums valid): the
  // whole file decodes the same, but libsndfile's seeks land off by the stream's pre-skip, so
  // such a stream's clips are decoded from its start.
  if (std::system("command -v ffmpeg >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  const std::string cmd = "cd '" + dir_.string() +
                          "' && ffmpeg -loglevel error -y -f lavfi -i "
                          "anoisesrc=duration=4:sample_rate=48000:seed=3 -c:a libopus o.opus";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::string late = read("o.opus");
  for (const std::size_t p : ogg_pages(late)) {
    std::uint64_t granule = 0;
    std::memcpy(&granule, late.data() + p + 6, 8);
    if (granule == 0 || granule == ~std::uint64_t{0}) continue;
    granule += 3 * 48000;
    std::memcpy(late.data() + p + 6, &granule, 8);
    const auto segments = static_cast<unsigned char>(late[p + 26]);
    std::size_t body = 0;
    for (std::size_t k = 0; k < segments; ++k) body += static_cast<unsigned char>(late[p + 27 + k]);
    const std::uint32_t crc = ogg_checksum(late.substr(p, 27 + segments + body));
    std::memcpy(late.data() + p + 22, &crc, 4);
  }
  write("a/late.opus", late);
  AudioOptions whole_options;
  const std::vector<float> whole = decode(dir_ / "a/late.opus", whole_options);
  ASSERT_EQ(whole.size(), 64000U);
  AudioOptions clip;
  clip.clip_seconds = 1;
  for (const AudioCrop crop : {AudioCrop::start, AudioCrop::center}) {
    clip.crop = crop;
    const std::vector<float> part = decode(dir_ / "a/late.opus", clip);
    const std::size_t first = crop == AudioCrop::start ? 0 : (whole.size() - 16000) / 2;
    EXPECT_LE(max_diff(part, std::vector<float>(
                                 whole.begin() + static_cast<std::ptrdiff_t>(first),
                                 whole.begin() + static_cast<std::ptrdiff_t>(first) + 16000)),
              2e-6F)
        << static_cast<int>(crop);
  }
}

TEST_F(AudioFolderTest, OggStreamsLibsndfileSeeksBadlyInAreCutWhereTheWholeDecodeIs) {
  // Legal files whose clips libsndfile's seeks placed elsewhere: Vorbis in pages of 10 s (an
  // encoder's page_duration raised: clips near the end wrong), Opus skipping 3840 samples first
  // (its pre-skip: the start clip wrong). Their clips are decoded from the start instead.
  if (std::system("command -v ffmpeg >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  fs::create_directories(dir_ / "a");
  const auto ffmpeg = [&](const std::string& args) {
    const std::string cmd =
        "cd '" + dir_.string() + "' && ffmpeg -loglevel error -y -f lavfi " + args;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  };
  ffmpeg(
      "-i 'aevalsrc=sin(2*PI*(200+46*t)*t):s=48000:d=30' -c:a libvorbis -page_duration 10000000 "
      "a/long_pages.ogg");
  ffmpeg("-i anoisesrc=duration=4:sample_rate=48000:seed=3 -c:a libopus a/skip.opus");
  std::string opus = read("a/skip.opus");
  const std::size_t head = 27 + static_cast<unsigned char>(opus[26]);  // page 0's packet
  ASSERT_EQ(opus.compare(head, 8, "OpusHead"), 0);
  opus[head + 10] = static_cast<char>(3840 & 0xff);
  opus[head + 11] = static_cast<char>(3840 >> 8);
  const std::vector<std::size_t> pages = ogg_pages(opus);
  ASSERT_GT(pages.size(), 1U);
  const std::uint32_t crc = ogg_checksum(opus.substr(0, pages[1]));
  std::memcpy(opus.data() + 22, &crc, 4);
  write("a/skip.opus", opus);
  for (const char* name : {"a/long_pages.ogg", "a/skip.opus"}) {
    const std::vector<float> whole = decode(dir_ / name, AudioOptions{});
    ASSERT_GT(whole.size(), 32000U) << name;
    AudioOptions clip;
    clip.clip_seconds = 1;
    for (const AudioCrop crop : {AudioCrop::start, AudioCrop::center, AudioCrop::random}) {
      clip.crop = crop;
      for (std::uint64_t seed = 0; seed < (crop == AudioCrop::random ? 12U : 1U); ++seed) {
        const std::vector<float> part = decode(dir_ / name, clip, seed);
        const auto slice = [&](std::size_t at) {
          return max_diff(
              part, std::vector<float>(whole.begin() + static_cast<std::ptrdiff_t>(at),
                                       whole.begin() + static_cast<std::ptrdiff_t>(at) + 16000));
        };
        float best = 1e9F;
        if (crop == AudioCrop::random) {  // where its seed puts it: the slice it matches best
          for (std::size_t at = 0; at + 16000 <= whole.size(); ++at) {
            if (std::abs(whole[at] - part[0]) <= 1e-5F) best = std::min(best, slice(at));
          }
        } else {
          best = slice(crop == AudioCrop::start ? 0 : (whole.size() - 16000) / 2);
        }
        EXPECT_LE(best, 2e-6F) << name << " crop " << static_cast<int>(crop) << " seed " << seed;
      }
    }
  }
}
