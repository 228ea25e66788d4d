#include "pipeline/field_ops.hpp"

#include <cstring>
#include <string>
#include <utility>

#include "ferry/dtype.hpp"
#include "ferry/error.hpp"
#include "ferry/ops.hpp"

namespace ferry::detail {

// ---- runners

void HostOps::convert_image(const ImageConvert& args) { convert_image_cpu(args); }

void HostOps::convert(const void* src, DType from, void* dst, DType to, std::size_t count) {
  ferry::convert(src, from, dst, to, count);
}

void HostOps::gather(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                     std::size_t row_bytes) {
  gather_rows_cpu(src, dst, indices, count, row_bytes);
}

void HostOps::pad_rows(const PadRows& args) { pad_rows_cpu(args); }

void EngineOps::pad_rows(const PadRows& args) { engine_.pad_rows_async(args); }

void EngineOps::convert_image(const ImageConvert& args) { engine_.convert_image_async(args); }

void EngineOps::convert(const void* src, DType from, void* dst, DType to, std::size_t count) {
  engine_.convert_async(src, from, dst, to, count);
}

void EngineOps::gather(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                       std::size_t row_bytes) {
  engine_.gather_async(src, dst, indices, count, row_bytes);
}

namespace {

// ---- operations

class GatherRows final : public FieldOp {
 public:
  GatherRows(FieldSpec field, const std::byte* rows) : out_(std::move(field)), rows_(rows) {}
  const FieldSpec& output() const noexcept override { return out_; }
  bool source() const noexcept override { return true; }
  void run(OpRunner& runner, const OpSpan& span, std::size_t /*in*/,
           std::size_t out) const override {
    const std::size_t n = out_.sample_bytes();
    if (span.count == 0 || n == 0) return;
    runner.gather(rows_, span.buffer + out + span.first * n, span.indices + span.first, span.count,
                  n);
  }

 private:
  FieldSpec out_;
  const std::byte* rows_;
};

// Both image operations: ImageConvert over [n, H, W, C].
class ImageOp final : public FieldOp {
 public:
  ImageOp(const FieldSpec& in, const ImageConvert& args, FieldSpec out)
      : in_bytes_(in.sample_bytes()), args_(args), out_(std::move(out)) {}
  const FieldSpec& output() const noexcept override { return out_; }
  void run(OpRunner& runner, const OpSpan& span, std::size_t in, std::size_t out) const override {
    if (span.count == 0) return;
    ImageConvert a = args_;
    a.n = static_cast<std::int64_t>(span.count);
    a.src = span.buffer + in + span.first * in_bytes_;
    a.dst = span.buffer + out + span.first * out_.sample_bytes();
    runner.convert_image(a);
  }

 private:
  std::size_t in_bytes_;
  ImageConvert args_;
  FieldSpec out_;
};

class ConvertDType final : public FieldOp {
 public:
  ConvertDType(const FieldSpec& in, DType to)
      : from_(in.dtype),
        out_{in.name, to, in.shape},
        elements_(in.sample_bytes() / dtype_size(in.dtype)) {}
  const FieldSpec& output() const noexcept override { return out_; }
  void run(OpRunner& runner, const OpSpan& span, std::size_t in, std::size_t out) const override {
    if (span.count == 0 || elements_ == 0) return;
    runner.convert(span.buffer + in + span.first * elements_ * dtype_size(from_), from_,
                   span.buffer + out + span.first * out_.sample_bytes(), out_.dtype,
                   span.count * elements_);
  }

