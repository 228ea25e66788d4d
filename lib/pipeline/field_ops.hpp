#pragma once

// What happens to a field between the dataset and the consumer: a per-field list of operations
// (gather rows, dtype conversion, HWC -> CHW, normalize), each written once against OpRunner,
// the one interface with a CPU and a device implementation. Without a copy stage the workers
// run a field's operations per sample right after read() (HostOps); with one, the copy stage
// queues them for the whole batch behind its copy (EngineOps: CUDA kernels on a GPU, their CPU
// twins on the host engine), so only the dataset's bytes cross the bus.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "copy/copy_engine.hpp"
#include "core/image_ops.hpp"
#include "core/row_ops.hpp"
#include "ferry/dataset.hpp"
#include "pipeline/staging.hpp"

namespace ferry::detail {

/// Runs the operations' element work somewhere.
class OpRunner {
 public:
  OpRunner() = default;
  OpRunner(const OpRunner&) = delete;
  OpRunner& operator=(const OpRunner&) = delete;
  virtual ~OpRunner() = default;
  virtual void convert_image(const ImageConvert& args) = 0;
  virtual void convert(const void* src, DType from, void* dst, DType to, std::size_t count) = 0;
  /// dst row i = src row indices[i], for `count` rows of `row_bytes`.
  virtual void gather(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                      std::size_t row_bytes) = 0;
  virtual void pad_rows(const PadRows& args) = 0;
};

/// The CPU implementation: the work runs at once on the calling thread.
class HostOps final : public OpRunner {
 public:
  void convert_image(const ImageConvert& args) override;
  void convert(const void* src, DType from, void* dst, DType to, std::size_t count) override;
  void gather(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
              std::size_t row_bytes) override;
  void pad_rows(const PadRows& args) override;
};

/// The device implementation: the work is queued on a copy engine's stream, in order.
class EngineOps final : public OpRunner {
 public:
  explicit EngineOps(CopyEngine& engine) noexcept : engine_(engine) {}
  void convert_image(const ImageConvert& args) override;
  void convert(const void* src, DType from, void* dst, DType to, std::size_t count) override;
  void gather(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
              std::size_t row_bytes) override;
  void pad_rows(const PadRows& args) override;

 private:
  CopyEngine& engine_;
};

/// The samples an operation runs on: [first, first + count) of the batch in `buffer`.
struct OpSpan {
  std::byte* buffer = nullptr;
  const std::uint64_t* indices = nullptr;  ///< the batch's dataset indices, in the runner's memory
  std::size_t first = 0;
  std::size_t count = 0;
  const SlotLayout* layout = nullptr;  ///< for batch operations on ragged fields
  const BatchRows* rows = nullptr;     ///< (host memory) where their samples lie
};

/// One operation on one field. It reads the field's samples at `in` (byte offset of sample 0's
/// region in the buffer) and writes its result at `out`; a source writes the field from
/// elsewhere (rows in memory) and reads nothing.
class FieldOp {
 public:
  FieldOp() = default;
  FieldOp(const FieldOp&) = delete;
  FieldOp& operator=(const FieldOp&) = delete;
  virtual ~FieldOp() = default;
  /// The field after this operation (per sample).
  virtual const FieldSpec& output() const noexcept = 0;
  virtual void run(OpRunner& runner, const OpSpan& span, std::size_t in, std::size_t out) const = 0;
  /// Writes the field from elsewhere instead of transforming it.
  virtual bool source() const noexcept { return false; }
  /// For a ragged result (output().is_ragged()), which has no per-sample size: the bytes of the
  /// result's region for a whole batch (0 when the field's rows are all empty). Otherwise unused:
  /// the region is output().sample_bytes() x the batch's capacity.
  virtual std::size_t region_bytes() const noexcept { return 0; }
};

/// Rows in memory (a dataset's rows_in_memory()) gathered by the batch's indices.
std::unique_ptr<FieldOp> gather_rows(const FieldSpec& field, const std::byte* rows);
/// u8 [H, W, C] -> normalize.dtype [C, H, W], (x * scale - mean) / std per channel.
/// \throws ConfigError naming the field for what cannot be normalized.
std::unique_ptr<FieldOp> normalize_image(const FieldSpec& field);
/// The same values as `dtype` (ferry::convert's rules).
std::unique_ptr<FieldOp> convert_dtype(const FieldSpec& field, DType dtype);
/// A ragged field written packed (the samples' rows one after another) to padded
/// [N, Lmax, ...] rows with `pad` (one element of the dtype), for a whole batch: the batch's
/// Lmax and tables come from the OpSpan. `region_rows`: rows the padded region holds.
std::unique_ptr<FieldOp> pad_ragged(const FieldSpec& field, int ragged_index,
                                    std::uint64_t region_rows, std::uint64_t pad);
/// [H, W, C] -> [C, H, W], the same dtype.
/// \throws ConfigError naming the field unless it has three dimensions.
std::unique_ptr<FieldOp> hwc_to_chw(const FieldSpec& field);

/// A field's operations, in order, and where each result lies in a batch buffer.
struct FieldPlan {
  std::vector<std::unique_ptr<FieldOp>> ops;
  /// regions[0]: the field as the dataset (or a source operation) writes it; regions[r + 1]:
  /// the result of the r-th operation that is not a source. Byte offsets of sample 0.
  std::vector<std::size_t> regions;
  std::vector<std::size_t> region_sample_bytes;
  FieldSpec delivered;  ///< what the consumer gets, per sample

  /// Runs every operation on `span`.
  void run(OpRunner& runner, const OpSpan& span) const;
  /// Whether any operation is a source (the dataset is not read for this field).
  bool has_source() const noexcept;
};

}  // namespace ferry::detail
