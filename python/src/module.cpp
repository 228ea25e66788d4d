// The extension module ferry._ferry: errors, devices, and the parts bound in the other files.

#include <pybind11/operators.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <exception>
#include <new>
#include <string>

#include "binding.hpp"

namespace ferry::python {

bool python_usable() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() != 0 && Py_IsFinalizing() == 0 && !exit_begun_here();
#else
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0 && !exit_begun_here();
#endif
}

namespace {
std::atomic<unsigned long> g_main_thread{0};  // the main thread's PyThread ident; 0: not known
}  // namespace

void reset_main_thread() {
  g_main_thread.store(
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>());
}

bool is_main_thread() noexcept { return PyThread_get_thread_ident() == g_main_thread.load(); }

ReleaseGil::ReleaseGil() noexcept : state_(PyEval_SaveThread()) {}

ReleaseGil::~ReleaseGil() noexcept(false) {
  const PythonRegion region;
  if (!region.entered() && !is_main_thread()) {
    for (;;) pause();  // the interpreter is going, and the process with it
  }
  PyEval_RestoreThread(state_);
}

namespace {

/// ferry's Python error classes, made by bind_errors (the module's own, for its life).
struct ErrorKinds {
  PyObject* error = nullptr;
  PyObject* data = nullptr;
  PyObject* config = nullptr;
  PyObject* device = nullptr;
};
ErrorKinds error_kinds;

/// The Python error of ferry::Error `e`'s kind. PyErr_SetString decodes strictly: a message
/// naming a file whose name is not UTF-8 would arrive empty.
void set_ferry_error(const Error& e) {
  PyObject* kind = error_kinds.error;
  if (dynamic_cast<const DataError*>(&e) != nullptr) {
    kind = error_kinds.data;
  } else if (dynamic_cast<const ConfigError*>(&e) != nullptr) {
    kind = error_kinds.config;
  } else if (dynamic_cast<const DeviceError*>(&e) != nullptr) {
    kind = error_kinds.device;
  }
  PyErr_SetObject(kind, message_text(e.what()).ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  // Each ferry::Error arrives as the class of its kind, with the C++ message; all derive from
  // ferry.Error, itself a RuntimeError (as std::runtime_error is ferry::Error's base).
  static py::exception<Error> error(m, "Error", PyExc_RuntimeError);
  static py::exception<DataError> data_error(m, "DataError", error.ptr());
  static py::exception<ConfigError> config_error(m, "ConfigError", error.ptr());
  static py::exception<DeviceError> device_error(m, "DeviceError", error.ptr());
  error_kinds = {error.ptr(), data_error.ptr(), config_error.ptr(), device_error.ptr()};
  error.doc() = "Base of every error ferry raises (a RuntimeError).";
  data_error.doc() = "Bad input: a file, a sample, a value. The message names the file and place.";
  config_error.doc() = "Bad options, or an API used against its contract.";
  device_error.doc() = "A CUDA failure, with CUDA's error text.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      set_ferry_error(e);
    }
  });
}

void set_python_error(const std::exception_ptr& p) noexcept {
  try {
    std::rethrow_exception(p);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const Error& e) {
    set_ferry_error(e);
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
  }
}

