// ferry.Tensor, DLPack both ways (the array API standard's __dlpack__ / __dlpack_device__, and
// from_dlpack), and the numpy view.

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"

namespace ferry::python {

namespace {

// DLPack 1.0's versioned tensor, as the standard lays it out (the system's dlpack.h is 0.6 and
// has only the legacy struct; the DLTensor inside is the same in both).
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t kFlagIsReadOnly = 1ULL << 0;
constexpr std::uint64_t kFlagIsCopied = 1ULL << 1;
constexpr const char* kLegacyName = "dltensor";
constexpr const char* kVersionedName = "dltensor_versioned";
constexpr int kDLDeviceCpu = 1;
constexpr int kDLDeviceCuda = 2;

// ---- read-only memory ---------------------------------------------------------------------

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

/// Whether host address `data` lies in read-only memory ferry views.
bool is_read_only(const void* data) {
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::lock_guard<std::mutex> lock(read_only_mutex);
  return std::any_of(read_only_ranges.begin(), read_only_ranges.end(),
                     [&](const auto& r) { return r.first <= at && at < r.second; });
}

// ---- export ------------------------------------------------------------------------------

void legacy_capsule_destructor(PyObject* capsule) {
  // A capsule still named "dltensor" was never consumed: its tensor is still ours to free.
  if (PyCapsule_IsValid(capsule, kLegacyName) == 0) return;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kLegacyName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kVersionedName) == 0) return;
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed =
      static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedName));
  if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  PyErr_Restore(type, value, traceback);
}

void versioned_deleter(DLManagedTensorVersioned* self) {
  auto* legacy = static_cast<DLManagedTensor*>(self->manager_ctx);
  if (legacy != nullptr && legacy->deleter != nullptr) legacy->deleter(legacy);
  delete self;
}

int dl_device_type(const Tensor& t) { return t.device().is_cpu() ? kDLDeviceCpu : kDLDeviceCuda; }
int dl_device_id(const Tensor& t) { return t.device().is_cpu() ? 0 : t.device().index(); }

/// The consumer's stream as DLPack's `stream` argument gives it, for a CUDA tensor: None or 1
/// is the legacy default stream, 2 the per-thread default stream, -1 asks for no
/// synchronization, any other integer is a cudaStream_t. 0 is refused, as the standard says.
CUstream_st* consumer_stream(const py::object& stream, bool* none_wanted) {
  *none_wanted = false;
  if (stream.is_none()) return nullptr;
  const auto value = stream.cast<std::int64_t>();
  if (value == 0) throw py::value_error("__dlpack__: stream 0 is ambiguous and not allowed");
  if (value == -1) {
    *none_wanted = true;
    return nullptr;
  }
  if (value == 1) return nullptr;
  return reinterpret_cast<CUstream_st*>(static_cast<std::uintptr_t>(value));
}

/// DLPack's max_version: None, or a (major, minor) tuple of ints. Whether the consumer takes a
/// versioned capsule (major >= 1). \throws TypeError naming the argument otherwise.
bool wants_versioned(const py::object& max_version) {
  if (max_version.is_none()) return false;
  const auto bad = [&] {
    return py::type_error(
        "__dlpack__: max_version is None or a (major, minor) tuple of ints, "
        "not " +
        py::repr(max_version).cast<std::string>());
  };
  if (!py::isinstance<py::tuple>(max_version) && !py::isinstance<py::list>(max_version)) {
    throw bad();
  }
  const auto version = max_version.cast<py::sequence>();
  if (version.size() != 2) throw bad();
  for (const py::handle part : version) {
    if (!py::isinstance<py::int_>(part) || py::isinstance<py::bool_>(part)) throw bad();
  }
  return version[0].cast<std::int64_t>() >= 1;
}

