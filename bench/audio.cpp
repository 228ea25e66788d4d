// bench/audio: sound files through ferry (AudioFolder + Loader) and the limit they are measured
// against, libsndfile's decode and libsoxr's resample of the same clips with no loader. Run by
// bench/audio_compare, which makes the files and runs the torchaudio anchor beside it
// (BENCHMARKS.md, "Audio").
//
//   audio ferry --dir DIR --clips N [--clip-seconds S] [--workers W] [--batch B] [--seed S]
//               [--mel 0|1] [--rss-every K]
//   audio limit --dir DIR --clips N [--clip-seconds S] [--threads W] [--seed S]
//               [--check-end 0|1]
//
// ferry: AudioFolder::open(DIR) with sample_rate 16000, channels 1, clip_seconds S (0: whole
// files, a ragged field padded in each batch), crop random and, with --mel 1 (the default),
// MelOptions{n_fft 400, hop 160, n_mels 80}; epochs 0, 1, ... of a shuffled order (seed S) through
// a Loader (W workers, batches of B, device cpu, autotune off) until N samples have come, the
// consumer reading one value of each batch. With --rss-every K it prints the resident set every
// K samples to stderr.
//
// limit: N clips drawn as the anchor draws them (a file uniform among the files, with a clip its
// first frame uniform in [0, frames - clip]), on W threads taking the next clip in turn: for
// each, sf_open, sf_seek to the first frame, sf_readf_float of the clip's frames (the whole file
// with S 0) in chunks of 4096 frames, mixed to mono and streamed through libsoxr to 16 kHz at
// the quality ferry uses (SOXR_HQ). No loader, no batches, no log-mel: the decode and resample
// ferry's workers must do. --check-end 1 also seeks to each file's last frame and decodes it,
// as ferry does to find a truncated file. The files' lengths are read before the timer.
//
// Each prints one JSON line: {"samples": N, "seconds": S, "samples_per_s": R, "peak_rss_mib": M}.

#include <sndfile.h>
#include <soxr.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr int kRate = 16000;

struct Options {
  std::string mode;
  fs::path dir;
  std::size_t clips = 100, batch = 8, rss_every = 0;
  int workers = 2;
  bool mel = true, check_end = false;
  double clip_seconds = 1.0;
  std::uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument("usage: audio ferry|limit --dir DIR --clips N ...");
  Options o;
  o.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--dir") {
      o.dir = value;
    } else if (flag == "--clip-seconds") {
      o.clip_seconds = std::stod(value);
    } else if (flag == "--clips") {
      o.clips = std::stoull(value);
    } else if (flag == "--workers" || flag == "--threads") {
      o.workers = std::stoi(value);
    } else if (flag == "--batch") {
      o.batch = std::stoull(value);
    } else if (flag == "--seed") {
      o.seed = std::stoull(value);
    } else if (flag == "--mel") {
      o.mel = value != "0";
    } else if (flag == "--check-end") {
      o.check_end = value != "0";
    } else if (flag == "--rss-every") {
      o.rss_every = std::stoull(value);
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.dir.empty()) throw std::invalid_argument("--dir is required");
  return o;
}

using ferry::bench::peak_rss_mib;
using ferry::bench::rss_mib;
using ferry::bench::seconds_since;

void report(std::size_t samples, double seconds) {
  std::printf(
      "{\"samples\": %zu, \"seconds\": %.4f, \"samples_per_s\": %.3f, \"peak_rss_mib\": %.1f}\n",
      samples, seconds, static_cast<double>(samples) / seconds, peak_rss_mib());
}

int run_ferry(const Options& o) {
  ferry::AudioOptions a;
  a.sample_rate = kRate;
  a.channels = 1;
  a.clip_seconds = o.clip_seconds;
  a.crop = ferry::AudioCrop::random;
  if (o.mel) a.mel = ferry::MelOptions{.n_fft = 400, .hop = 160, .n_mels = 80};
  const auto ds = ferry::AudioFolder::open(o.dir, a);
  ferry::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.workers = o.workers;
  lo.device = ferry::Device::cpu();
  lo.autotune = false;
  ferry::Loader loader(ds, lo);
  std::size_t samples = 0, next_rss = o.rss_every;
  double sum = 0;
  const auto start = Clock::now();
  for (std::size_t epoch = 0; samples < o.clips; ++epoch) {
    for (const ferry::Batch& batch : loader.epoch(epoch)) {
      sum += batch["audio"].data<float>()[0];
      samples += batch.size();
      if (o.rss_every != 0 && samples >= next_rss) {
        std::fprintf(stderr, "rss %zu %.1f\n", samples, rss_mib());
        next_rss += o.rss_every;
      }
      if (samples >= o.clips) break;
    }
  }
  const double seconds = seconds_since(start);
  if (sum == 0.5) std::fputc(' ', stderr);  // keeps the reads
  report(samples, seconds);
  return 0;
}

// ---- the limit -------------------------------------------------------------------------------

struct File {
  std::string path;
  sf_count_t frames = 0;
  int rate = 0, channels = 0;
};

struct SfCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

