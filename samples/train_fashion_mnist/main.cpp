// train_fashion_mnist: trains a small classifier on Fashion-MNIST with batches from ferry.
//
//   train_fashion_mnist [--epochs N] [--batch N] [--seed S] [--data DIR]
//
// Copy it as a starting point for a training loop: open a dataset, make a Loader on
// Device::best() ("cuda if available else cpu"), and for each epoch take batches that are
// already on that device, train on them, then measure accuracy on the test set through a
// second Loader. The model is a plain C++ MLP, 784-128-10 with ReLU, trained with Adam; the math
// is written as simple loops that the compiler vectorizes, so the sample needs nothing but ferry.
//
// On a GPU the batches arrive on the GPU, and this sample brings each one back to the host with
// .cpu() and trains there: a real trainer would run its model on the GPU (libtorch through
// to_dlpack(), or its own kernels) and leave the batch where it is.
//
// The data: Debian's dataset-fashion-mnist package installs the four IDX files in
// /usr/share/datasets/fashion-mnist; --data points elsewhere. Everything is seeded, so the same
// --seed gives the same numbers on every run. With the defaults it reaches about 0.87 test
// accuracy in 10 epochs, about 25 s on two CPU cores.

#include <algorithm>
#include <charconv>
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
#include <system_error>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- the model ------------------------------------------------------------------------------

// Sizes and indices are std::size_t throughout, so that no index arithmetic needs a cast.
constexpr std::size_t kSide = 28;  // images are kSide x kSide pixels
constexpr std::size_t kInputs = kSide * kSide;
constexpr std::size_t kHidden = 128;
constexpr std::size_t kClasses = 10;

// One weight array with what Adam keeps for it: the gradient and two running moments.
struct Param {
  std::vector<float> value, grad, m, v;

  explicit Param(std::size_t size) : value(size, 0.0f), grad(size), m(size), v(size) {}
};

// logits = W2 · relu(W1 · x + b1) + b2. Weights are stored input-major (w1[i * kHidden + j]
// joins input i to hidden unit j), so every inner loop walks a contiguous row of outputs: the
// compiler turns those loops into vector instructions.
struct Mlp {
  Param w1{kInputs * kHidden}, b1{kHidden};
  Param w2{kHidden * kClasses}, b2{kClasses};

  // He initialisation: normal weights with variance 2 / fan_in, zero biases.
  explicit Mlp(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> n1(0.0f, std::sqrt(2.0f / static_cast<float>(kInputs)));
    std::normal_distribution<float> n2(0.0f, std::sqrt(2.0f / static_cast<float>(kHidden)));
    for (float& w : w1.value) w = n1(rng);
    for (float& w : w2.value) w = n2(rng);
  }

  // Hidden activations h [n, kHidden] and logits z [n, kClasses] of n images x [n, kInputs].
  void forward(const float* x, std::size_t n, float* h, float* z) const {
    for (std::size_t b = 0; b < n; ++b) {
      float* hb = h + b * kHidden;
      std::copy(b1.value.begin(), b1.value.end(), hb);
      for (std::size_t i = 0; i < kInputs; ++i) {
        const float xi = x[b * kInputs + i];
        const float* row = &w1.value[i * kHidden];
        for (std::size_t j = 0; j < kHidden; ++j) hb[j] += xi * row[j];
      }
      for (std::size_t j = 0; j < kHidden; ++j) hb[j] = std::max(hb[j], 0.0f);  // ReLU

      float* zb = z + b * kClasses;
      std::copy(b2.value.begin(), b2.value.end(), zb);
      for (std::size_t j = 0; j < kHidden; ++j) {
        const float* row = &w2.value[j * kClasses];
        for (std::size_t k = 0; k < kClasses; ++k) zb[k] += hb[j] * row[k];
      }
    }
  }
};

