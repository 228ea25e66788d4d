#pragma once

// ferry.Tensor's DLPack both ways (tensor_dlpack.cpp) and the read-only memory ferry views
// (tensor_read_only.cpp): what tensor.cpp's binding of ferry.Tensor uses of them.

#include <pybind11/numpy.h>

#include "binding.hpp"

namespace ferry::python {

/// Whether host address `data` lies in read-only memory ferry views.
bool is_read_only(const void* data);
/// A read-only numpy array (np.frombuffer, np.memmap(mode="r")) viewed through its buffer, its
/// memory marked read-only while it is.
Tensor from_read_only_array(const py::array& a);

/// Tensor.__dlpack__: the array API standard's export.
py::object dlpack(const Tensor& self, const py::object& stream, const py::object& max_version,
                  const py::object& dl_device, const py::object& copy);
/// Tensor.__dlpack_device__'s parts: DLPack's device type and id.
int dl_device_type(const Tensor& t);
int dl_device_id(const Tensor& t);

}  // namespace ferry::python
