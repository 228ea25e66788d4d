// train_csv: trains a classifier on a CSV file with a label column, numeric features and, if
// asked, columns of text (categorical features), with batches from ferry.
//
//   train_csv --train a.csv [--test b.csv | --test-fraction F] [--label NAME | --label-index I]
//             [--categorical A,B,...] [--missing nan] [--epochs N] [--batch N] [--lr X]
//             [--hidden N] [--seed S] [--device cpu|cuda]
//
// Copy it as a starting point for tabular data: CsvDataset parses the file once into memory
// (a feature vector and a class id per row), a Loader on Device::best() ("cuda if available else
// cpu") delivers shuffled batches, and a model trains on them. Without --test, a seeded random
// fraction of the rows is held out for testing, through a small Dataset that views a subset of
// another's rows. Features are standardized with the training rows' mean and standard deviation,
// so that columns of any scale suit one learning rate; with --missing nan an empty numeric field
// is NaN, which becomes the mean (0 once standardized).
//
// --categorical names text columns (a make of car, a city): CsvDataset reads each as an i64
// field of category codes (the column's distinct texts numbered in sorted order), and the model
// sees it one-hot: one input per category, plus one for a test-file text that the training file
// lacks (a --test file is read with the training file's categories, CsvOptions::categories_from,
// and Unknown::reserved: such a text gets the code V, the number of categories). A missing text
// (--missing nan: the code -1) is all zeros. One-hot into the first layer is the same model as
// an embedding of the codes added up, so this is the simplest form of one.
//
// The model is softmax regression (--hidden 0) or a one-hidden-layer MLP with ReLU, trained with
// Adam; it and the command-line helpers are in ../common/ (mlp.hpp, cli.hpp), shared with
// train_fashion_mnist: copy them along. As there, batches that arrive on a GPU are brought back
// to the host with .cpu() to train.
//
// make_image_folder writes Fashion-MNIST as CSV files ("label,p0,...,p783"), on which this
// reaches about 0.88 test accuracy in 10 epochs. On Debian's python3-statsmodels autos.csv (205
// cars, 16 numeric columns and 9 of text), --label drive --categorical make,fuel,aspir,doors,
// style,eng_loc,eng_type,cylinders,fuel.sys --missing nan predicts the driven wheels.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iterator>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/cli.hpp"
#include "common/mlp.hpp"
#include "common/rows.hpp"
#include "ferry/ferry.hpp"

namespace {

using common::Clock;
using common::seconds_since;

// ---- the data -------------------------------------------------------------------------------

// The model's inputs of a batch: the numeric features, x' = (x - mean) / std with the mean and
// standard deviation of the training rows (computed once from CsvDataset::features(), all rows
// in memory; NaN, a missing value, becomes 0, the mean), then each categorical column one-hot.
class Inputs {
 public:
  Inputs(const ferry::CsvDataset& file, const std::vector<std::size_t>& rows)
      : features_(file.num_features()), mean_(features_), inv_std_(features_) {
    // Two passes, the mean first, then the squared deviations from it, in double: exact enough
    // even for large values that vary little (timestamps, prices). NaN is left out of both.
    std::vector<double> sum(features_), sum_sq(features_), count(features_);
    for (const std::size_t r : rows) {
      const float* row = &file.features()[r * features_];
      for (std::size_t f = 0; f < features_; ++f) {
        if (std::isnan(row[f])) continue;
        sum[f] += row[f];
        count[f] += 1;
      }
    }
    for (const std::size_t r : rows) {
      const float* row = &file.features()[r * features_];
      for (std::size_t f = 0; f < features_; ++f) {
        if (std::isnan(row[f])) continue;
        const double d = row[f] - sum[f] / count[f];
        sum_sq[f] += d * d;
      }
    }
    for (std::size_t f = 0; f < features_; ++f) {
      const double n = std::max(count[f], 1.0);
      const double var = sum_sq[f] / n;
      mean_[f] = static_cast<float>(sum[f] / n);
      // A constant column (an always-black pixel) is only centred, not divided by zero.
      inv_std_[f] = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f;
    }
    // One input per category of each categorical column, and one for an unknown text.
    for (const std::string& name : file.categorical_names()) {
      categorical_.push_back({name, file.categories(name).size() + 1});
    }
    width_ = features_;
    for (const Categorical& c : categorical_) width_ += c.width;
  }

