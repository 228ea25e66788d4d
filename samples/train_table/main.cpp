// train_table: trains a classifier on a table in a Parquet file (Hugging Face's shards, pandas'
// to_parquet, Spark, DuckDB) or an Arrow IPC file (`.arrow`: Hugging Face datasets' cache files),
// a label column, numeric feature columns and, if asked, columns of text read as categories,
// with batches from ferry.
//
//   train_table --train a.parquet|a.arrow [--test b.parquet | --test-fraction F] [--label NAME]
//               [--categorical A,B,...] [--missing nan] [--epochs N] [--batch N] [--lr X]
//               [--hidden N] [--seed S] [--device cpu|cuda]
//
// It is train_csv for tables: the same model (../common/mlp.hpp), the same split of rows
// (../common/rows.hpp) and the same inputs, so the same table as CSV and as Parquet gives the same
// accuracy to the last digit. ParquetDataset (ArrowDataset for a file named .arrow, .feather or
// .ipc) makes each column a field: every numeric column
// but the label is a feature (any integer or float type, converted to f32 with Tensor::to), each
// --categorical column of text an i64 field of codes (its distinct texts numbered in sorted
// byte order), shown to the model one-hot with one more input for a text the training file
// lacks. The label is an integer column (its values are the classes) or a column of text
// (numbered like a categorical column). With --missing nan a null number is NaN, which becomes
// the mean, and a null text is all zeros; without it a null is an error naming the file, row and
// column.
//
// Unlike CsvDataset, a table dataset does not hold the table in memory: the feature columns'
// means and deviations come from one pass of a Loader over the training rows before training.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
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

struct Options {
  std::filesystem::path train, test;
  double test_fraction = 0.1;
  std::string label = "label";
  std::vector<std::string> categorical;
  bool missing_nan = false;
  std::size_t epochs = 10;
  std::size_t batch = 256;
  double lr = 1e-3;
  std::size_t hidden = 128;
  std::uint64_t seed = 1;
  ferry::Device device = ferry::Device::best();
};

// ---- the data -------------------------------------------------------------------------------

// A table file's columns, sorted into features, categorical columns and the label.
struct Table {
  std::shared_ptr<const ferry::Dataset> file;
  // The categories of a categorical column (ParquetDataset's or ArrowDataset's).
  std::function<const std::vector<std::string>&(const std::string&)> categories;
  std::string format;                    // "Parquet" or "Arrow"
  std::size_t parts;                     // row groups or record batches
  std::vector<std::string> features;     // numeric columns, in the file's order
  std::vector<std::string> categorical;  // --categorical, in its order
  bool text_label = false;
};

// The file as a dataset, by its name: Arrow IPC for .arrow, .feather and .ipc, else Parquet.
template <typename Format>
Table as_table(std::shared_ptr<Format> file, std::string format, std::size_t parts) {
  return Table{file,
               [file](const std::string& column) -> const std::vector<std::string>& {
                 return file->categories(column);
               },
               std::move(format),
               parts,
               {},
               {},
               false};
}

Table open_file(const std::filesystem::path& path, const ferry::TableOptions& table) {
  const std::string ext = path.extension().string();
  if (ext == ".arrow" || ext == ".feather" || ext == ".ipc") {
    auto file = ferry::ArrowDataset::open({path}, table);
    return as_table(file, "Arrow", file->num_record_batches());
  }
  auto file = ferry::ParquetDataset::open({path}, table);
  return as_table(file, "Parquet", file->num_row_groups());
}

Table open_table(const std::filesystem::path& path, const Options& options) {
  ferry::TableOptions table;
  table.categorical = options.categorical;
  if (options.missing_nan) table.missing = ferry::Missing::nan;
  Table out = open_file(path, table);
  // A label of text (a ragged field of bytes) is read as categories too: open again so.
  bool text_label = false;
  for (const ferry::FieldSpec& field : out.file->fields()) {
    if (field.name == options.label && !field.shape.empty()) text_label = true;
  }
  if (text_label) {
    table.categorical.push_back(options.label);
    out = open_file(path, table);
  }
  out.categorical = options.categorical;  // one-hot in --categorical's order
  out.text_label = text_label;
  bool has_label = false;
  for (const ferry::FieldSpec& field : out.file->fields()) {
    const bool categorical = std::find(options.categorical.begin(), options.categorical.end(),
                                       field.name) != options.categorical.end();
    if (field.name == options.label) {
      has_label = true;
    } else if (field.shape.empty() && !categorical) {
      out.features.push_back(field.name);
    } else if (!categorical) {
      throw std::runtime_error("column \"" + field.name + "\" of " + path.string() +
                               " is not a number: name it in --categorical if it is text");
    }
  }
  if (!has_label) {
    throw std::runtime_error(path.string() + " has no column \"" + options.label + "\" (--label)");
  }
  return out;
}

