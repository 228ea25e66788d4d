// samples/common/rows.hpp: a part of a dataset's rows as a dataset of its own, and a seeded
// random split of rows into training and held-out parts (train_csv, train_table). Copy it along
// with the sample that uses it.

#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"

namespace common {

// Rows `indices` of another dataset, as a dataset of their own: the training and held-out parts
// of one file. read() is called from the loader's worker threads; it only forwards.
class Subset final : public ferry::Dataset {
 public:
  Subset(std::shared_ptr<const ferry::Dataset> base, std::vector<std::size_t> indices)
      : base_(std::move(base)), indices_(std::move(indices)) {}

  std::size_t size() const override { return indices_.size(); }
  std::vector<ferry::FieldSpec> fields() const override { return base_->fields(); }
  void read(std::size_t index, ferry::SampleRef out) const override {
    base_->read(indices_.at(index), out);
  }
  void prefetch(std::size_t index) const noexcept override {
    if (index < indices_.size()) base_->prefetch(indices_[index]);
  }

 private:
  std::shared_ptr<const ferry::Dataset> base_;
  std::vector<std::size_t> indices_;
};

// Splits rows [0, rows) at random into (training, held-out), `fraction` of them held out; each
// part in file order. The same seed gives the same split.
std::pair<std::vector<std::size_t>, std::vector<std::size_t>> split_rows(std::size_t rows,
                                                                         double fraction,
                                                                         std::uint64_t seed) {
  std::vector<std::size_t> order(rows);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  const auto held_out = std::clamp<std::size_t>(
      static_cast<std::size_t>(std::llround(fraction * static_cast<double>(rows))), 1, rows - 1);
  std::vector<std::size_t> test(order.begin(),
                                order.begin() + static_cast<std::ptrdiff_t>(held_out));
  std::vector<std::size_t> train(order.begin() + static_cast<std::ptrdiff_t>(held_out),
                                 order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());
  return {std::move(train), std::move(test)};
}

}  // namespace common