py::str message_text(const std::string& text) {
  PyObject* s =
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

py::list message_texts(const std::vector<std::string>& texts) {
  py::list out;
  for (const std::string& t : texts) out.append(message_text(t));
  return out;
}

py::list name_texts(const std::vector<std::string>& names) {
  py::list out;
  for (const std::string& n : names) {
    PyObject* s = PyUnicode_DecodeFSDefaultAndSize(n.data(), static_cast<Py_ssize_t>(n.size()));
    if (s == nullptr) throw py::error_already_set();
    out.append(py::reinterpret_steal<py::str>(s));
  }
  return out;
}

Device to_device(const py::handle& obj) {
  if (obj.is_none()) return Device::best();
  if (py::isinstance<Device>(obj)) return obj.cast<Device>();
  if (py::isinstance<py::str>(obj)) return Device::parse(obj.cast<std::string>());
  // torch.device and the like: their str() is "cpu" or "cuda:N".
  if (py::hasattr(obj, "type")) return Device::parse(py::str(obj).cast<std::string>());
  throw py::type_error("ferry: a device is a ferry.Device or a text such as \"cuda:0\", not " +
                       py::repr(obj).cast<std::string>());
}

DType to_dtype(const py::handle& obj) {
  std::string text = py::str(obj).cast<std::string>();
  // numpy's types print as "<class 'numpy.float32'>"; torch's dtypes as "torch.float32".
  if (const auto dot = text.rfind('.'); dot != std::string::npos) text = text.substr(dot + 1);
  if (!text.empty() && text.back() == '>') text.pop_back();
  if (!text.empty() && text.back() == '\'') text.pop_back();
  return parse_dtype(text);
}

void bind_device(py::module_& m) {
  py::class_<Device>(m, "Device", R"doc(
A place where tensors live: "cpu", "cuda" (= "cuda:0") or "cuda:N".

    ferry.Device("cuda:1"); ferry.Device.best(); str(ferry.Device("cpu")) == "cpu"

Naming a device does not check that it exists; using one that is not usable raises
ferry.DeviceError.)doc")
      .def(py::init([](const std::string& text) { return Device::parse(text); }), py::arg("text"),
           "Parses \"cpu\", \"cuda\" or \"cuda:N\" (ferry.ConfigError otherwise).")
      .def_static("cpu", &Device::cpu, "The CPU.")
      .def_static("cuda", &Device::cuda, py::arg("index") = 0, "CUDA device `index`.")
      .def_static("best", &Device::best,
                  "cuda:0 when a usable GPU exists, else cpu: \"cuda if available else cpu\".")
      .def_property_readonly(
          "type", [](const Device& d) { return d.is_cpu() ? "cpu" : "cuda"; },
          "\"cpu\" or \"cuda\".")
      .def_property_readonly(
          "index",
          [](const Device& d) -> py::object {
            if (d.is_cpu()) return py::none();
            return py::int_(d.index());
          },
          "The CUDA device's index; None for the CPU.")
      .def("__str__", &Device::str)
      .def("__repr__", [](const Device& d) { return "ferry.Device('" + d.str() + "')"; })
      .def("__hash__", [](const Device& d) { return py::hash(py::str(d.str())); })
      .def(py::self == py::self)  // NOLINT(misc-redundant-expression)
      .def(py::self != py::self)  // NOLINT(misc-redundant-expression)
      .def(py::pickle([](const Device& d) { return d.str(); },
                      [](const std::string& text) { return Device::parse(text); }));
  py::implicitly_convertible<py::str, Device>();
  m.def("cuda_device_count", &cuda_device_count,
        "Usable CUDA devices: 0 without a driver, a GPU, or CUDA in this build. Never raises.");
  m.def("cuda_is_available", &cuda_is_available, "cuda_device_count() > 0.");
  m.def("cuda_unavailable_reason", &cuda_unavailable_reason,
        "Why CUDA is unavailable, in CUDA's words; empty when a GPU is usable.");
}

}  // namespace ferry::python

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "ferry's C++ core: the datasets, the loader and tensors (see the ferry package).";
  m.attr("__version__") = ferry::kVersion;
  m.attr("built_with_cuda") = ferry::built_with_cuda();
  ferry::python::bind_errors(m);
  ferry::python::bind_device(m);
  ferry::python::bind_tensor(m);
  ferry::python::bind_datasets(m);
  ferry::python::bind_audio(m);
  ferry::python::bind_loader(m);
  ferry::python::bind_workers(m);
  ferry::python::bind_worker_watch(m);
  ferry::python::bind_seed_watch(m);
  ferry::python::bind_video(m);
  ferry::python::bind_dropin(m);
  ferry::python::reset_main_thread();
}