  // Inputs per row.
  std::size_t width() const { return width_; }

  // A batch's inputs [n, width()], from its fields on the loader's device, into `out` on the
  // host.
  const float* apply(const ferry::Batch& batch, std::vector<float>& out) const {
    const std::size_t rows = batch.size();
    out.assign(rows * width_, 0.0f);
    if (features_ != 0) {
      const ferry::Tensor host = batch["features"].cpu();  // a copy from a GPU; else itself
      const float* x = host.data<float>();
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t f = 0; f < features_; ++f) {
          const float v = (x[r * features_ + f] - mean_[f]) * inv_std_[f];
          out[r * width_ + f] = std::isnan(v) ? 0.0f : v;
        }
      }
    }
    std::size_t at = features_;
    for (const Categorical& c : categorical_) {
      const ferry::Tensor codes = batch[c.name].cpu();  // i64 [n]
      const std::int64_t* code = codes.data<std::int64_t>();
      for (std::size_t r = 0; r < rows; ++r) {
        // -1 (missing) stays all zeros; V (unknown in a test file) is the last input.
        if (code[r] >= 0) out[r * width_ + at + static_cast<std::size_t>(code[r])] = 1.0f;
      }
      at += c.width;
    }
    return out.data();
  }

 private:
  struct Categorical {
    std::string name;
    std::size_t width;
  };
  std::size_t features_;
  std::vector<float> mean_, inv_std_;
  std::vector<Categorical> categorical_;
  std::size_t width_ = 0;
};

// Test class ids as training class ids. CsvDataset numbers text labels in sorted order per file,
// so a test file that lacks a class numbers the others differently; integer labels are their
// own ids and map to themselves.
std::vector<std::int64_t> map_classes(const ferry::CsvDataset& train,
                                      const ferry::CsvDataset& test) {
  std::vector<std::int64_t> to_train;
  for (const std::string& name : test.classes()) {
    const auto it = std::find(train.classes().begin(), train.classes().end(), name);
    if (it == train.classes().end()) {
      throw std::runtime_error("the test file's class '" + name +
                               "' does not occur in the training file");
    }
    to_train.push_back(std::distance(train.classes().begin(), it));
  }
  return to_train;
}

// Fraction of `loader`'s samples (one epoch) that the model classifies correctly.
double accuracy(const common::Mlp& model, ferry::Loader& loader, const Inputs& inputs,
                const std::vector<std::int64_t>& to_train_class) {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::size_t correct = 0, total = 0;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const float* features = inputs.apply(batch, x);
    const ferry::Tensor labels = batch["label"].cpu();
    const std::int64_t* ids = labels.data<std::int64_t>();
    y.clear();
    for (std::size_t b = 0; b < batch.size(); ++b) {
      y.push_back(to_train_class.at(static_cast<std::size_t>(ids[b])));
    }
    correct += model.count_correct(features, y.data(), batch.size());
    total += batch.size();
  }
  return static_cast<double>(correct) / static_cast<double>(total);
}

// ---- command line ---------------------------------------------------------------------------

struct Options {
  std::filesystem::path train, test;
  double test_fraction = 0.1;
  ferry::Column label = ferry::Column::name("label");
  std::vector<ferry::Column> categorical;
  bool missing_nan = false;
  std::size_t epochs = 10;
  std::size_t batch = 256;
  double lr = 1e-3;
  std::size_t hidden = 128;
  std::uint64_t seed = 1;
  ferry::Device device = ferry::Device::best();
};

