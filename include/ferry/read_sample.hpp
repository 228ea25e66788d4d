#pragma once

/// \file One sample of any dataset as a loader delivers it: for looking at samples (a notebook,
/// a test), not for training (a Loader reads in parallel and batches).

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/tensor.hpp"

namespace ferry {

/// Sample `index` of `dataset` as a loader delivers it, for looking at one (not fast): its
/// fields in fields() order, by name, each a CPU tensor of the field's dtype and per-sample
/// shape (a ragged field: its own length(index, f) rows), a field with FieldSpec::normalize
/// converted as the loader converts it (normalize->dtype [C, H, W]). read() gets the seed that a
/// loader with LoaderOptions::seed `seed` gives the sample in epoch `epoch`, so random
/// augmentations are the ones its batches hold (for a dataset that selects its epochs' samples,
/// a Mixture, the loader seeds by the sample's position in the epoch: `index` stands for it
/// here). \throws ConfigError when index >= size(); what read() throws, a DataError with
/// "sample <index>: " before its text.
FERRY_API std::vector<std::pair<std::string, Tensor>> read_sample(const Dataset& dataset,
                                                                  std::size_t index,
                                                                  std::uint64_t seed = 0,
                                                                  std::uint64_t epoch = 0);

}  // namespace ferry
