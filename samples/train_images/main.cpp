// train_images: does ferry's fast JPEG path change what a model learns? Trains the same MLP
// twice, with the same seed, batch order and hyper-parameters, on the same JPEG folder:
//
//   (a) through ImageFolder: libjpeg-turbo decodes only the rows and columns the crop needs
//       (scaled in the DCT domain where that still covers the output twice over), then ferry's
//       fixed-point antialiased bilinear resize and the central crop
//       (Geometry::resize_then_center_crop);
//   (b) through a reference written here (reference.cpp), without ferry's image code: TurboJPEG
//       decodes the whole image, a double-precision PIL-style bilinear resize brings the shorter
//       side to --resize, and the centre 28x28 is cut out, as torchvision's Resize + CenterCrop.
//       Those pixels are held in a TensorDataset and go through the same Loader settings.
//
//   train_images [--data DIR] [--epochs N] [--batch N] [--seed S] [--seeds K] [--resize N]
//                [--max-diff POINTS] [--max-mad LEVELS]
//
// It prints both test accuracies and their difference, and the mean absolute difference between
// the two paths' test pixels (in u8 levels), and exits with 1 when the accuracies differ by more
// than --max-diff points or the pixels by more than --max-mad levels on average.
//
// One training run's accuracy moves by itself: any change to its input (another seed, a pixel
// off by one) sends SGD down another path: on 2000 training and 2000 test images the two paths'
// accuracies differ by about 0.7 points (standard deviation over seeds). --seeds K trains K pairs
// (seeds S, S+1, ...) and compares the means, whose difference spreads sqrt(K) times less.
//
// The data: make_image_folder writes Fashion-MNIST as JPEGs scaled up from 28x28, e.g.
//   make_image_folder --out fashion-mnist-jpeg --png-only --jpeg 72x56 --limit 2000
//   train_images --data fashion-mnist-jpeg
// (72x56 resized to 41x32, then the central 28x28). Where the shorter side is at least four
// times --resize (--jpeg 128 for instance), ferry decodes the JPEG scaled down in the DCT domain
// (by 1/2 there, so that the resize after it still halves), and the comparison is of that. The
// model and the command-line helpers are in ../common/ (mlp.hpp, fashion_mnist.hpp, cli.hpp):
// copy them along.

#include <algorithm>
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
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/fashion_mnist.hpp"
#include "common/mlp.hpp"
#include "ferry/ferry.hpp"
#include "train_images/reference.hpp"

namespace {

using common::Clock;
using common::seconds_since;

constexpr std::size_t kSide = 28;  // the model's images are kSide x kSide, one channel
constexpr std::size_t kInputs = kSide * kSide;
constexpr std::size_t kHidden = 128;
constexpr std::size_t kClasses = 10;

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::filesystem::path data = "fashion-mnist-jpeg";
  std::size_t epochs = 5;
  std::size_t batch = 64;
  std::uint64_t seed = 1;
  std::size_t seeds = 1;
  std::size_t resize = 32;
  double max_diff = 1.0;  // accuracy points
  double max_mad = 1.0;   // u8 levels
};

constexpr const char* kUsage =
    "usage: train_images [--data DIR] [--epochs N] [--batch N] [--seed S] [--seeds K]\n"
    "                    [--resize N]\n"
    "                    [--max-diff POINTS] [--max-mad LEVELS]\n"
    "  --data DIR         DIR/train and DIR/test, JPEGs in class folders, as\n"
    "                     make_image_folder --jpeg writes them (default ./fashion-mnist-jpeg)\n"
    "  --epochs N         passes over the training set (default 5)\n"
    "  --batch N          samples per batch (default 64)\n"
    "  --seed S           seed of the shuffle and the initial weights (default 1)\n"
    "  --seeds K          train K pairs, seeds S to S+K-1, and compare the mean\n"
    "                     accuracies (default 1)\n"
    "  --resize N         the shorter side before the central 28x28 crop (default 32)\n"
    "  --max-diff POINTS  the largest accepted test accuracy difference, in percentage\n"
    "                     points (default 1.0)\n"
    "  --max-mad LEVELS   the largest accepted mean absolute pixel difference (default 1.0)\n";

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
    } else if (flag == "--seed") {
      options.seed = common::parse_number(flag, value);
    } else if (flag == "--seeds") {
      options.seeds = common::parse_number(flag, value);
    } else if (flag == "--resize") {
      options.resize = common::parse_number(flag, value);
    } else if (flag == "--max-diff") {
      options.max_diff = common::parse_real(flag, value);
    } else if (flag == "--max-mad") {
      options.max_mad = common::parse_real(flag, value);
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  if (options.epochs == 0) throw std::invalid_argument("--epochs must be at least 1");
  if (options.seeds == 0 || options.seeds > 1000) {
    throw std::invalid_argument("--seeds wants 1 to 1000");
  }
  if (options.resize < kSide || options.resize > 4096) {
    throw std::invalid_argument("--resize wants 28 to 4096, the crop being 28x28");
  }
  if (!(options.max_diff >= 0) || !(options.max_mad >= 0)) {
    throw std::invalid_argument("--max-diff and --max-mad want non-negative numbers");
  }
  return options;
}

