#include "pipeline/batch_layout.hpp"

#include <string>
#include <utility>

#include "core/checked.hpp"

namespace ferry::detail {

namespace {

std::size_t align(std::size_t n, const std::string& what) {
  return checked_add(n, SlotLayout::kAlignment - 1, what) / SlotLayout::kAlignment *
         SlotLayout::kAlignment;
}

}  // namespace

BatchLayout::BatchLayout(const std::vector<FieldSpec>& fields, std::size_t capacity_,
                         std::vector<std::vector<std::unique_ptr<FieldOp>>> ops,
                         const std::vector<std::uint64_t>& rows)
    : capacity(capacity_), written(fields, capacity_, rows) {
  const std::string what = "Loader: batch of " + std::to_string(capacity);
  std::size_t at = align(written.bytes, what);
  plans.resize(fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) {
    FieldPlan& plan = plans[f];
    plan.ops = std::move(ops[f]);
    plan.regions.push_back(written.offsets[f]);
    plan.region_sample_bytes.push_back(written.sample_bytes[f]);
    plan.delivered = FieldSpec{fields[f].name, fields[f].dtype, fields[f].shape};
    for (const auto& op : plan.ops) {
      plan.delivered = op->output();
      if (op->source()) {
        gather = true;
        continue;
      }
      if (plan.delivered.is_ragged()) {  // its size is the batch's, 0 when every row is empty
        plan.regions.push_back(at);
        plan.region_sample_bytes.push_back(0);  // ragged: no per-sample size
        at = align(checked_add(at, op->region_bytes(), what), what);
        continue;
      }
      const std::size_t n = checked_nbytes(plan.delivered.shape, dtype_size(plan.delivered.dtype),
                                           "Loader: field \"" + fields[f].name + "\"");
      plan.regions.push_back(at);
      plan.region_sample_bytes.push_back(n);
      at = align(checked_add(at, checked_mul(n, capacity, what), what), what);
    }
  }
  if (gather) {
    index_offset = at;
    index_bytes = checked_mul(capacity, sizeof(std::uint64_t), what);
    at = checked_add(at, index_bytes, what);
  }
  bytes = at == 0 ? 1 : at;
}

bool BatchLayout::has_ops() const noexcept {
  for (const FieldPlan& p : plans) {
    if (!p.ops.empty()) return true;
  }
  return false;
}

}  // namespace ferry::detail
