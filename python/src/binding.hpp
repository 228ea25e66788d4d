#pragma once

// The Python module's parts (python/src): each file binds one part of ferry's API; this header
// holds what they share. The module runs ferry on its own threads: whatever may wait (a batch, a
// copy, a loader's teardown) runs with the GIL released, and whatever touches Python from one of
// ferry's threads (a Python dataset's read, a producer's DLPack deleter) takes the GIL itself,
// never while the interpreter is finalizing.

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ferry/ferry.hpp"

namespace py = pybind11;

namespace ferry::python {

void bind_errors(py::module_& m);
void bind_device(py::module_& m);
void bind_tensor(py::module_& m);
void bind_datasets(py::module_& m);
void bind_loader(py::module_& m);

/// None: Device::best(); a ferry.Device; or its text ("cpu", "cuda:1").
Device to_device(const py::handle& obj);
/// "u8", "f32", "float32", a numpy dtype or type: anything whose str() parse_dtype() takes.
DType to_dtype(const py::handle& obj);
/// A ferry.Tensor as is; otherwise the object's DLPack export (numpy, torch, any producer, or a
/// "dltensor" capsule), without a copy. \throws TypeError for an object that exports nothing.
Tensor tensor_from_object(const py::handle& obj);
/// A ferry dataset as is; any object with __len__ and __getitem__ as a Python dataset.
std::shared_ptr<const Dataset> to_dataset(const py::handle& obj);

/// True while the interpreter may still run Python code from another thread.
bool python_usable() noexcept;

/// A Python dataset's failure for a sample, as raised there: the loader's DataError names the
/// sample, and the module raises the original exception (its type and message) with that
/// DataError's text as a note. `dataset` may be a Mixture (nested too): the failure is looked up
/// in the source that `index` belongs to. The exception keeps its traceback (its frames' code and
/// lines; their locals are let go). Returns an empty object when none is kept. Needs the GIL.
py::object take_python_failure(const Dataset& dataset, std::uint64_t index);

/// While it lives, on the main thread, a SIGINT (Ctrl-C) cancels `epoch` (Epoch::cancel) so that
/// a next() waiting for data returns within milliseconds; Python's own handler still runs, so
/// the KeyboardInterrupt is raised once the module checks signals. Elsewhere it does nothing.
/// Made with the GIL held.
class InterruptScope {
 public:
  explicit InterruptScope(Epoch* epoch);
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
  /// Whether a SIGINT cancelled the epoch while the scope lived.
  bool interrupted() const noexcept;

 private:
  bool active_ = false;
  bool installed_ = false;
};

}  // namespace ferry::python