// ---- the two paths to a 28x28 sample --------------------------------------------------------

// (a) ferry's: ImageFolder decodes each file as the loader's workers read it. Fields "image"
// u8 [28, 28, 1] and "label" i64 [].
std::shared_ptr<ferry::ImageFolder> open_folder(const std::filesystem::path& root,
                                                const Options& options) {
  ferry::ImageOptions image;
  image.height = kSide;
  image.width = kSide;
  image.channels = 1;
  image.geometry = ferry::Geometry::resize_then_center_crop;
  image.resize = static_cast<int>(options.resize);
  return ferry::ImageFolder::open(root, image);
}

// (b) the reference: every file of `folder` (the same files and labels, in the same order)
// decoded, resized and cropped by reference.cpp up front, held in memory with the same fields.
std::shared_ptr<ferry::TensorDataset> reference_dataset(const ferry::ImageFolder& folder,
                                                        std::size_t resize) {
  const std::size_t n = folder.size();
  std::vector<std::uint8_t> pixels(n * kInputs);
  std::vector<std::int64_t> labels(n);
  for (std::size_t i = 0; i < n; ++i) {
    const reference::GrayImage image = reference::decode_jpeg_file(folder.path(i));
    const std::vector<std::uint8_t> crop =
        reference::resize_then_center_crop(image, resize, kSide, kSide);
    std::copy(crop.begin(), crop.end(), pixels.begin() + static_cast<std::ptrdiff_t>(i * kInputs));
    labels[i] = folder.label(i);
  }
  const auto rows = static_cast<std::int64_t>(n);
  const auto side = static_cast<std::int64_t>(kSide);
  return std::make_shared<ferry::TensorDataset>(std::vector<std::pair<std::string, ferry::Tensor>>{
      {"image", ferry::Tensor::from(pixels, {rows, side, side, 1})},
      {"label", ferry::Tensor::from(labels, {rows})}});
}

// The same Loader settings for both paths.
ferry::LoaderOptions loader_options(const Options& options, bool shuffle, std::uint64_t seed) {
  ferry::LoaderOptions o;
  o.batch_size = options.batch;
  o.shuffle = shuffle;
  o.seed = seed;
  o.workers = 0;  // one per core
  o.device = ferry::Device::best();
  return o;
}

// ---- training -------------------------------------------------------------------------------

struct Result {
  double accuracy = 0;      // on the test set after the last epoch
  double loss = 0;          // the mean training loss of the last epoch
  std::uint64_t order = 0;  // a hash of the labels in the order training saw them
};

// Trains a fresh model on `train_set` for options.epochs epochs with `seed` (the shuffle's and
// the initial weights'), then measures it on `test_set`.
Result train_and_test(const std::shared_ptr<ferry::Dataset>& train_set,
                      const std::shared_ptr<ferry::Dataset>& test_set, const Options& options,
                      std::uint64_t seed) {
  ferry::Loader train_loader(train_set, loader_options(options, true, seed));
  ferry::Loader test_loader(test_set, loader_options(options, false, seed));
  common::Mlp model(kInputs, kHidden, kClasses, seed);
  common::Trainer trainer(model, options.batch, /*learning_rate=*/1e-3f);
  Result result;
  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    double loss_sum = 0;
    std::size_t samples = 0;
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const ferry::Tensor x = common::to_host_pixels(batch["image"]);  // f32 [n, 784]
      const ferry::Tensor y = batch["label"].cpu();                    // i64 [n]
      const std::int64_t* labels = y.data<std::int64_t>();
      for (std::size_t i = 0; i < batch.size(); ++i) {
        result.order = result.order * 1000003 + static_cast<std::uint64_t>(labels[i]);
      }
      loss_sum += trainer.step(x.data<float>(), labels, batch.size());
      samples += batch.size();
    }
    result.loss = loss_sum / static_cast<double>(samples);
  }
  result.accuracy = common::accuracy(model, test_loader);
  return result;
}

