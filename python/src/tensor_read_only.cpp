// The read-only host memory ferry views: read-only numpy arrays (np.frombuffer,
// np.memmap(mode="r")), which numpy will not export as DLPack, taken through their buffer.

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "tensor_dlpack.hpp"

namespace ferry::python {

namespace {

/// The host memory of the read-only arrays ferry views (np.frombuffer, np.memmap(mode="r")), as
/// [begin, end) ranges, while it does. A tensor whose data lies in one is read-only: numpy()
/// gives a read-only view of it and a DLPack export says so (or is refused where it cannot).
std::mutex read_only_mutex;
std::vector<std::pair<std::uintptr_t, std::uintptr_t>> read_only_ranges;  // guarded by the mutex

void add_read_only(std::uintptr_t begin, std::uintptr_t end) {
  const std::lock_guard<std::mutex> lock(read_only_mutex);
  read_only_ranges.emplace_back(begin, end);
}

void remove_read_only(std::uintptr_t begin, std::uintptr_t end) {
  const std::lock_guard<std::mutex> lock(read_only_mutex);
  const auto it = std::find(read_only_ranges.begin(), read_only_ranges.end(),
                            std::pair<std::uintptr_t, std::uintptr_t>(begin, end));
  if (it != read_only_ranges.end()) read_only_ranges.erase(it);
}

}  // namespace

/// Whether host address `data` lies in read-only memory ferry views.
bool is_read_only(const void* data) {
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::lock_guard<std::mutex> lock(read_only_mutex);
  return std::any_of(read_only_ranges.begin(), read_only_ranges.end(),
                     [&](const auto& r) { return r.first <= at && at < r.second; });
}

namespace {

/// A read-only numpy array (np.frombuffer of bytes, np.memmap(mode="r")) as ferry takes it: its
/// buffer, described as DLPack (which numpy will not export read-only), holding a reference to
/// the array; the memory is marked read-only while it is viewed.
struct ReadOnlyArray {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> strides;
  PyObject* array = nullptr;  // a reference
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};

void read_only_deleter(DLManagedTensor* self) {
  auto* held = static_cast<ReadOnlyArray*>(self->manager_ctx);
  if (held->end != held->begin) remove_read_only(held->begin, held->end);
  if (const GilIfUsable gil; gil.held()) Py_XDECREF(held->array);
  delete held;
}

}  // namespace

Tensor from_read_only_array(const py::array& a) {
  const py::dtype dtype = a.dtype();
  const char kind = dtype.kind();
  if (!dtype.attr("isnative").cast<bool>()) {
    throw py::buffer_error("ferry.from_dlpack: an array of non-native byte order (" +
                           py::str(py::object(dtype)).cast<std::string>() + ")");
  }
  DLDataType type{};
  switch (kind) {
    case 'u':
      type.code = kDLUInt;
      break;
    case 'i':
      type.code = kDLInt;
      break;
    case 'f':
      type.code = kDLFloat;
      break;
    case 'c':
      type.code = kDLComplex;
      break;
    case 'b':
      type.code = 6;  // kDLBool (DLPack 0.8): ferry refuses it by name
      break;
    default:
      throw py::buffer_error("ferry.from_dlpack: an array of dtype " +
                             py::str(py::object(dtype)).cast<std::string>() +
                             " (ferry takes numbers)");
  }
  const py::ssize_t item = dtype.itemsize();
  type.bits = static_cast<std::uint8_t>(item * 8);
  type.lanes = 1;
  const auto n = static_cast<std::size_t>(a.ndim());
  std::vector<std::int64_t> strides(n);
  for (std::size_t d = 0; d < n; ++d) {
    const py::ssize_t stride = a.strides(static_cast<py::ssize_t>(d));
    if (stride % item != 0) {
      throw py::buffer_error("ferry.from_dlpack: an array whose strides are not whole items");
    }
    strides[d] = stride / item;
  }
  auto* held = new ReadOnlyArray;
  held->shape.assign(a.shape(), a.shape() + n);
  held->strides = std::move(strides);
  held->array = a.inc_ref().ptr();
  held->managed.manager_ctx = held;
  held->managed.deleter = read_only_deleter;
  DLTensor& dl = held->managed.dl_tensor;
  dl.data = const_cast<void*>(a.data());  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<std::int32_t>(n);
  dl.dtype = type;
  dl.shape = held->shape.data();
  dl.strides = held->strides.data();
  dl.byte_offset = 0;
  const auto bytes = static_cast<std::uintptr_t>(a.nbytes());
  if (bytes != 0) {
    held->begin = reinterpret_cast<std::uintptr_t>(a.data());
    held->end = held->begin + bytes;
    add_read_only(held->begin, held->end);
  }
  return Tensor::from_dlpack(&held->managed);  // its deleter runs on failure too
}

}  // namespace ferry::python
