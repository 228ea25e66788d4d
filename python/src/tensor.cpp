// ferry.Tensor, its methods and the numpy view; ferry.from_dlpack, empty and zeros. DLPack both
// ways (the array API standard's __dlpack__ / __dlpack_device__, and from_dlpack) is
// tensor_dlpack.cpp's, the read-only memory ferry views tensor_read_only.cpp's.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"
#include "tensor_dlpack.hpp"

namespace ferry::python {

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