py::object dlpack(const Tensor& self, const py::object& stream, const py::object& max_version,
                  const py::object& dl_device, const py::object& copy) {
  // Every argument is checked before anything is exported or copied.
  const bool versioned = wants_versioned(max_version);
  if (!stream.is_none() &&
      (!py::isinstance<py::int_>(stream) || py::isinstance<py::bool_>(stream))) {
    throw py::type_error("__dlpack__: stream is None or an int, not " +
                         py::repr(stream).cast<std::string>());
  }
  if (!copy.is_none() && !py::isinstance<py::bool_>(copy)) {
    throw py::type_error("__dlpack__: copy is None, True or False, not " +
                         py::repr(copy).cast<std::string>());
  }
  const bool copy_allowed = copy.is_none() || copy.cast<bool>();
  bool to_cpu = false;
  if (!dl_device.is_none()) {
    int type = 0;
    int id = 0;
    try {
      const auto wanted = dl_device.cast<py::tuple>();
      if (wanted.size() != 2) throw py::cast_error();
      type = wanted[0].cast<int>();
      id = wanted[1].cast<int>();
    } catch (const py::cast_error&) {
      throw py::type_error(
          "__dlpack__: dl_device is None or a (device_type, device_id) tuple "
          "of ints, not " +
          py::repr(dl_device).cast<std::string>());
    }
    if (type != dl_device_type(self) || id != dl_device_id(self)) {
      if (type != kDLDeviceCpu || !copy_allowed) {
        throw py::buffer_error("__dlpack__: a tensor on " + self.device().str() +
                               " cannot be exported to DLPack device (" + std::to_string(type) +
                               ", " + std::to_string(id) + ")" +
                               (copy_allowed ? "" : " without a copy"));
      }
      to_cpu = true;
    }
  }
  bool none_wanted = false;
  CUstream_st* consumer = self.device().is_cuda() ? consumer_stream(stream, &none_wanted) : nullptr;
  const bool copies = to_cpu || (!copy.is_none() && copy.cast<bool>());

  Tensor t = self;
  DLManagedTensor* managed = nullptr;
  {
    const py::gil_scoped_release release;
    if (to_cpu) {
      t = t.cpu();
    } else if (copies) {
      t = t.clone();
    }
    managed = t.device().is_cuda() && !none_wanted ? t.to_dlpack(consumer) : t.to_dlpack();
  }
  // A host tensor's export has waited for its writes: its address is known without waiting.
  const bool read_only = !copies && t.device().is_cpu() && t.nbytes() != 0 &&
                         is_read_only(static_cast<std::byte*>(managed->dl_tensor.data) +
                                      managed->dl_tensor.byte_offset);
  if (read_only && !versioned) {
    managed->deleter(managed);
    throw py::buffer_error(
        "__dlpack__: this tensor views a read-only array, and a DLPack capsule without "
        "max_version >= (1, 0) cannot say so; pass max_version=(1, 0), copy=True, or use "
        "numpy() (a read-only view)");
  }
  if (!versioned) {
    PyObject* capsule = PyCapsule_New(managed, kLegacyName, legacy_capsule_destructor);
    if (capsule == nullptr) {
      managed->deleter(managed);
      throw py::error_already_set();
    }
    return py::reinterpret_steal<py::object>(capsule);
  }
  auto* v =
      new DLManagedTensorVersioned{{1, 0},
                                   managed,
                                   versioned_deleter,
                                   (copies ? kFlagIsCopied : 0) | (read_only ? kFlagIsReadOnly : 0),
                                   managed->dl_tensor};
  PyObject* capsule = PyCapsule_New(v, kVersionedName, versioned_capsule_destructor);
  if (capsule == nullptr) {
    versioned_deleter(v);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

// ---- import ------------------------------------------------------------------------------

/// A producer's tensor as ferry takes it: a legacy DLManagedTensor whose deleter takes the GIL
/// before it calls the producer's (numpy's drops a reference to its array), since ferry may let
/// go of it on any of its threads. While the interpreter is finalizing it is left alone.
struct Imported {
  DLManagedTensor outer{};
  DLManagedTensor* legacy = nullptr;
  DLManagedTensorVersioned* versioned = nullptr;
};

void imported_deleter(DLManagedTensor* self) {
  auto* imported = static_cast<Imported*>(self->manager_ctx);
  if (const GilIfUsable gil; gil.held()) {
    if (imported->legacy != nullptr && imported->legacy->deleter != nullptr) {
      imported->legacy->deleter(imported->legacy);
    }
    if (imported->versioned != nullptr && imported->versioned->deleter != nullptr) {
      imported->versioned->deleter(imported->versioned);
    }
  }
  delete imported;
}

Tensor from_capsule(const py::handle& capsule) {
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (name == nullptr) throw py::error_already_set();
  auto* imported = new Imported;
  if (std::strcmp(name, kLegacyName) == 0) {
    imported->legacy = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), name));
    imported->outer.dl_tensor = imported->legacy->dl_tensor;
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  } else if (std::strcmp(name, kVersionedName) == 0) {
    imported->versioned =
        static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule.ptr(), name));
    if (imported->versioned->version.major != 1) {
      const auto major = imported->versioned->version.major;
      delete imported;
      throw py::buffer_error("ferry.from_dlpack: DLPack major version " + std::to_string(major) +
                             " is not supported (1 is)");
    }
    imported->outer.dl_tensor = imported->versioned->dl_tensor;
    PyCapsule_SetName(capsule.ptr(), "used_dltensor_versioned");
  } else {
    delete imported;
    throw py::buffer_error(std::string("ferry.from_dlpack: a capsule named \"") + name +
                           "\" (one already consumed, or not DLPack's)");
  }
  imported->outer.manager_ctx = imported;
  imported->outer.deleter = imported_deleter;
  // A CUDA tensor comes ordered on the legacy default stream, which it asked the producer for.
  return Tensor::from_dlpack(&imported->outer);
}

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

}  // namespace

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::u8:
      return py::dtype("uint8");
    case DType::u16:
      return py::dtype("uint16");
    case DType::u32:
      return py::dtype("uint32");
    case DType::i32:
      return py::dtype("int32");
    case DType::i64:
      return py::dtype("int64");
    case DType::f16:
      return py::dtype("float16");
    case DType::f32:
      return py::dtype("float32");
    case DType::f64:
      return py::dtype("float64");
    case DType::i8:
      return py::dtype("int8");
    case DType::i16:
      return py::dtype("int16");
    case DType::u64:
      return py::dtype("uint64");
    case DType::bf16:
      break;
  }
  throw py::type_error("numpy() of a bf16 tensor: numpy has no bfloat16 (use torch.from_dlpack)");
}