constexpr const char* kUsage =
    "usage: train_csv --train FILE [--test FILE | --test-fraction F]\n"
    "                 [--label NAME | --label-index I] [--categorical A,B,...]\n"
    "                 [--missing nan] [--epochs N] [--batch N] [--lr X]\n"
    "                 [--hidden N] [--seed S] [--device cpu|cuda|cuda:N]\n"
    "  --train FILE       CSV file to train on (a header, features, a label column)\n"
    "  --test FILE        CSV file to measure accuracy on, with the same columns\n"
    "  --test-fraction F  without --test: hold out this fraction of the training rows\n"
    "                     (default 0.1)\n"
    "  --label NAME       the label column by header name (default \"label\")\n"
    "  --label-index I    the label column by position, from 0\n"
    "  --categorical A,B  columns of text, by header name, read as categories (one-hot)\n"
    "  --missing nan      an empty field is NaN (numeric: then the mean) or missing (text)\n"
    "  --epochs N         passes over the training rows (default 10)\n"
    "  --batch N          samples per batch (default 256)\n"
    "  --lr X             Adam's learning rate (default 0.001)\n"
    "  --hidden N         hidden units; 0 for softmax regression (default 128)\n"
    "  --seed S           seed of the split, the shuffle and the initial weights (default 1)\n"
    "  --device D         where batches go (default: cuda if available, else cpu)\n";

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
    if (flag == "--train") {
      options.train = value;
    } else if (flag == "--test") {
      options.test = value;
    } else if (flag == "--test-fraction") {
      options.test_fraction = common::parse_real(flag, value);
    } else if (flag == "--label") {
      options.label = ferry::Column::name(value);
    } else if (flag == "--label-index") {
      options.label = ferry::Column::index(common::parse_number(flag, value));
    } else if (flag == "--categorical") {
      for (std::string& name : common::split_list(value)) {
        options.categorical.push_back(ferry::Column::name(std::move(name)));
      }
    } else if (flag == "--missing") {
      if (value != "nan") throw std::invalid_argument("--missing takes only nan");
      options.missing_nan = true;
    } else if (flag == "--epochs") {
      options.epochs = common::parse_number(flag, value);
    } else if (flag == "--batch") {
      options.batch = common::parse_number(flag, value);
    } else if (flag == "--lr") {
      options.lr = common::parse_real(flag, value);
    } else if (flag == "--hidden") {
      options.hidden = common::parse_number(flag, value);
    } else if (flag == "--seed") {
      options.seed = common::parse_number(flag, value);
    } else if (flag == "--device") {
      options.device = ferry::Device::parse(value);
    } else {
      throw std::invalid_argument("unknown option: " + flag);
    }
  }
  if (options.train.empty()) throw std::invalid_argument("--train FILE is required");
  if (options.batch == 0) throw std::invalid_argument("--batch must be at least 1");
  if (!(options.test_fraction > 0 && options.test_fraction < 1)) {
    throw std::invalid_argument("--test-fraction must be between 0 and 1");
  }
  if (!(options.lr > 0)) throw std::invalid_argument("--lr must be positive");
  return options;
}

