// ferry::read_sample: one sample read as a loader reads it, for looking at it (not fast).

#include "ferry/read_sample.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/error.hpp"
#include "ferry/ops.hpp"
#include "ferry/tensor.hpp"
#include "pipeline/sampler.hpp"
#include "pipeline/staging.hpp"

namespace ferry {

std::vector<std::pair<std::string, Tensor>> read_sample(const Dataset& dataset, std::size_t index,
                                                        std::uint64_t seed, std::uint64_t epoch) {
  const std::size_t size = dataset.size();
  if (index >= size) {
    throw ConfigError("read_sample: index " + std::to_string(index) + " is past the last sample (" +
                      std::to_string(size) + (size == 1 ? " sample)" : " samples)"));
  }
  const std::string where = "sample " + std::to_string(index) + ": ";
  const std::vector<FieldSpec> fields = dataset.fields();
  // A ragged field's region holds exactly this sample's rows.
  std::vector<std::uint64_t> region_rows(fields.size(), 0);
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!fields[f].is_ragged()) continue;
    std::int64_t rows = 0;
    try {
      rows = dataset.length(index, f);  // a whole sound file's: its header read and checked
    } catch (const DataError& e) {
      throw DataError(where + e.what());
    }
    if (rows < 0) {
      throw DataError(where + "field \"" + fields[f].name + "\" has " + std::to_string(rows) +
                      " rows");
    }
    region_rows[f] = static_cast<std::uint64_t>(rows);
  }
  const detail::SlotLayout layout(fields, 1, region_rows);
  detail::BatchRows rows;
  rows.reset(layout.ragged_count(), 1);
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const int r = layout.ragged[f];
    if (r < 0) continue;
    const auto at = static_cast<std::size_t>(r);
    rows.lengths[at] = static_cast<std::int64_t>(region_rows[f]);
    rows.padded[at] = rows.lengths[at];
    rows.rows[at] = region_rows[f];
  }
  std::vector<std::byte> slot(layout.bytes);
  try {
    // The loader's seed for the sample at position `index` of epoch `epoch` (fill.cpp).
    dataset.read(index, detail::SampleRefs::make(&layout, slot.data(), 0,
                                                 detail::sample_seed(seed, epoch, index), &rows));
  } catch (const DataError& e) {
    throw DataError(where + e.what());
  }
  std::vector<std::pair<std::string, Tensor>> out;
  out.reserve(fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) {
    const FieldSpec& spec = fields[f];
    std::vector<std::int64_t> shape = spec.shape;
    std::size_t bytes = layout.sample_bytes[f];
    if (spec.is_ragged()) {
      shape[0] = static_cast<std::int64_t>(region_rows[f]);
      bytes *= region_rows[f];
    }
    Tensor t =
        Tensor::from_bytes(slot.data() + layout.offsets[f], bytes, std::move(shape), spec.dtype);
    // As the loader converts such a field after the read: normalize->dtype [C, H, W].
    if (spec.normalize) t = normalize_images(t, *spec.normalize);
    out.emplace_back(spec.name, std::move(t));
  }
  return out;
}

}  // namespace ferry
