// ferry's kernel launchers (copy/cuda/kernels.hpp) for cudasim: each queues, on the stream, the
// kernel's CPU twin on the host addresses behind the device pointers. The launch path, the
// stream ordering and the memory the kernel touches are the real build's; the kernels' own code
// runs only on a GPU (tests/cuda compares it with the same twins there).

#include <algorithm>
#include <cstdint>

#include "copy/cuda/kernels.hpp"
#include "cudasim.hpp"
#include "ferry/dtype.hpp"
#include "runtime/cuda/cuda_handles.hpp"

namespace ferry::detail::cuda {
namespace {

void queue(void* stream, std::function<void()> work) {
  FERRY_CUDA_CHECK(ferry_cudasim::launch(static_cast<cudaStream_t>(stream), std::move(work)));
}

std::size_t bytes_of(std::int64_t elements, DType dtype) {
  return static_cast<std::size_t>(elements) * dtype_size(dtype);
}

}  // namespace

void launch_convert_image(const ImageConvert& args, void* stream) {
  const std::int64_t total = args.n * args.h * args.w * args.c;
  if (total == 0) return;
  queue(stream, [args, total] {
    ImageConvert a = args;
    a.src = ferry_cudasim::host_address(args.src, bytes_of(total, args.src_dtype));
    a.dst = ferry_cudasim::host_address(
        args.dst, bytes_of(total, args.normalize ? args.dst_dtype : args.src_dtype));
    convert_image_cpu(a);
  });
}

void launch_gather_rows(const void* src, void* dst, const std::uint64_t* indices, std::size_t count,
                        std::size_t row_bytes, void* stream) {
  if (count == 0 || row_bytes == 0) return;
  queue(stream, [=] {
    const auto* index = static_cast<const std::uint64_t*>(
        ferry_cudasim::host_address(indices, count * sizeof(std::uint64_t)));
    auto* out = static_cast<std::byte*>(ferry_cudasim::host_address(dst, count * row_bytes));
    for (std::size_t i = 0; i < count; ++i) {
      const void* row = static_cast<const std::byte*>(src) + index[i] * row_bytes;
      std::copy_n(static_cast<const std::byte*>(ferry_cudasim::host_address(row, row_bytes)),
                  row_bytes, out + i * row_bytes);
    }
  });
}

void launch_pad_rows(const PadRows& args, void* stream) {
  if (args.count == 0 || args.lmax == 0 || args.row_bytes == 0) return;
  queue(stream, [args] {
    const auto count = static_cast<std::size_t>(args.count);
    PadRows a = args;
    a.starts = static_cast<const std::int32_t*>(
        ferry_cudasim::host_address(args.starts, (count + 1) * sizeof(std::int32_t)));
    a.lengths = static_cast<const std::int64_t*>(
        ferry_cudasim::host_address(args.lengths, count * sizeof(std::int64_t)));
    std::int64_t rows = 0;  // the packed rows the samples span
    for (std::size_t i = 0; i < count; ++i) rows = std::max(rows, a.starts[i] + a.lengths[i]);
    a.src = ferry_cudasim::host_address(args.src, static_cast<std::size_t>(rows) * args.row_bytes);
    a.dst = ferry_cudasim::host_address(
        args.dst, static_cast<std::size_t>(args.count * args.lmax) * args.row_bytes);
    pad_rows_cpu(a);
  });
}

void launch_convert(const void* src, DType from, void* dst, DType to, std::size_t count,
                    void* stream) {
  if (count == 0) return;
  queue(stream, [=] {
    const auto n = static_cast<std::int64_t>(count);
    ferry::convert(ferry_cudasim::host_address(src, bytes_of(n, from)), from,
                   ferry_cudasim::host_address(dst, bytes_of(n, to)), to, count);
  });
}

}  // namespace ferry::detail::cuda