// One field of a batch as f32 on the host, whatever its integer or float type.
ferry::Tensor as_floats(const ferry::Batch& batch, const std::string& name) {
  return batch[name].to(ferry::Device::cpu(), ferry::DType::f32);
}

// The model's inputs of a batch: the numeric features, x' = (x - mean) / std with the mean and
// standard deviation of the training rows (NaN, a missing value, becomes 0, the mean), then each
// categorical column one-hot, with one more input for a code the training file lacks.
class Inputs {
 public:
  // Reads the training rows once, in order, for the features' means and deviations (two
  // passes, the mean first, in double, as train_csv does).
  Inputs(const Table& table, std::shared_ptr<const ferry::Dataset> train_rows)
      : features_(table.features), mean_(features_.size()), inv_std_(features_.size()) {
    ferry::LoaderOptions in_order;
    in_order.batch_size = 1024;
    in_order.device = ferry::Device::cpu();
    ferry::Loader loader(std::move(train_rows), in_order);
    const std::size_t n = features_.size();
    std::vector<double> sum(n), sum_sq(n), count(n);
    for (int pass = 0; pass < 2; ++pass) {
      for (const ferry::Batch& batch : loader.epoch(0)) {
        for (std::size_t f = 0; f < n; ++f) {
          const ferry::Tensor x = as_floats(batch, features_[f]);
          const float* v = x.data<float>();
          for (std::size_t r = 0; r < batch.size(); ++r) {
            if (std::isnan(v[r])) continue;
            if (pass == 0) {
              sum[f] += v[r];
              count[f] += 1;
            } else {
              const double d = v[r] - sum[f] / count[f];
              sum_sq[f] += d * d;
            }
          }
        }
      }
    }
    for (std::size_t f = 0; f < n; ++f) {
      const double rows = std::max(count[f], 1.0);
      const double var = sum_sq[f] / rows;
      mean_[f] = static_cast<float>(sum[f] / rows);
      // A constant column is only centred, not divided by zero.
      inv_std_[f] = var > 1e-12 ? static_cast<float>(1.0 / std::sqrt(var)) : 1.0f;
    }
    width_ = n;
    for (const std::string& name : table.categorical) {
      categorical_.push_back({name, table.categories(name).size() + 1});
      width_ += categorical_.back().width;
    }
  }

  std::size_t width() const { return width_; }

  // A batch's inputs [n, width()] into `out` on the host. `to_train_code[c]` maps the codes of
  // categorical column c in the batch's file to the training file's (-1 stays missing).
  const float* apply(const ferry::Batch& batch,
                     const std::vector<std::vector<std::int64_t>>& to_train_code,
                     std::vector<float>& out) const {
    const std::size_t rows = batch.size();
    out.assign(rows * width_, 0.0f);
    for (std::size_t f = 0; f < features_.size(); ++f) {
      const ferry::Tensor x = as_floats(batch, features_[f]);
      const float* v = x.data<float>();
      for (std::size_t r = 0; r < rows; ++r) {
        const float z = (v[r] - mean_[f]) * inv_std_[f];
        out[r * width_ + f] = std::isnan(z) ? 0.0f : z;
      }
    }
    std::size_t at = features_.size();
    for (std::size_t c = 0; c < categorical_.size(); ++c) {
      const ferry::Tensor codes = batch[categorical_[c].name].cpu();  // i64 [n]
      const std::int64_t* code = codes.data<std::int64_t>();
      for (std::size_t r = 0; r < rows; ++r) {
        if (code[r] < 0) continue;  // missing: all zeros
        const std::int64_t mapped = to_train_code[c].at(static_cast<std::size_t>(code[r]));
        out[r * width_ + at + static_cast<std::size_t>(mapped)] = 1.0f;
      }
      at += categorical_[c].width;
    }
    return out.data();
  }

 private:
  struct Categorical {
    std::string name;
    std::size_t width;
  };
  std::vector<std::string> features_;
  std::vector<float> mean_, inv_std_;
  std::vector<Categorical> categorical_;
  std::size_t width_ = 0;
};