// Softmax of one row of logits, in place; returns log(sum(exp(z))) for the loss.
float softmax(float* z) {
  const float top = *std::max_element(z, z + kClasses);
  float sum = 0.0f;
  for (std::size_t k = 0; k < kClasses; ++k) {
    z[k] = std::exp(z[k] - top);
    sum += z[k];
  }
  for (std::size_t k = 0; k < kClasses; ++k) z[k] /= sum;
  return top + std::log(sum);
}

// Trains an Mlp with Adam (Kingma & Ba, 2015) on mean cross-entropy. Buffers for one batch are
// made once and reused.
class Trainer {
 public:
  Trainer(Mlp& model, std::size_t max_batch, float learning_rate)
      : model_(model),
        lr_(learning_rate),
        h_(max_batch * kHidden),
        p_(max_batch * kClasses),
        dh_(max_batch * kHidden) {}

  // One step on n images x [n, kInputs] (pixels in [0, 1]) with labels y [n] (0..9). Returns
  // the batch's summed cross-entropy.
  double step(const float* x, const std::int64_t* y, std::size_t n) {
    Mlp& m = model_;
    m.forward(x, n, h_.data(), p_.data());

    // Loss, and its gradient at the logits: dL/dz = (softmax(z) - onehot(y)) / n, into p_.
    double loss = 0;
    for (std::size_t b = 0; b < n; ++b) {
      float* pb = &p_[b * kClasses];
      const auto label = static_cast<std::size_t>(y[b]);
      const float z_label = pb[label];  // the true class's logit, before softmax overwrites it
      loss += softmax(pb) - z_label;
      pb[label] -= 1.0f;
      for (std::size_t k = 0; k < kClasses; ++k) pb[k] /= static_cast<float>(n);
    }

    for (Param* param : {&m.w1, &m.b1, &m.w2, &m.b2}) {
      std::fill(param->grad.begin(), param->grad.end(), 0.0f);
    }
    for (std::size_t b = 0; b < n; ++b) {
      const float* hb = &h_[b * kHidden];
      const float* dz = &p_[b * kClasses];
      float* dh = &dh_[b * kHidden];
      // Output layer: dW2 += h ⊗ dz, db2 += dz; and back through W2 and the ReLU to dh.
      for (std::size_t k = 0; k < kClasses; ++k) m.b2.grad[k] += dz[k];
      for (std::size_t j = 0; j < kHidden; ++j) {
        const float* w2 = &m.w2.value[j * kClasses];
        float* g2 = &m.w2.grad[j * kClasses];
        float sum = 0.0f;
        for (std::size_t k = 0; k < kClasses; ++k) {
          g2[k] += hb[j] * dz[k];
          sum += w2[k] * dz[k];
        }
        dh[j] = hb[j] > 0.0f ? sum : 0.0f;
      }
      // Hidden layer: dW1 += x ⊗ dh, db1 += dh.
      for (std::size_t j = 0; j < kHidden; ++j) m.b1.grad[j] += dh[j];
      for (std::size_t i = 0; i < kInputs; ++i) {
        const float xi = x[b * kInputs + i];
        float* g1 = &m.w1.grad[i * kHidden];
        for (std::size_t j = 0; j < kHidden; ++j) g1[j] += xi * dh[j];
      }
    }

    ++steps_;
    for (Param* param : {&m.w1, &m.b1, &m.w2, &m.b2}) adam(*param);
    return loss;
  }

 private:
  void adam(Param& p) const {
    constexpr float kBeta1 = 0.9f, kBeta2 = 0.999f, kEps = 1e-8f;
    // Bias correction of the moments, folded into the step size.
    const auto t = static_cast<double>(steps_);
    const auto lr = static_cast<float>(lr_ * std::sqrt(1.0 - std::pow(kBeta2, t)) /
                                       (1.0 - std::pow(kBeta1, t)));
    for (std::size_t i = 0; i < p.value.size(); ++i) {
      p.m[i] = kBeta1 * p.m[i] + (1.0f - kBeta1) * p.grad[i];
      p.v[i] = kBeta2 * p.v[i] + (1.0f - kBeta2) * p.grad[i] * p.grad[i];
      p.value[i] -= lr * p.m[i] / (std::sqrt(p.v[i]) + kEps);
    }
  }

