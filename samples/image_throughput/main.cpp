// image_throughput: how fast a folder of images reaches the device through ferry.
//
//   image_throughput ROOT [--size 224] [--channels 3] [--workers N] [--prefetch N] [--batch N]
//                    [--epochs N] [--device cpu|cuda|cuda:N] [--normalize]
//                    [--geometry crop|random|resize]
//
// Copy it to measure an image pipeline before training on it. ImageFolder lists
// ROOT/<class>/<file> (.jpg, .jpeg, .png); the loader's workers decode each image and bring it
// to size x size (--geometry: crop = resize the shorter side, then the central crop; random =
// a random resized crop; resize = straight to size x size), batches go through pinned staging
// to the device, and this program only waits until each batch has arrived. The numbers are
// the input pipeline's ceiling: what a training loop would get if its step took no time.
//
// After each epoch it prints images/s, MB/s of decoded pixels (size x size x channels bytes per
// image, whatever --normalize delivers), where the time went according to LoaderStats, and the
// loader's one-line diagnosis. The first epoch also pays for reading the files from disk; later
// ones usually find them in the page cache.
//
// make_image_folder writes Fashion-MNIST as such a folder: try
//   image_throughput fashion-mnist/train --size 28 --channels 1 --geometry resize --workers 2

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cli.hpp"
#include "ferry/ferry.hpp"

namespace {

using common::Clock;
using common::seconds_since;

struct Options {
  std::filesystem::path root;
  int size = 224;
  int channels = 3;
  int workers = 0;  // 0: one per core
  int prefetch = 4;
  std::size_t batch = 64;
  std::size_t epochs = 2;
  ferry::Device device = ferry::Device::best();
  bool normalize = false;
  ferry::Geometry geometry = ferry::Geometry::resize_then_center_crop;
};

// What the loader did during one epoch: the difference of two snapshots of its stats, which add
// up from the loader's start. first_batch_seconds is the latest epoch's already.
ferry::LoaderStats since(const ferry::LoaderStats& now, const ferry::LoaderStats& before) {
  ferry::LoaderStats epoch = now;
  epoch.batches -= before.batches;
  epoch.samples -= before.samples;
  epoch.bytes -= before.bytes;
  epoch.skipped -= before.skipped;
  epoch.read_seconds -= before.read_seconds;
  epoch.worker_capacity_seconds -= before.worker_capacity_seconds;
  epoch.slot_wait_seconds -= before.slot_wait_seconds;
  epoch.copy_seconds -= before.copy_seconds;
  epoch.consumer_wait_seconds -= before.consumer_wait_seconds;
  epoch.wall_seconds -= before.wall_seconds;
  return epoch;
}

const char* describe(ferry::Geometry geometry) {
  switch (geometry) {
    case ferry::Geometry::resize_then_center_crop:
      return "resize and center crop";
    case ferry::Geometry::random_resized_crop:
      return "random resized crop";
    case ferry::Geometry::resize:
      return "resize";
  }
  return "?";
}

int run(const Options& options) {
  // 1. The dataset: listing the folder opens no image yet. Each image is decoded to
  //    u8 [size, size, channels]; with --normalize the loader turns the batch into f32
  //    [N, channels, size, size] on the device (ImageNet's mean and std for RGB, 0..1 otherwise).
  ferry::ImageOptions image;
  image.height = image.width = options.size;
  image.channels = options.channels;
  image.geometry = options.geometry;
  if (options.normalize) {
    image.normalize = options.channels == 3
                          ? ferry::Normalize{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}}
                          : ferry::Normalize{};
  }
  const auto folder = ferry::ImageFolder::open(options.root, image);

  // 2. The loader: `workers` threads decode, `prefetch` pinned staging slots hold batches in
  //    flight. Shuffled, as for training, so that files are read in random order.
  ferry::LoaderOptions loader_options;
  loader_options.batch_size = options.batch;
  loader_options.shuffle = true;
  loader_options.seed = 1;
  loader_options.workers = options.workers;
  loader_options.prefetch = options.prefetch;
  loader_options.device = options.device;
  ferry::Loader loader(folder, loader_options);

  std::printf("ferry %s: %s: %zu images in %zu classes, to %dx%dx%d (%s%s)\n", ferry::kVersion,
              options.root.c_str(), folder->size(), folder->classes().size(), options.size,
              options.size, options.channels, describe(options.geometry),
              options.normalize ? ", normalized" : "");
  const std::string workers = options.workers == 0   ? "one worker per core"
                              : options.workers == 1 ? "1 worker"
                                                     : std::to_string(options.workers) + " workers";
  std::printf("batches of %zu on %s, %s, prefetch %d\n", options.batch,
              options.device.str().c_str(), workers.c_str(), options.prefetch);
  std::fflush(stdout);

