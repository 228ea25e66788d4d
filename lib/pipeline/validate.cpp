// The checks a Loader's options and dataset pass before anything is built: every refusal is a
// ConfigError naming the option or field.

#include "pipeline/validate.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/checked.hpp"
#include "pipeline/loader_impl.hpp"
#include "pipeline/sampler.hpp"
#include "pipeline/testing.hpp"

namespace ferry::detail {

void validate_options(const Dataset* dataset, const LoaderOptions& o, const SimulatedCopy& sim) {
  if (sim.enabled && !o.device.is_cpu()) {
    throw ConfigError(
        "Loader: the simulated copy stands in for a GPU; the device must be cpu, not " +
        o.device.str());
  }
  if (dataset == nullptr) throw ConfigError("Loader: no dataset");
  if (o.batch_size == 0) throw ConfigError("Loader: batch_size must be at least 1");
  if (o.prefetch < 1) {
    throw ConfigError("Loader: prefetch must be at least 1, got " + std::to_string(o.prefetch));
  }
  if (o.device_buffers < 2) {
    throw ConfigError("Loader: device_buffers must be at least 2, got " +
                      std::to_string(o.device_buffers));
  }
  if (o.workers < 0 || o.workers > kMaxWorkers) {
    throw ConfigError("Loader: workers must lie in [0, " + std::to_string(kMaxWorkers) + "], got " +
                      std::to_string(o.workers));
  }
  if (o.prefetch > kMaxBuffers || o.device_buffers > kMaxBuffers) {
    throw ConfigError("Loader: prefetch and device_buffers must be at most " +
                      std::to_string(kMaxBuffers) + ", got " + std::to_string(o.prefetch) +
                      " and " + std::to_string(o.device_buffers));
  }
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size) {
    throw ConfigError("Loader: rank " + std::to_string(o.rank) + " is outside world_size " +
                      std::to_string(o.world_size));
  }
  const auto fields = dataset->fields();
  if (fields.empty()) throw ConfigError("Loader: the dataset has no fields");
  const std::size_t size = dataset->size();
  const std::size_t epoch = epoch_length(*dataset);
  const std::span<const Tensor> rows = dataset->rows_in_memory();
  if (!rows.empty()) {
    // The rows stand for the samples: they must be exactly what fields() and size() say.
    if (rows.size() != fields.size()) {
      throw ConfigError("Loader: the dataset has " + std::to_string(fields.size()) +
                        " fields but " + std::to_string(rows.size()) + " tensors of rows");
    }
    for (std::size_t f = 0; f < rows.size(); ++f) {
      const Tensor& t = rows[f];
      std::vector<int64_t> shape{static_cast<int64_t>(size)};
      shape.insert(shape.end(), fields[f].shape.begin(), fields[f].shape.end());
      if (!t.defined() || t.dtype() != fields[f].dtype || t.shape() != shape ||
          t.device() != rows[0].device()) {
        throw ConfigError("Loader: the dataset's rows of field \"" + fields[f].name +
                          "\" are not its samples (dtype, shape or device)");
      }
    }
    const Device where = rows[0].device();
    if (!where.is_cpu() && where != o.device) {
      throw ConfigError("Loader: the dataset's rows live on " + where.str() +
                        "; its loader must run there too, not on " + o.device.str());
    }
  }
  if (epoch > 0 && static_cast<std::size_t>(o.world_size) > epoch) {
    throw ConfigError("Loader: world_size " + std::to_string(o.world_size) + " exceeds the " +
                      std::to_string(epoch) + " samples" + (epoch != size ? " of an epoch" : ""));
  }
  // The sampler pads a rank's share by wrapping: size + world_size must not overflow.
  static_cast<void>(checked_add(epoch, o.world_size, "Loader: dataset size + world_size"));
  for (const FieldSpec& f : fields) {
    const std::string what = "Loader: field \"" + f.name + "\"";
    // A ragged field's size is its row's (shape[1:]); the rows come from Dataset::length.
    const std::span<const std::int64_t> shape(f.shape.data() + (f.is_ragged() ? 1 : 0),
                                              f.shape.size() - (f.is_ragged() ? 1 : 0));
    static_cast<void>(checked_nbytes(shape, dtype_size(f.dtype), what));
    if (f.is_ragged() && f.normalize) {
      throw ConfigError(what + ": a ragged field cannot be normalized as an image");
    }
  }
}

}  // namespace ferry::detail