  Mlp& model_;
  float lr_;
  std::uint64_t steps_ = 0;
  std::vector<float> h_, p_, dh_;  // hidden activations, probabilities, hidden gradients
};

// ---- from a ferry batch to the model's input ------------------------------------------------

// u8 images [n, 28, 28] on the loader's device to f32 pixels in [0, 1] on the host, [n, 784].
// normalize_images() converts on the images' device (a kernel on a GPU); with mean 0 and std 1
// it only scales by 1/255. It wants [N, H, W, C] images, so the single channel is made explicit
// first. On the CPU, cpu() returns the same tensor; on a GPU it copies the batch to the host.
ferry::Tensor to_host_pixels(const ferry::Tensor& images) {
  const ferry::Tensor nhwc = images.reshape({images.shape(0), images.shape(1), images.shape(2), 1});
  return ferry::normalize_images(nhwc, {.mean = {0.0f}, .std = {1.0f}}).cpu();
}

// Fraction of `loader`'s samples (one epoch) that the model classifies correctly.
double accuracy(const Mlp& model, ferry::Loader& loader, std::size_t max_batch) {
  std::vector<float> h(max_batch * kHidden), z(max_batch * kClasses);
  std::size_t correct = 0, total = 0;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const ferry::Tensor x = to_host_pixels(batch["image"]);
    const ferry::Tensor y = batch["label"].cpu();
    model.forward(x.data<float>(), batch.size(), h.data(), z.data());
    const std::int64_t* labels = y.data<std::int64_t>();
    for (std::size_t b = 0; b < batch.size(); ++b) {
      const float* zb = &z[b * kClasses];
      if (std::max_element(zb, zb + kClasses) - zb == labels[b]) ++correct;  // the top class
    }
    total += batch.size();
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

// An updating progress bar on stderr: "\r" returns to the start of the line each time.
void show_progress(std::size_t epoch, std::size_t epochs, std::size_t done, std::size_t total,
                   double mean_loss) {
  constexpr std::size_t kWidth = 30;
  const std::size_t filled = done * kWidth / total;
  std::fprintf(stderr, "\repoch %zu/%zu [%s%s] %zu/%zu batches, loss %.4f", epoch, epochs,
               std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done,
               total, mean_loss);
  std::fflush(stderr);
}

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::size_t epochs = 10;
  std::size_t batch = 256;
  std::uint64_t seed = 1;
  std::filesystem::path data = "/usr/share/datasets/fashion-mnist";
};

constexpr const char* kUsage =
    "usage: train_fashion_mnist [--epochs N] [--batch N] [--seed S] [--data DIR]\n"
    "  --epochs N   passes over the training set (default 10)\n"
    "  --batch N    samples per batch (default 256)\n"
    "  --seed S     seed of the shuffle and the initial weights (default 1)\n"
    "  --data DIR   folder with Fashion-MNIST's four .gz IDX files\n"
    "               (default /usr/share/datasets/fashion-mnist, from Debian's\n"
    "               dataset-fashion-mnist package)\n";

std::uint64_t parse_number(const std::string& flag, const std::string& text) {
  std::uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end) {
    throw std::invalid_argument(flag + " wants a non-negative integer, not '" + text + "'");
  }
  return value;
}

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
    if (flag == "--epochs") {
      options.epochs = parse_number(flag, value);
    } else if (flag == "--batch") {
      options.batch = parse_number(flag, value);
    } else if (flag == "--seed") {
      options.seed = parse_number(flag, value);
    } else if (flag == "--data") {
      options.data = value;
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  return options;
}