// Code i of `column` in `from` as a code of `train`: the index of the same text there, or
// `unknown` where the training file lacks it.
std::vector<std::int64_t> map_codes(const Table& train, const Table& from,
                                    const std::string& column, std::int64_t unknown) {
  const std::vector<std::string>& known = train.categories(column);
  std::vector<std::int64_t> to_train;
  for (const std::string& text : from.categories(column)) {
    const auto it = std::lower_bound(known.begin(), known.end(), text);
    to_train.push_back(it != known.end() && *it == text ? it - known.begin() : unknown);
  }
  return to_train;
}

// The classes: a label of text has its categories; an integer label, 0 to its largest value
// over the training rows.
std::size_t count_classes(const Table& table, const Options& options,
                          std::shared_ptr<const ferry::Dataset> rows) {
  if (table.text_label) return table.categories(options.label).size();
  ferry::LoaderOptions in_order;
  in_order.batch_size = 1024;
  in_order.device = ferry::Device::cpu();
  ferry::Loader loader(std::move(rows), in_order);
  std::int64_t largest = -1;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const ferry::Tensor y = batch[options.label].to(ferry::Device::cpu(), ferry::DType::i64);
    const std::int64_t* ids = y.data<std::int64_t>();
    for (std::size_t r = 0; r < batch.size(); ++r) {
      if (ids[r] < 0) {
        throw std::runtime_error("the label column \"" + options.label + "\" holds " +
                                 std::to_string(ids[r]) + ": classes are 0, 1, ...");
      }
      largest = std::max(largest, ids[r]);
    }
  }
  return static_cast<std::size_t>(largest + 1);
}

// A batch's labels as training class ids.
void labels_of(const ferry::Batch& batch, const std::string& label,
               const std::vector<std::int64_t>* to_train_class, std::vector<std::int64_t>& y) {
  const ferry::Tensor ids = batch[label].to(ferry::Device::cpu(), ferry::DType::i64);
  const std::int64_t* id = ids.data<std::int64_t>();
  y.assign(id, id + batch.size());
  for (std::int64_t& v : y) {
    // -1: a null label of text under --missing nan.
    if (v < 0) throw std::runtime_error("a row without a label (a null in \"" + label + "\")");
    if (to_train_class != nullptr) v = to_train_class->at(static_cast<std::size_t>(v));
  }
}

// ---- command line ---------------------------------------------------------------------------