// The mean and largest absolute difference between the test images as the fast path's loader
// delivers them (unshuffled) and the reference's.
struct PixelDiff {
  double mean = 0;
  unsigned max = 0;
};

PixelDiff compare_pixels(const std::shared_ptr<ferry::ImageFolder>& test_folder,
                         const ferry::TensorDataset& reference, const Options& options) {
  const auto* expected = reference.tensors().front().data<std::uint8_t>();
  ferry::Loader loader(test_folder, loader_options(options, false, options.seed));
  std::uint64_t sum = 0, count = 0;
  PixelDiff diff;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const ferry::Tensor images = batch["image"].cpu();
    const auto* got = images.data<std::uint8_t>();
    for (std::size_t i = 0; i < images.nbytes(); ++i, ++count) {
      const auto d = static_cast<unsigned>(std::abs(int{got[i]} - int{expected[count]}));
      sum += d;
      diff.max = std::max(diff.max, d);
    }
  }
  diff.mean = static_cast<double>(sum) / static_cast<double>(count);
  return diff;
}

int run(const Options& options) {
  const auto train_folder = open_folder(options.data / "train", options);
  const auto test_folder = open_folder(options.data / "test", options);
  std::printf(
      "ferry %s on %s: %zu training and %zu test images from %s, Resize(%zu) + "
      "CenterCrop(28), batches of %zu, seed %llu\n",
      ferry::kVersion, ferry::Device::best().str().c_str(), train_folder->size(),
      test_folder->size(), options.data.c_str(), options.resize, options.batch,
      static_cast<unsigned long long>(options.seed));

  auto start = Clock::now();
  const auto train_reference = reference_dataset(*train_folder, options.resize);
  const auto test_reference = reference_dataset(*test_folder, options.resize);
  std::printf("reference pixels: %zu images decoded whole and resized in double in %.1f s\n",
              train_folder->size() + test_folder->size(), seconds_since(start));
  std::fflush(stdout);

  const PixelDiff pixels = compare_pixels(test_folder, *test_reference, options);
  std::printf("test pixels: mean absolute difference %.3f u8 levels, largest %u\n", pixels.mean,
              pixels.max);
  std::fflush(stdout);

  // The same seed, order and hyper-parameters for both paths, seed after seed.
  double fast_sum = 0, slow_sum = 0;
  start = Clock::now();
  for (std::size_t k = 0; k < options.seeds; ++k) {
    const std::uint64_t seed = options.seed + k;
    const Result fast = train_and_test(train_folder, test_folder, options, seed);
    const Result slow = train_and_test(train_reference, test_reference, options, seed);
    if (fast.order != slow.order) {
      std::printf("seed %llu: the two runs did not see their samples in the same order\n",
                  static_cast<unsigned long long>(seed));
      return 1;
    }
    std::printf(
        "seed %llu: %zu epochs, last training loss %.4f / %.4f, test accuracy %.4f / "
        "%.4f (ImageFolder / reference), difference %+.2f points\n",
        static_cast<unsigned long long>(seed), options.epochs, fast.loss, slow.loss, fast.accuracy,
        slow.accuracy, (fast.accuracy - slow.accuracy) * 100.0);
    std::fflush(stdout);
    fast_sum += fast.accuracy;
    slow_sum += slow.accuracy;
  }
  const auto runs = static_cast<double>(options.seeds);
  const double fast_mean = fast_sum / runs, slow_mean = slow_sum / runs;
  const double diff = (fast_mean - slow_mean) * 100.0;
  std::printf("%zu training runs a path in %.1f s\n", options.seeds, seconds_since(start));
  std::printf("ImageFolder (fast path): test accuracy: %.4f (mean of %zu)\n", fast_mean,
              options.seeds);
  std::printf("reference (whole decode, double resize): test accuracy: %.4f (mean of %zu)\n",
              slow_mean, options.seeds);
  std::printf("accuracy difference: %+.2f points (limit %.2f)\n", diff, options.max_diff);
  std::printf("pixel difference: %.3f u8 levels on average (limit %.2f)\n", pixels.mean,
              options.max_mad);
  const bool ok = std::abs(diff) <= options.max_diff && pixels.mean <= options.max_mad;
  std::printf("%s\n", ok ? "same training: ok" : "the two paths differ: FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_images: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(options);
  } catch (const ferry::DataError& e) {
    std::fprintf(stderr,
                 "train_images: %s\n"
                 "make_image_folder --png-only --jpeg 72x56 --out DIR writes such a folder.\n",
                 e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_images: %s\n", e.what());
    return 1;
  }
}
