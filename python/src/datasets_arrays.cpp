// TensorDataset: arrays that share dimension 0 (numpy, torch, any DLPack producer), by field.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "datasets.hpp"

namespace ferry::python {

void bind_dataset_arrays(py::module_& m) {
  py::class_<TensorDataset, Dataset, std::shared_ptr<TensorDataset>>(m, "TensorDataset", R"doc(
Tensors that share dimension 0 (the sample), by field name, without a copy:
ferry.TensorDataset({"image": images, "label": labels}). The arrays may be numpy arrays,
torch tensors, ferry tensors or any DLPack producer, read-only numpy arrays too (np.frombuffer,
np.memmap(mode="r")); they are kept alive by the dataset. An error names the field.)doc")
      .def(py::init([](const py::dict& tensors) {
             std::vector<std::pair<std::string, Tensor>> pairs;
             for (const auto& [name, value] : tensors) {
               std::string field = py::str(name).cast<std::string>();
               const std::string where = "TensorDataset: field \"" + field + "\": ";
               try {
                 pairs.emplace_back(std::move(field), tensor_from_object(value));
               } catch (const ConfigError& e) {
                 throw ConfigError(where + e.what());
               } catch (py::error_already_set& e) {
                 const std::string what = where + py::str(e.value()).cast<std::string>();
                 PyErr_SetString(e.type().ptr(), what.c_str());
                 throw py::error_already_set();
               } catch (const py::builtin_exception& e) {  // TypeError, BufferError
                 e.set_error();
                 const py::error_already_set raised;
                 const std::string what = where + e.what();
                 PyErr_SetString(raised.type().ptr(), what.c_str());
                 throw py::error_already_set();
               }
             }
             return std::make_shared<TensorDataset>(std::move(pairs));
           }),
           py::arg("tensors"))
      .def_property_readonly("device", &TensorDataset::device)
      .def_property_readonly("tensors", &TensorDataset::tensors)
      .def(
          "to",
          [](const TensorDataset& d, const py::object& device) {
            const Device target = to_device(device);
            const py::gil_scoped_release release;
            return d.to(target);
          },
          py::arg("device"), "The same samples on `device` (no copy where they are already).");
}

}  // namespace ferry::python