constexpr const char* kUsage =
    "usage: train_table --train FILE [--test FILE | --test-fraction F] [--label NAME]\n"
    "                   [--categorical A,B,...] [--missing nan] [--epochs N] [--batch N]\n"
    "                   [--lr X] [--hidden N] [--seed S] [--device cpu|cuda|cuda:N]\n"
    "  --train FILE       Parquet or Arrow (.arrow) file to train on (a label column,\n"
    "                     numeric features)\n"
    "  --test FILE        file to measure accuracy on, with the same columns\n"
    "  --test-fraction F  without --test: hold out this fraction of the training rows\n"
    "                     (default 0.1)\n"
    "  --label NAME       the label column (default \"label\"): integers or text\n"
    "  --categorical A,B  columns of text read as categories (one-hot)\n"
    "  --missing nan      a null number is NaN (then the mean), a null text all zeros\n"
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
      options.label = value;
    } else if (flag == "--categorical") {
      options.categorical = common::split_list(value);
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
  // 1. The data: each column a field, read from the file when a batch needs its rows.
  const auto read_start = Clock::now();
  const Table train_table = open_table(options.train, options);
  const std::shared_ptr<const ferry::Dataset> train_file = train_table.file;

  // 2. The test rows: another file with the same columns, or a held-out part of this one.
  std::shared_ptr<const ferry::Dataset> train_set = train_file, test_set;
  std::vector<std::vector<std::int64_t>> train_codes, test_codes;
  for (const std::string& name : train_table.categorical) {
    std::vector<std::int64_t> same(train_table.categories(name).size());
    std::iota(same.begin(), same.end(), std::int64_t{0});
    train_codes.push_back(same);
  }
  test_codes = train_codes;
  std::vector<std::int64_t> test_classes;  // a test file's class ids as training ones
  if (!options.test.empty()) {
    const Table test_table = open_table(options.test, options);
    if (test_table.features != train_table.features ||
        test_table.categorical != train_table.categorical) {
      throw std::runtime_error(options.test.string() + " has other columns than " +
                               options.train.string());
    }
    test_codes.clear();
    for (const std::string& name : train_table.categorical) {
      const auto unknown = static_cast<std::int64_t>(train_table.categories(name).size());  // V
      test_codes.push_back(map_codes(train_table, test_table, name, unknown));
    }
    if (train_table.text_label) {
      test_classes = map_codes(train_table, test_table, options.label, -1);
      for (std::size_t i = 0; i < test_classes.size(); ++i) {
        if (test_classes[i] < 0) {
          throw std::runtime_error("the test file's class '" +
                                   test_table.categories(options.label)[i] +
                                   "' does not occur in the training file");
        }
      }
    }
    test_set = test_table.file;
  } else {
    if (train_file->size() < 2) throw std::runtime_error("too few rows to hold some out");
    auto [train_part, test_part] =
        common::split_rows(train_file->size(), options.test_fraction, options.seed);
    train_set = std::make_shared<common::Subset>(train_file, std::move(train_part));
    test_set = std::make_shared<common::Subset>(train_file, std::move(test_part));
  }
  const Inputs inputs(train_table, train_set);
  const std::size_t classes = count_classes(train_table, options, train_set);
  if (classes < 2 || classes > 10000) {
    throw std::runtime_error("the label column \"" + options.label + "\" of " +
                             options.train.string() + " gives " + std::to_string(classes) +
                             " classes; is it the right column (--label)?");
  }
  const double read_seconds = seconds_since(read_start);

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
      "categorical, %zu classes (%s opened and read once in %.2f s, %zu %s)\n",
      ferry::kVersion, options.device.str().c_str(), train_set->size(), test_set->size(),
      train_table.features.size(), train_table.categorical.size(), classes,
      train_table.format.c_str(), read_seconds, train_table.parts,
      train_table.format == "Arrow" ? "record batches" : "row groups");
  for (const std::string& name : train_table.categorical) {
    std::printf("categorical \"%s\": %zu categories, one-hot\n", name.c_str(),
                train_table.categories(name).size());
  }
  const std::size_t width = inputs.width();
  if (options.hidden == 0) {
    std::printf("model: softmax regression %zu-%zu, batches of %zu\n", width, classes,
                options.batch);
  } else {
    std::printf("model: MLP %zu-%zu-%zu with ReLU, batches of %zu\n", width, options.hidden,
                classes, options.batch);
  }
  std::fflush(stdout);  // before the progress bar, which goes to stderr

  // 4. The model and its optimizer.
  common::Mlp model(width, options.hidden, classes, options.seed);
  common::Trainer trainer(model, options.batch, static_cast<float>(options.lr));
  const std::vector<std::int64_t>* to_train_class = test_classes.empty() ? nullptr : &test_classes;

  std::vector<float> x;
  std::vector<std::int64_t> y;
  for (std::size_t epoch = 0; epoch < options.epochs; ++epoch) {
    const auto start = Clock::now();
    double loss_sum = 0;
    std::size_t samples = 0, done = 0;
    const std::size_t total = train_loader.batches_per_epoch();

    // 5. The training loop. Each batch is valid until the loop advances.
    for (const ferry::Batch& batch : train_loader.epoch(epoch)) {
      const float* features = inputs.apply(batch, train_codes, x);  // [n, inputs]
      labels_of(batch, options.label, nullptr, y);
      loss_sum += trainer.step(features, y.data(), batch.size());
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
    std::size_t correct = 0, seen = 0;
    for (const ferry::Batch& batch : test_loader.epoch(0)) {
      const float* features = inputs.apply(batch, test_codes, x);
      labels_of(batch, options.label, to_train_class, y);
      correct += model.count_correct(features, y.data(), batch.size());
      seen += batch.size();
    }
    std::printf("epoch %zu/%zu: mean training loss %.4f, %.0f samples/s (%.1f s)\n", epoch + 1,
                options.epochs, loss_sum / static_cast<double>(samples),
                static_cast<double>(samples) / train_seconds, train_seconds);
    std::printf("test accuracy: %.4f\n", static_cast<double>(correct) / static_cast<double>(seen));
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
    std::fprintf(stderr, "train_table: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return train(options);
  } catch (const std::exception& e) {
    // ferry's errors say what and where: the file, row group, row and column.
    std::fprintf(stderr, "\ntrain_table: %s\n", e.what());
    return 1;
  }
}