 private:
  DType from_;
  FieldSpec out_;
  std::size_t elements_;
};

class PadRagged final : public FieldOp {
 public:
  PadRagged(const FieldSpec& field, int ragged_index, std::uint64_t region_rows, std::uint64_t pad)
      : out_(field),
        r_(static_cast<std::size_t>(ragged_index)),
        pad_(pad),
        row_bytes_(field.sample_bytes()),  // of one row
        region_bytes_(static_cast<std::size_t>(region_rows) * row_bytes_) {}
  const FieldSpec& output() const noexcept override { return out_; }
  std::size_t region_bytes() const noexcept override { return region_bytes_; }
  void run(OpRunner& runner, const OpSpan& span, std::size_t in, std::size_t out) const override {
    if (span.count == 0) return;
    PadRows a;
    a.src = span.buffer + in;
    a.dst = span.buffer + out;
    a.starts = reinterpret_cast<const std::int32_t*>(span.buffer + span.layout->starts_offsets[r_]);
    a.lengths =
        reinterpret_cast<const std::int64_t*>(span.buffer + span.layout->lengths_offsets[r_]);
    a.count = static_cast<std::int64_t>(span.count);
    a.lmax = span.rows->padded[r_];
    a.row_bytes = row_bytes_;
    a.element = dtype_size(out_.dtype);
    a.pad = pad_;
    runner.pad_rows(a);
  }

 private:
  FieldSpec out_;
  std::size_t r_;
  std::uint64_t pad_;
  std::size_t row_bytes_ = 0;
  std::size_t region_bytes_ = 0;
};

std::string where(const FieldSpec& field, const char* op) {
  return "Loader: field \"" + field.name + "\" (" + op + ")";
}

void check_hwc(const FieldSpec& field, const std::string& w) {
  if (field.shape.size() != 3) {
    throw ConfigError(w + ": the field must be [H, W, C], not of " +
                      std::to_string(field.shape.size()) + " dimensions");
  }
}

}  // namespace

std::unique_ptr<FieldOp> gather_rows(const FieldSpec& field, const std::byte* rows) {
  FieldSpec out{field.name, field.dtype, field.shape};
  return std::make_unique<GatherRows>(std::move(out), rows);
}

std::unique_ptr<FieldOp> normalize_image(const FieldSpec& field) {
  const std::string w = where(field, "normalize");
  if (field.dtype != DType::u8) {
    throw ConfigError(w + ": the dataset must write u8 [H, W, C], not " +
                      std::string(dtype_name(field.dtype)));
  }
  check_hwc(field, w);
  ImageConvert args;
  args.h = field.shape[0];
  args.w = field.shape[1];
  args.c = field.shape[2];
  set_normalize(*field.normalize, w.c_str(), args);
  FieldSpec out{field.name, field.normalize->dtype, {args.c, args.h, args.w}};
  return std::make_unique<ImageOp>(field, args, std::move(out));
}

std::unique_ptr<FieldOp> convert_dtype(const FieldSpec& field, DType dtype) {
  return std::make_unique<ConvertDType>(field, dtype);
}

std::unique_ptr<FieldOp> pad_ragged(const FieldSpec& field, int ragged_index,
                                    std::uint64_t region_rows, std::uint64_t pad) {
  return std::make_unique<PadRagged>(field, ragged_index, region_rows, pad);
}

std::unique_ptr<FieldOp> hwc_to_chw(const FieldSpec& field) {
  check_hwc(field, where(field, "HWC to CHW"));
  ImageConvert args;
  args.src_dtype = args.dst_dtype = field.dtype;
  args.h = field.shape[0];
  args.w = field.shape[1];
  args.c = field.shape[2];
  args.to_chw = true;
  FieldSpec out{field.name, field.dtype, {args.c, args.h, args.w}};
  return std::make_unique<ImageOp>(field, args, std::move(out));
}

void FieldPlan::run(OpRunner& runner, const OpSpan& span) const {
  std::size_t r = 0;
  for (const auto& op : ops) {
    if (op->source()) {
      op->run(runner, span, regions[0], regions[0]);
    } else {
      op->run(runner, span, regions[r], regions[r + 1]);
      ++r;
    }
  }
}

bool FieldPlan::has_source() const noexcept {
  for (const auto& op : ops) {
    if (op->source()) return true;
  }
  return false;
}

}  // namespace ferry::detail