  const auto pixel_bytes = static_cast<double>(options.size) * options.size * options.channels;
  ferry::LoaderStats before = loader.stats();
  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    // 3. The loop a training step would sit in. A batch on a GPU is complete when its ready
    //    event is; on the CPU, data() waits for any pending write, and reading a byte of it
    //    makes sure the batch is really there.
    const auto start = Clock::now();
    std::size_t images = 0;
    for (const ferry::Batch& batch : loader.epoch(epoch)) {
      const ferry::Tensor& pixels = batch["image"];
      if (pixels.device().is_cuda()) {
        batch.ready_event().synchronize();
      } else {
        const volatile auto* first = static_cast<const volatile std::uint8_t*>(pixels.data());
        static_cast<void>(*first);
      }
      images += batch.size();
    }
    const double seconds = seconds_since(start);

    // 4. The epoch's numbers. read: the workers' time in ImageFolder::read (decoding, resizing),
    //    summed over threads; copy: the copy stream busy; consumer wait: this loop waiting for a
    //    batch; slot wait: the loader waiting for one of its `prefetch` staging slots to come
    //    free, all of them being in flight (filled, copied, or held by this loop).
    const ferry::LoaderStats now = loader.stats();
    const ferry::LoaderStats stats = since(now, before);
    before = now;
    const auto rate = static_cast<double>(images) / seconds;
    std::printf("epoch %zu/%zu: %zu images in %.2f s: %.0f images/s, %.1f MB/s decoded\n",
                epoch + 1, options.epochs, images, seconds, rate, rate * pixel_bytes / 1e6);
    std::printf(
        "  read %.2f s (summed over workers, %.0f%% busy), copy %.3f s, consumer wait %.2f s, "
        "slot wait %.2f s, first batch %.3f s\n",
        stats.read_seconds, 100 * stats.worker_busy_fraction(), stats.copy_seconds,
        stats.consumer_wait_seconds, stats.slot_wait_seconds, stats.first_batch_seconds);
    std::printf("  loader: %s\n", stats.summary().c_str());
    std::fflush(stdout);
  }
  return 0;
}

// ---- command line ---------------------------------------------------------------------------

constexpr const char* kUsage =
    "usage: image_throughput ROOT [--size 224] [--channels 3] [--workers N] [--prefetch N]\n"
    "                        [--batch N] [--epochs N] [--device cpu|cuda|cuda:N] [--normalize]\n"
    "                        [--geometry crop|random|resize]\n"
    "  ROOT           a folder of class folders of .jpg, .jpeg or .png images\n"
    "  --size N       height and width of the delivered images (default 224)\n"
    "  --channels N   1 (gray), 3 (RGB) or 4 (RGBA) (default 3)\n"
    "  --workers N    decoding threads; 0 for one per core (default 0)\n"
    "  --prefetch N   pinned staging slots, batches in flight (default 4)\n"
    "  --batch N      images per batch (default 64)\n"
    "  --epochs N     passes over the folder (default 2)\n"
    "  --device D     where batches go (default: cuda if available, else cpu)\n"
    "  --normalize    deliver f32 [N, C, H, W], normalized on the device\n"
    "  --geometry G   crop: shorter side to size*8/7, then the central crop (default);\n"
    "                 random: random resized crop; resize: straight to size x size\n";

int parse_int(const std::string& flag, const std::string& text) {
  const std::uint64_t value = common::parse_number(flag, text);
  if (value > 1'000'000) throw std::invalid_argument(flag + " " + text + " is too large");
  return static_cast<int>(value);
}

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--normalize") {
      options.normalize = true;
      continue;
    }
    if (flag.rfind("--", 0) != 0) {
      if (!options.root.empty()) throw std::invalid_argument("more than one ROOT: " + flag);
      options.root = flag;
      continue;
    }
    if (i + 1 == argc) throw std::invalid_argument("unknown option or missing value: " + flag);
    const std::string value = argv[++i];
    if (flag == "--size") {
      options.size = parse_int(flag, value);
    } else if (flag == "--channels") {
      options.channels = parse_int(flag, value);
    } else if (flag == "--workers") {
      options.workers = parse_int(flag, value);
    } else if (flag == "--prefetch") {
      options.prefetch = parse_int(flag, value);
    } else if (flag == "--batch") {
      options.batch = common::parse_number(flag, value);
    } else if (flag == "--epochs") {
      options.epochs = common::parse_number(flag, value);
    } else if (flag == "--device") {
      options.device = ferry::Device::parse(value);
    } else if (flag == "--geometry") {
      if (value == "crop") {
        options.geometry = ferry::Geometry::resize_then_center_crop;
      } else if (value == "random") {
        options.geometry = ferry::Geometry::random_resized_crop;
      } else if (value == "resize") {
        options.geometry = ferry::Geometry::resize;
      } else {
        throw std::invalid_argument("--geometry wants crop, random or resize, not '" + value + "'");
      }
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.root.empty()) throw std::invalid_argument("ROOT is required");
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "image_throughput: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& e) {
    // ferry's errors name what went wrong and where: a missing folder, a bad option
    // (ConfigError), a corrupt image (DataError, with the file and the sample index).
    std::fprintf(stderr, "image_throughput: %s\n", e.what());
    return 1;
  }
}
