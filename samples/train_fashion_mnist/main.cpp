// train_fashion_mnist: trains a small classifier on Fashion-MNIST with batches from ferry.
//
//   train_fashion_mnist [--epochs N] [--batch N] [--seed S] [--data DIR] [--no-autotune]
//
// Copy it as a starting point for a training loop: open a dataset, make a Loader on
// Device::best() ("cuda if available else cpu"), and for each epoch take batches that are
// already on that device, train on them, then measure accuracy on the test set through a
// second Loader. The model is a plain C++ MLP, 784-128-10 with ReLU, trained with Adam; the math
// is written as simple loops that the compiler vectorizes, so the sample needs nothing but ferry.
// The model and the command-line helpers are in ../common/ (mlp.hpp, cli.hpp), shared with
// train_csv: copy them along.
//
// On a GPU the batches arrive on the GPU, and this sample brings each one back to the host with
// .cpu() and trains there: a real trainer would run its model on the GPU (libtorch through
// to_dlpack(), or its own kernels) and leave the batch where it is.
//
// The data: Debian's dataset-fashion-mnist package installs the four IDX files in
// /usr/share/datasets/fashion-mnist; --data points elsewhere. Everything is seeded, so the same
// --seed gives the same numbers on every run. With the defaults it reaches about 0.87 test
// accuracy in 10 epochs, about 25 s on two CPU cores.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/cli.hpp"
#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "ferry/ferry.hpp"

namespace {

using common::Clock;
using common::seconds_since;

// ---- the model: samples/common/mlp.hpp ------------------------------------------------------

constexpr std::size_t kSide = 28;  // images are kSide x kSide pixels
constexpr std::size_t kInputs = kSide * kSide;
constexpr std::size_t kHidden = 128;
constexpr std::size_t kClasses = 10;

// ---- from a ferry batch to the model's input ------------------------------------------------

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::size_t epochs = 10;
  std::size_t batch = 256;
  std::uint64_t seed = 1;
  std::filesystem::path data = "/usr/share/datasets/fashion-mnist";
  bool autotune = true;
};

constexpr const char* kUsage =
    "usage: train_fashion_mnist [--epochs N] [--batch N] [--seed S] [--data DIR] [--no-autotune]\n"
    "  --epochs N   passes over the training set (default 10)\n"
    "  --batch N    samples per batch (default 256)\n"
    "  --seed S     seed of the shuffle and the initial weights (default 1)\n"
    "  --data DIR   folder with Fashion-MNIST's four .gz IDX files\n"
    "               (default /usr/share/datasets/fashion-mnist, from Debian's\n"
    "               dataset-fashion-mnist package)\n"
    "  --no-autotune  keep the training loader's workers (one per core) and prefetch (4)\n"
    "               fixed instead of letting it choose them while it runs (LoaderOptions::\n"
    "               autotune, the default; the same batches either way)\n";

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--autotune" || flag == "--no-autotune") {  // --autotune: the default
      options.autotune = flag == "--autotune";
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--epochs") {
      options.epochs = common::parse_number(flag, value);
    } else if (flag == "--batch") {
      options.batch = common::parse_number(flag, value);
    } else if (flag == "--seed") {
      options.seed = common::parse_number(flag, value);
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
  ferry::LoaderOptions test_options = train_options;
  test_options.shuffle = false;
  // Autotune (the default; --no-autotune turns it off): workers and prefetch are chosen while
  // training runs (the options above are its starting point); the batches are the same bytes in
  // the same order either way.
  train_options.autotune = options.autotune;
  ferry::Loader train_loader(train_set, train_options);

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
  common::Mlp model(kInputs, kHidden, kClasses, options.seed);
  common::Trainer trainer(model, options.batch, /*learning_rate=*/1e-3f);

  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::size_t samples = 0, done = 0;
    const std::size_t total = train_loader.batches_per_epoch();

    // 4. The training loop. Each batch is valid until the loop advances; its tensors are on
    //    `device` already.
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const ferry::Tensor x = common::to_host_pixels(batch["image"]);  // f32 [n, 1, 28, 28]
      const ferry::Tensor y = batch["label"].cpu();                    // i64 [n]
      loss_sum += trainer.step(x.data<float>(), y.data<std::int64_t>(), batch.size());
      samples += batch.size();
      ++done;
      if (done % 10 == 0 || done == total) {
        common::show_progress(epoch + 1, options.epochs, done, total,
                              loss_sum / static_cast<double>(samples));
      }
    }
    const double train_seconds = seconds_since(start);
    std::fputc('\n', stderr);

    // 5. Accuracy on the 10,000 test images, which the model never trains on.
    const double test_accuracy = common::accuracy(model, test_loader);
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