int train(const Options& options) {
  // 1. The data. CsvDataset reads the whole file once; each row becomes "features" f32 [F] and
  //    "label" i64 [] (a class id: integer labels keep their value, text labels are numbered
  //    in sorted order). Every column but the label is a feature.
  //    Columns named by --categorical become i64 fields of category codes, one per column.
  ferry::CsvOptions csv;
  csv.label = options.label;
  csv.categorical = options.categorical;
  if (options.missing_nan) csv.missing = ferry::Missing::nan;
  const auto read_start = Clock::now();
  const auto train_file = ferry::CsvDataset::open(options.train, csv);
  const std::size_t classes = train_file->classes().size();
  // An id column taken for the label would make a model of millions of outputs.
  if (classes < 2 || classes > 10000) {
    throw std::runtime_error("the label column " + options.label.str() + " of " +
                             options.train.string() + " gives " + std::to_string(classes) +
                             " classes; is it the right column (--label, --label-index)?");
  }

  // 2. The test rows: another file with the same columns, or a held-out part of this one.
  std::shared_ptr<const ferry::Dataset> train_set, test_set;
  std::vector<std::size_t> train_rows(train_file->size());
  std::iota(train_rows.begin(), train_rows.end(), std::size_t{0});
  std::vector<std::int64_t> to_train_class(classes);
  std::iota(to_train_class.begin(), to_train_class.end(), std::int64_t{0});
  if (!options.test.empty()) {
    // The training file's categories, so that a code means the same text in both files; a
    // text the training file lacks gets the code V (its number of categories).
    ferry::CsvOptions test_csv = csv;
    test_csv.categories_from(*train_file);
    test_csv.unknown = ferry::Unknown::reserved;
    const auto test_file = ferry::CsvDataset::open(options.test, test_csv);
    if (test_file->num_features() != train_file->num_features()) {
      throw std::runtime_error(options.test.string() + " has " +
                               std::to_string(test_file->num_features()) + " features, " +
                               options.train.string() + " " +
                               std::to_string(train_file->num_features()));
    }
    to_train_class = map_classes(*train_file, *test_file);
    train_set = train_file;
    test_set = test_file;
  } else {
    if (train_file->size() < 2) throw std::runtime_error("too few rows to hold some out");
    auto [train_part, test_part] =
        common::split_rows(train_file->size(), options.test_fraction, options.seed);
    train_rows = train_part;
    train_set = std::make_shared<common::Subset>(train_file, std::move(train_part));
    test_set = std::make_shared<common::Subset>(train_file, std::move(test_part));
  }
  const double read_seconds = seconds_since(read_start);
  const Inputs inputs(*train_file, train_rows);
  const std::size_t features = inputs.width();

  // 3. Two loaders on the chosen device. The training one shuffles, with a seed: the same seed
  //    gives the same batches whatever the number of workers (0: one per core).
  ferry::LoaderOptions train_options;
  train_options.batch_size = options.batch;
  train_options.shuffle = true;
  train_options.seed = options.seed;
  train_options.workers = 0;
  train_options.device = options.device;
  ferry::Loader train_loader(train_set, train_options);

  ferry::LoaderOptions test_options = train_options;
  test_options.shuffle = false;
  ferry::Loader test_loader(test_set, test_options);

  std::printf(
      "ferry %s on %s: %zu training and %zu test rows of %zu numeric features and %zu "
      "categorical, %zu classes (CSV parsed in %.2f s)\n",
      ferry::kVersion, options.device.str().c_str(), train_set->size(), test_set->size(),
      train_file->num_features(), train_file->categorical_names().size(), classes, read_seconds);
  for (const std::string& name : train_file->categorical_names()) {
    std::printf("categorical \"%s\": %zu categories, one-hot\n", name.c_str(),
                train_file->categories(name).size());
  }
  if (options.hidden == 0) {
    std::printf("model: softmax regression %zu-%zu, batches of %zu\n", features, classes,
                options.batch);
  } else {
    std::printf("model: MLP %zu-%zu-%zu with ReLU, batches of %zu\n", features, options.hidden,
                classes, options.batch);
  }
  std::fflush(stdout);  // before the progress bar, which goes to stderr

  // 4. The model and its optimizer.
  common::Mlp model(features, options.hidden, classes, options.seed);
  common::Trainer trainer(model, options.batch, static_cast<float>(options.lr));

  std::vector<float> x;  // one batch's standardized features, on the host
  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::size_t samples = 0, done = 0;
    const std::size_t total = train_loader.batches_per_epoch();

    // 5. The training loop. Each batch is valid until the loop advances.
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const float* features_of_batch = inputs.apply(batch, x);  // [n, inputs]
      const ferry::Tensor y = batch["label"].cpu();             // i64 [n]
      loss_sum += trainer.step(features_of_batch, y.data<std::int64_t>(), batch.size());
      samples += batch.size();
      ++done;
      if (done % 10 == 0 || done == total) {
        common::show_progress(epoch + 1, options.epochs, done, total,
                              loss_sum / static_cast<double>(samples));
      }
    }
    const double train_seconds = seconds_since(start);
    std::fputc('\n', stderr);

    // 6. Accuracy on the test rows, which the model never trains on.
    const double test_accuracy = accuracy(model, test_loader, inputs, to_train_class);
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
    std::fprintf(stderr, "train_csv: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    // ferry throws ferry::Error (DataError, DeviceError, ConfigError) with a message that says
    // what and where: the file, line and column of a bad CSV field.
    std::fprintf(stderr, "\ntrain_csv: %s\n", e.what());
    return 1;
  }
}