std::vector<File> list_files(const fs::path& dir) {
  std::vector<File> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".flac" && ext != ".wav")) continue;
    SF_INFO info{};
    const std::unique_ptr<SNDFILE, SfCloser> f(sf_open(e.path().c_str(), SFM_READ, &info));
    if (!f) throw std::runtime_error("cannot open " + e.path().string());
    files.push_back({e.path().string(), info.frames, info.samplerate, info.channels});
  }
  if (files.empty()) throw std::runtime_error("no sound files under " + dir.string());
  std::sort(files.begin(), files.end(),
            [](const File& a, const File& b) { return a.path < b.path; });
  return files;
}

struct SoxrDeleter {
  void operator()(soxr* s) const { soxr_delete(s); }
};

// One clip: decoded from its first frame in chunks of 4096 frames, each mixed to mono and fed
// to a libsoxr resampler (SOXR_HQ) to 16 kHz, into `out` (the way libsoxr streams best: a
// one-shot resample of a whole file's buffer was 1.5-2x slower here).
void decode_clip(const File& file, sf_count_t first, sf_count_t frames, bool check_end,
                 std::vector<float>& in, std::vector<float>& mono, std::vector<float>& out) {
  constexpr sf_count_t kChunk = 4096;
  SF_INFO info{};
  const std::unique_ptr<SNDFILE, SfCloser> f(sf_open(file.path.c_str(), SFM_READ, &info));
  if (!f || sf_seek(f.get(), first, SEEK_SET) != first) {
    throw std::runtime_error("cannot seek in " + file.path);
  }
  const auto ch = static_cast<std::size_t>(info.channels);
  in.resize(static_cast<std::size_t>(kChunk) * ch);
  mono.resize(static_cast<std::size_t>(kChunk));
  out.resize(static_cast<std::size_t>(
      std::llround(static_cast<double>(frames) * kRate / static_cast<double>(info.samplerate))));
  soxr_error_t error = nullptr;
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_HQ, 0);
  const std::unique_ptr<soxr, SoxrDeleter> resampler(
      soxr_create(info.samplerate, kRate, 1, &error, nullptr, &quality, nullptr));
  if (error != nullptr) throw std::runtime_error(std::string("soxr: ") + error);
  std::size_t written = 0;
  sf_count_t left = frames;
  while (written < out.size()) {
    const sf_count_t got =
        left > 0 ? sf_readf_float(f.get(), in.data(), std::min(kChunk, left)) : 0;
    left -= got;
    for (std::size_t i = 0; i < static_cast<std::size_t>(got); ++i) {
      float s = 0;
      for (std::size_t c = 0; c < ch; ++c) s += in[i * ch + c];
      mono[i] = s / static_cast<float>(ch);
    }
    std::size_t used = 0, done = 0;
    error = soxr_process(resampler.get(), got > 0 ? mono.data() : nullptr,
                         static_cast<std::size_t>(got), &used, out.data() + written,
                         out.size() - written, &done);
    if (error != nullptr) throw std::runtime_error(std::string("soxr: ") + error);
    written += done;
    if (got == 0 && done == 0) break;  // the input ended and soxr has given what it held
  }
  // --check-end 1: also the file's last frame, as ferry decodes it (a file cut short is an
  // error whatever the clip).
  if (check_end && (sf_seek(f.get(), file.frames - 1, SEEK_SET) != file.frames - 1 ||
                    sf_readf_float(f.get(), in.data(), 1) != 1)) {
    throw std::runtime_error("cannot read the last frame of " + file.path);
  }
}

int run_limit(const Options& o) {
  const std::vector<File> files = list_files(o.dir);
  struct Clip {
    std::size_t file;
    sf_count_t first, frames;
  };
  std::mt19937_64 rng(o.seed);
  std::vector<Clip> clips;
  clips.reserve(o.clips);
  for (std::size_t i = 0; i < o.clips; ++i) {
    const std::size_t f = std::uniform_int_distribution<std::size_t>(0, files.size() - 1)(rng);
    const File& file = files[f];
    if (o.clip_seconds <= 0) {
      clips.push_back({f, 0, file.frames});
      continue;
    }
    const auto frames = std::min<sf_count_t>(
        file.frames, std::llround(o.clip_seconds * static_cast<double>(file.rate)));
    const sf_count_t first =
        std::uniform_int_distribution<sf_count_t>(0, file.frames - frames)(rng);
    clips.push_back({f, first, frames});
  }
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(o.workers));
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  const auto start = Clock::now();
  for (int t = 0; t < o.workers; ++t) {
    threads.emplace_back([&] {
      std::vector<float> in, mono, out;
      try {
        for (std::size_t c = next++; c < clips.size(); c = next++) {
          decode_clip(files[clips[c].file], clips[c].first, clips[c].frames, o.check_end, in, mono,
                      out);
        }
      } catch (...) {
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = seconds_since(start);
  if (failure) std::rethrow_exception(failure);
  report(clips.size(), seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.mode == "ferry") return run_ferry(o);
    if (o.mode == "limit") return run_limit(o);
    throw std::invalid_argument("mode must be ferry or limit, not " + o.mode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "audio: %s\n", e.what());
    return 2;
  }
}