namespace {

py::array to_numpy(const Tensor& t) {
  if (!t.device().is_cpu()) {
    throw py::type_error("numpy() of a tensor on " + t.device().str() +
                         ": numpy views host memory only; call .cpu() first");
  }
  const py::dtype dtype = numpy_dtype(t.dtype());
  void* data = nullptr;
  {
    const py::gil_scoped_release release;
    data = t.data();  // waits for pending writes
  }
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  // The array keeps a copy of the tensor, so its storage (a batch's buffer too) lives as long.
  const py::capsule owner(new Tensor(t), [](void* p) { delete static_cast<Tensor*>(p); });
  py::array a(dtype, shape, strides, data, owner);
  if (t.nbytes() != 0 && is_read_only(data)) a.attr("setflags")(py::arg("write") = false);
  return a;
}

py::tuple shape_tuple(const std::vector<int64_t>& shape) {
  py::tuple out(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) out[i] = py::int_(shape[i]);
  return out;
}

/// `call`'s argument `keyword` as a dtype or a device. \throws ConfigError naming them otherwise.
DType dtype_argument(const py::handle& obj, const char* call, const char* keyword) {
  try {
    return to_dtype(obj);
  } catch (const Error& e) {
    throw ConfigError(std::string(call) + ": " + keyword + ": " + e.what());
  }
}

Device device_argument(const py::handle& obj, const char* call, const char* keyword) {
  try {
    return obj.is_none() ? Device::cpu() : to_device(obj);
  } catch (const Error& e) {
    throw ConfigError(std::string(call) + ": " + keyword + ": " + e.what());
  }
}

Tensor to(const Tensor& t, const py::object& device_or_dtype, const py::object& dtype,
          bool non_blocking, std::uintptr_t stream) {
  std::optional<Device> device;
  std::optional<DType> to_type;
  if (!device_or_dtype.is_none()) {
    if (py::isinstance<Device>(device_or_dtype)) {
      device = device_or_dtype.cast<Device>();
    } else {
      const std::string text = py::str(device_or_dtype).cast<std::string>();
      if (text == "cpu" || text.rfind("cuda", 0) == 0) {
        device = device_argument(device_or_dtype, "Tensor.to", "device");
      } else {
        to_type = dtype_argument(device_or_dtype, "Tensor.to", "device (a device or a dtype)");
      }
    }
  }
  if (!dtype.is_none()) to_type = dtype_argument(dtype, "Tensor.to", "dtype");
  auto* s = reinterpret_cast<CUstream_st*>(stream);
  const py::gil_scoped_release release;
  if (device && to_type) return t.to(*device, *to_type, non_blocking, s);
  if (device) return t.to(*device, non_blocking, s);
  if (to_type) return t.to(*to_type);
  return t;
}

}  // namespace

