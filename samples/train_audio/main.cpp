// train_audio: spoken-digit classification on log-mel features that ferry's workers compute.
//
//   train_audio --data DIR [--epochs N] [--batch N] [--hidden N] [--lr X] [--seeds N]
//
// DIR holds DIR/train and DIR/test, each an AudioFolder layout (root/<class>/<file>): what
// make_digits.sh (next to this file) writes, the digits "zero".."nine" spoken by espeak-ng, its
// test voices never heard in training. AudioFolder reads each file on the loader's workers:
// libsndfile decodes it, libsoxr resamples it to 16 kHz, the first second is kept (a shorter
// file zero-padded at the end) and turned into a log-mel spectrogram, f32 [51, 40]: torchaudio's
// MelSpectrogram(n_fft=400, hop_length=320, n_mels=40, mel_scale="htk", center=True, power=2),
// then the log. Each mel band is standardized with the training set's mean and standard
// deviation (one pass of the loader before training), and the model, samples/common/mlp.hpp,
// trains on the 2,040 numbers of a clip: softmax regression by default (--hidden 0), or one
// hidden layer of ReLU units (--hidden N), with Adam on the mean cross-entropy.
//
// Each seed (1..--seeds) seeds the weights and the loader's shuffle; the sample prints each
// seed's held-out accuracy and last "test accuracy: X", their mean. baseline.py trains the same
// model with the same hyper-parameters in PyTorch on torchaudio's features of the same files;
// with the defaults both reach about 0.98 (the CTest samples.train_audio.baseline checks they
// are within a point). Everything is seeded: the same flags give the same numbers on every run.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "common/mlp.hpp"
#include "ferry/ferry.hpp"

namespace {

using common::Clock;
using common::seconds_since;

constexpr std::size_t kClasses = 10;

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::filesystem::path data;
  std::size_t epochs = 20;
  std::size_t batch = 32;
  std::size_t hidden = 0;
  double lr = 1e-3;
  std::size_t seeds = 5;
};

constexpr const char* kUsage =
    "usage: train_audio --data DIR [--epochs N] [--batch N] [--hidden N] [--lr X] [--seeds N]\n"
    "  --data DIR   DIR/train and DIR/test, class folders of sound files (make_digits.sh DIR)\n"
    "  --epochs N   passes over the training set for each seed (default 20)\n"
    "  --batch N    clips per batch (default 32)\n"
    "  --hidden N   hidden ReLU units; 0: softmax regression (default 0)\n"
    "  --lr X       Adam's learning rate (default 0.001)\n"
    "  --seeds N    models trained, seeds 1..N; the mean accuracy is printed last (default 5)\n";

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--data") {
      options.data = value;
    } else if (flag == "--epochs") {
      options.epochs = common::parse_number(flag, value);
    } else if (flag == "--batch") {
      options.batch = common::parse_number(flag, value);
    } else if (flag == "--hidden") {
      options.hidden = common::parse_number(flag, value);
    } else if (flag == "--lr") {
      options.lr = common::parse_real(flag, value);
    } else if (flag == "--seeds") {
      options.seeds = common::parse_number(flag, value);
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.data.empty()) throw std::invalid_argument("--data is required");
  if (options.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  if (options.seeds == 0) throw std::invalid_argument("--seeds must be at least 1");
  if (!(options.lr > 0)) throw std::invalid_argument("--lr must be above 0");
  return options;
}

// ---- the features -----------------------------------------------------------------------------

// What AudioFolder makes of each file: the first second at 16 kHz as a log-mel spectrogram.
ferry::AudioOptions audio_options() {
  ferry::AudioOptions audio;
  audio.sample_rate = 16000;
  audio.channels = 1;        // the channels averaged (espeak-ng's are mono already)
  audio.clip_seconds = 1.0;  // 16,000 samples, zero-padded at the end
  audio.crop = ferry::AudioCrop::start;
  audio.mel = ferry::MelOptions{.n_fft = 400, .hop = 320, .n_mels = 40};  // f32 [51, 40]
  return audio;
}

// Per mel band: the mean and standard deviation over the training set's clips and frames.
struct Standardizer {
  std::vector<float> mean, inv_std;

  // One pass of `loader` (unshuffled), in double precision.
  static Standardizer fit(ferry::Loader& loader, std::size_t bands) {
    std::vector<double> sum(bands), sum_sq(bands);
    double rows = 0;
    for (const ferry::Batch& batch : loader.epoch(0)) {
      const ferry::Tensor x = batch["audio"].cpu();  // f32 [n, frames, bands]
      const float* v = x.data<float>();
      const auto n = static_cast<std::size_t>(x.numel()) / bands;
      for (std::size_t r = 0; r < n; ++r) {
        for (std::size_t b = 0; b < bands; ++b) {
          sum[b] += v[r * bands + b];
          sum_sq[b] += static_cast<double>(v[r * bands + b]) * v[r * bands + b];
        }
      }
      rows += static_cast<double>(n);
    }
    Standardizer s;
    for (std::size_t b = 0; b < bands; ++b) {
      const double mean = sum[b] / rows;
      const double var = sum_sq[b] / rows - mean * mean;
      s.mean.push_back(static_cast<float>(mean));
      s.inv_std.push_back(static_cast<float>(1.0 / std::sqrt(var > 0 ? var : 1.0)));
    }
    return s;
  }