int train(const Options& options) {
  // 1. The data: 60,000 training and 10,000 test images of 28x28 bytes, with labels 0..9.
  //    IdxDataset reads the (gzipped) IDX files into memory once. Fields: "image" u8 [28, 28],
  //    "label" i64 [].
  std::shared_ptr<ferry::IdxDataset> train_set, test_set;
  try {
    train_set = ferry::IdxDataset::open(options.data / "train-images-idx3-ubyte.gz",
                                        options.data / "train-labels-idx1-ubyte.gz");
    test_set = ferry::IdxDataset::open(options.data / "t10k-images-idx3-ubyte.gz",
                                       options.data / "t10k-labels-idx1-ubyte.gz");
  } catch (const ferry::DataError& e) {
    std::fprintf(stderr,
                 "train_fashion_mnist: %s\n"
                 "Fashion-MNIST is in Debian's dataset-fashion-mnist package "
                 "(apt-get install dataset-fashion-mnist), or pass --data DIR.\n",
                 e.what());
    return 1;
  }
  if (train_set->rows() != 28 || train_set->cols() != 28) {
    std::fprintf(stderr, "train_fashion_mnist: the model wants 28x28 images, not %lldx%lld\n",
                 static_cast<long long>(train_set->rows()),
                 static_cast<long long>(train_set->cols()));
    return 1;
  }

  // 2. Two loaders on the best device. The training one shuffles, with a seed: the same seed
  //    gives the same batches whatever the number of workers (0: one per core). The test one
  //    keeps the file's order.
  const ferry::Device device = ferry::Device::best();
  ferry::LoaderOptions train_options;
  train_options.batch_size = options.batch;
  train_options.shuffle = true;
  train_options.seed = options.seed;
  train_options.workers = 0;
  train_options.device = device;
  ferry::Loader train_loader(train_set, train_options);

  ferry::LoaderOptions test_options = train_options;
  test_options.shuffle = false;
  ferry::Loader test_loader(test_set, test_options);

  std::printf("ferry %s on %s: %zu training and %zu test images, batches of %zu\n", ferry::kVersion,
              device.str().c_str(), train_set->size(), test_set->size(), options.batch);
  if (device.is_cuda()) {
    std::printf(
        "batches arrive on %s; this sample copies each to the host with .cpu() and "
        "trains its model there\n",
        device.str().c_str());
  }
  std::fflush(stdout);  // before the progress bar, which goes to stderr

  // 3. The model and its optimizer.
  Mlp model(options.seed);
  Trainer trainer(model, options.batch, /*learning_rate=*/1e-3f);

  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::size_t samples = 0, done = 0;
    const std::size_t total = train_loader.batches_per_epoch();

    // 4. The training loop. Each batch is valid until the loop advances; its tensors are on
    //    `device` already.
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const ferry::Tensor x = to_host_pixels(batch["image"]);  // f32 [n, 1, 28, 28]
      const ferry::Tensor y = batch["label"].cpu();            // i64 [n]
      loss_sum += trainer.step(x.data<float>(), y.data<std::int64_t>(), batch.size());
      samples += batch.size();
      ++done;
      if (done % 10 == 0 || done == total) {
        show_progress(epoch + 1, options.epochs, done, total,
                      loss_sum / static_cast<double>(samples));
      }
    }
    const double train_seconds = seconds_since(start);
    std::fputc('\n', stderr);

    // 5. Accuracy on the 10,000 test images, which the model never trains on.
    const double test_accuracy = accuracy(model, test_loader, options.batch);
    std::printf("epoch %zu/%zu: mean training loss %.4f, %.0f samples/s (%.1f s)\n", epoch + 1,
                options.epochs, loss_sum / static_cast<double>(samples),
                static_cast<double>(samples) / train_seconds, train_seconds);
    std::printf("test accuracy: %.4f\n", test_accuracy);
    // Whether the loader kept up: "compute-bound" means the training loop set the pace.
    std::printf("loader: %s\n", train_loader.stats().summary().c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    // ferry throws ferry::Error (DataError, DeviceError, ConfigError) with a message that says
    // what and where.
    std::fprintf(stderr, "\ntrain_fashion_mnist: %s\n", e.what());
    return 2;
  }
}