Tensor tensor_from_object(const py::handle& obj) {
  if (py::isinstance<Tensor>(obj)) return obj.cast<Tensor>();
  if (PyCapsule_CheckExact(obj.ptr()) != 0) return from_capsule(obj);
  // numpy refuses to export a read-only array as DLPack; ferry only reads it, so it views the
  // array's buffer itself.
  if (py::isinstance<py::array>(obj) && !py::reinterpret_borrow<py::array>(obj).writeable()) {
    return from_read_only_array(py::reinterpret_borrow<py::array>(obj));
  }
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error("ferry.from_dlpack: " + py::repr(py::type::of(obj)).cast<std::string>() +
                         " exports no DLPack tensor (no __dlpack__); numpy arrays, torch "
                         "tensors and other DLPack producers do");
  }
  py::object stream = py::none();
  if (py::hasattr(obj, "__dlpack_device__")) {
    const auto device = obj.attr("__dlpack_device__")().cast<py::tuple>();
    if (device[0].cast<int>() == kDLDeviceCuda) stream = py::int_(1);  // the legacy default
  }
  py::object capsule;
  try {
    capsule = obj.attr("__dlpack__")(py::arg("stream") = stream,
                                     py::arg("max_version") = py::make_tuple(1, 0));
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
    // A producer of the standard before max_version (numpy 1.24, torch 1.13).
    capsule = obj.attr("__dlpack__")(py::arg("stream") = stream);
  }
  return from_capsule(capsule);
}