  // A batch's spectrograms [n, frames, bands], standardized, as the model's rows [n, frames *
  // bands], into `out`.
  void apply(const ferry::Tensor& audio, std::vector<float>& out) const {
    const ferry::Tensor x = audio.cpu();
    const float* v = x.data<float>();
    const std::size_t bands = mean.size();
    out.resize(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
      const std::size_t b = i % bands;
      out[i] = (v[i] - mean[b]) * inv_std[b];
    }
  }
};

// Fraction of `loader`'s clips (one epoch) that the model classifies correctly.
double accuracy(const common::Mlp& model, ferry::Loader& loader, const Standardizer& standard) {
  std::size_t correct = 0, total = 0;
  std::vector<float> x;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    standard.apply(batch["audio"], x);
    const ferry::Tensor y = batch["label"].cpu();
    correct += model.count_correct(x.data(), y.data<std::int64_t>(), batch.size());
    total += batch.size();
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

int train(const Options& options) {
  // 1. The data: two AudioFolders with the same options. Fields: "audio" f32 [51, 40], "label"
  //    i64 [] (the class folder's position in sorted order: "0".."9" are labels 0..9).
  std::shared_ptr<ferry::AudioFolder> train_set, test_set;
  try {
    train_set = ferry::AudioFolder::open(options.data / "train", audio_options());
    test_set = ferry::AudioFolder::open(options.data / "test", audio_options());
  } catch (const ferry::DataError& e) {
    std::fprintf(stderr,
                 "train_audio: %s\nmake the spoken digits first: "
                 "samples/train_audio/make_digits.sh DIR, then --data DIR\n",
                 e.what());
    return 1;
  }
  if (train_set->classes().size() != kClasses || test_set->classes() != train_set->classes()) {
    std::fprintf(stderr, "train_audio: want the same %zu classes in train/ and test/\n", kClasses);
    return 1;
  }
  const std::vector<std::int64_t> shape = train_set->fields()[0].shape;  // [frames, n_mels]
  const auto bands = static_cast<std::size_t>(shape[1]);
  const std::size_t inputs = static_cast<std::size_t>(shape[0]) * bands;

  // 2. Loaders on the host (the model trains there). Workers: one per core. The training
  //    loader's seed is set for each model below; the other two keep the files' order.
  ferry::LoaderOptions train_options;
  train_options.batch_size = options.batch;
  train_options.shuffle = true;
  train_options.device = ferry::Device::cpu();
  ferry::LoaderOptions in_order = train_options;
  in_order.shuffle = false;
  ferry::Loader stats_loader(train_set, in_order);
  ferry::Loader test_loader(test_set, in_order);

  std::printf("ferry %s: %zu training and %zu test clips, log-mel [%lld, %lld], batches of %zu\n",
              ferry::kVersion, train_set->size(), test_set->size(),
              static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), options.batch);
  std::fflush(stdout);

  const auto start = Clock::now();
  const Standardizer standard = Standardizer::fit(stats_loader, bands);
  std::printf("mel bands standardized over the training set (%.2f s)\n", seconds_since(start));

  // 3. One model a seed: the seed gives the initial weights and the order of the batches.
  double accuracy_sum = 0;
  std::vector<float> x;
  for (std::uint64_t seed = 1; seed <= options.seeds; ++seed) {
    const auto seed_start = Clock::now();
    train_options.seed = seed;
    ferry::Loader train_loader(train_set, train_options);
    common::Mlp model(inputs, options.hidden, kClasses, seed);
    common::Trainer trainer(model, options.batch, static_cast<float>(options.lr));
    double loss = 0;
    std::size_t samples = 0;
    for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
      loss = 0;
      samples = 0;
      // Each batch is valid until the loop advances: its spectrograms were computed on the
      // workers, in the shuffled order of (seed, epoch).
      for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
        standard.apply(batch["audio"], x);
        const ferry::Tensor y = batch["label"].cpu();
        loss += trainer.step(x.data(), y.data<std::int64_t>(), batch.size());
        samples += batch.size();
      }
    }
    // 4. Accuracy on the held-out voices.
    const double held_out = accuracy(model, test_loader, standard);
    accuracy_sum += held_out;
    std::printf(
        "seed %llu: %zu epochs, last epoch's mean loss %.4f, held-out accuracy %.4f (%.1f s)\n",
        static_cast<unsigned long long>(seed), options.epochs, loss / static_cast<double>(samples),
        held_out, seconds_since(seed_start));
    std::printf("loader: %s\n", train_loader.stats().summary().c_str());
    std::fflush(stdout);
  }
  const std::string model = options.hidden == 0
                                ? "softmax regression"
                                : "a hidden layer of " + std::to_string(options.hidden);
  std::printf("test accuracy: %.4f (mean of %zu seeds, %s, %.1f s)\n",
              accuracy_sum / static_cast<double>(options.seeds), options.seeds, model.c_str(),
              seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_audio: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    // ferry throws ferry::Error (DataError naming the file, ConfigError) with a message that
    // says what and where.
    std::fprintf(stderr, "\ntrain_audio: %s\n", e.what());
    return 2;
  }
}
