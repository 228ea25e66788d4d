#pragma once

// Where everything of one batch lies in one buffer: the fields as the dataset writes them (the
// bytes that cross the bus), then each field operation's result, then, when a field is gathered
// from rows in memory, the batch's indices. Staging slots and device buffers share it.

#include <cstddef>
#include <memory>
#include <vector>

#include "ferry/dataset.hpp"
#include "pipeline/field_ops.hpp"
#include "pipeline/staging.hpp"

namespace ferry::detail {

struct BatchLayout {
  /// `ops[f]`: field f's operations, in order; `rows[f]`: the rows a ragged field f's region
  /// holds. \throws ConfigError when a size overflows.
  BatchLayout(const std::vector<FieldSpec>& fields, std::size_t capacity,
              std::vector<std::vector<std::unique_ptr<FieldOp>>> ops,
              const std::vector<std::uint64_t>& rows = {});

  std::size_t capacity;          ///< samples per batch
  SlotLayout written;            ///< the fields as the dataset writes them
  std::vector<FieldPlan> plans;  ///< per field: operations and the regions of their results
  std::size_t bytes = 0;         ///< the buffer, every region included
  bool gather = false;           ///< some field comes from rows in memory
  std::size_t index_offset = 0;  ///< gather: where the batch's indices lie (device buffer)
  std::size_t index_bytes = 0;   ///< gather: room for capacity indices

  /// Whether any field has an operation to run.
  bool has_ops() const noexcept;
  /// Byte offset of field f's delivered samples.
  std::size_t delivered_offset(std::size_t f) const noexcept { return plans[f].regions.back(); }
};

}  // namespace ferry::detail