void bind_tensor(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", R"doc(
A contiguous n-dimensional array on a device, sharing storage as torch tensors do.

Batches' fields are ferry.Tensors. They go to torch, numpy, JAX or CuPy without a copy
through DLPack (torch.from_dlpack(t), np.from_dlpack(t)); t.numpy() views a CPU tensor.
A tensor taken from a batch keeps the batch's buffer until it (and every array made from
it) is gone.)doc")
      .def_property_readonly(
          "shape", [](const Tensor& t) { return shape_tuple(t.shape()); }, "A tuple of ints.")
      .def_property_readonly(
          "dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); },
          "\"u8\", \"u16\", \"u32\", \"i32\", \"i64\", \"f16\", \"bf16\", \"f32\", \"f64\", "
          "\"i8\", \"i16\" "
          "or \"u64\".")
      .def_property_readonly("device", &Tensor::device, "Where the tensor lives.")
      .def_property_readonly("ndim", &Tensor::dim)
      .def_property_readonly("nbytes", &Tensor::nbytes)
      .def("numel", &Tensor::numel, "Elements in all.")
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.shape()[0];
           })
      .def("numpy", &to_numpy, "A numpy array viewing this CPU tensor (no copy).")
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype) {
            py::array a = to_numpy(t);
            if (dtype.is_none()) return a;
            return py::array(a.attr("astype")(dtype));
          },
          py::arg("dtype") = py::none())
      .def("to", &to, py::arg("device") = py::none(), py::arg("dtype") = py::none(),
           py::arg("non_blocking") = false, py::arg("stream") = 0, R"doc(
This tensor on `device` and/or as `dtype`: t.to("cuda"), t.to("f32"), t.to("cuda:0", "f16").
The same storage where nothing changes. With non_blocking=True and pinned memory, the copy is
queued and the call returns at once (on `stream`, a cudaStream_t as an int, when given).)doc")
      .def(
          "cpu",
          [](const Tensor& t) {
            const py::gil_scoped_release release;
            return t.cpu();
          },
          "This tensor in host memory (itself when it is there). Blocking.")
      .def(
          "pin_memory",
          [](const Tensor& t) {
            const py::gil_scoped_release release;
            return t.pin_memory();
          },
          "A page-locked copy of this CPU tensor; itself when it is pinned already.")
      .def_property_readonly("is_pinned", &Tensor::is_pinned)
      .def(
          "clone",
          [](const Tensor& t) {
            const py::gil_scoped_release release;
            return t.clone();
          },
          "A copy on the same device.")
      .def("shares_storage_with", &Tensor::shares_storage_with, py::arg("other"))
      .def(
          "synchronize",
          [](const Tensor& t) {
            const py::gil_scoped_release release;
            t.synchronize();
          },
          "Waits until the work that writes this tensor is done.")
      .def("__dlpack__", &dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none(), R"doc(
The array API standard's export. Without max_version, or below (1, 0): a legacy "dltensor"
capsule (what numpy 1.24 and torch 1.13 take); otherwise a DLPack 1.0 "dltensor_versioned" one.
On CUDA, `stream` (the consumer's) waits for the tensor's pending writes on the GPU, and the host
does not wait. A request that cannot be honoured (another device without copy, stream 0) raises
BufferError or ValueError, and arguments of the wrong type TypeError, before anything is
exported. A tensor viewing a read-only array is exported with DLPack 1.0's read-only flag; a
legacy capsule, which cannot carry it, is refused (BufferError) unless copy=True.)doc")
      .def(
          "__dlpack_device__",
          [](const Tensor& t) { return py::make_tuple(dl_device_type(t), dl_device_id(t)); },
          "(1, 0) for the CPU, (2, N) for cuda:N.")
      .def("__repr__", [](const Tensor& t) {
        std::string shape;
        for (std::size_t i = 0; i < t.dim(); ++i) {
          shape += (i != 0 ? ", " : "") + std::to_string(t.shape()[i]);
        }
        return "ferry.Tensor(shape=(" + shape + (t.dim() == 1 ? "," : "") +
               "), dtype=" + std::string(dtype_name(t.dtype())) + ", device=" + t.device().str() +
               ")";
      });

  m.def(
      "from_dlpack", [](const py::object& obj) { return tensor_from_object(obj); }, py::arg("obj"),
      R"doc(
A ferry.Tensor viewing `obj`'s memory, without a copy: a numpy array, a torch tensor, any
object with __dlpack__, or a DLPack capsule. The producer is kept alive while ferry uses it.
A read-only numpy array (np.frombuffer, np.memmap(mode="r")) is viewed through its buffer and
stays read-only (numpy() views it read-only). Non-contiguous arrays are refused
(ferry.ConfigError).)doc");
  m.def(
      "empty",
      [](const std::vector<int64_t>& shape, const py::object& dtype, const py::object& device,
         bool pinned) {
        return Tensor::empty(shape, dtype_argument(dtype, "ferry.empty", "dtype"),
                             device_argument(device, "ferry.empty", "device"), pinned);
      },
      py::arg("shape"), py::arg("dtype") = "f32", py::arg("device") = py::none(),
      py::arg("pinned") = false, "An uninitialised tensor (on the CPU unless `device`).");
  m.def(
      "zeros",
      [](const std::vector<int64_t>& shape, const py::object& dtype, const py::object& device) {
        return Tensor::zeros(shape, dtype_argument(dtype, "ferry.zeros", "dtype"),
                             device_argument(device, "ferry.zeros", "device"));
      },
      py::arg("shape"), py::arg("dtype") = "f32", py::arg("device") = py::none(),
      "A tensor of zeros (on the CPU unless `device`).");
}

}  // namespace ferry::python
