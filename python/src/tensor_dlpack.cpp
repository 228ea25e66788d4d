// DLPack both ways: ferry.Tensor's export (the array API standard's __dlpack__ /
// __dlpack_device__) and from_dlpack's import of a producer's tensor or capsule.

#include "tensor_dlpack.hpp"

#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "binding.hpp"

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

}  // namespace

int dl_device_type(const Tensor& t) { return t.device().is_cpu() ? kDLDeviceCpu : kDLDeviceCuda; }
int dl_device_id(const Tensor& t) { return t.device().is_cpu() ? 0 : t.device().index(); }

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace ferry::python
