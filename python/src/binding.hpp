#pragma once

// The Python module's parts (python/src): each file binds one part of ferry's API; this header
// holds what they share. The module runs ferry on its own threads: whatever may wait (a batch, a
// copy, a loader's teardown) runs with the GIL released, and whatever touches Python from one of
// ferry's threads (a Python dataset's read, a producer's DLPack deleter) takes the GIL itself,
// never while the interpreter is finalizing.

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace py = pybind11;

namespace ferry::python {

void bind_errors(py::module_& m);
void bind_device(py::module_& m);
void bind_tensor(py::module_& m);
void bind_datasets(py::module_& m);
void bind_loader(py::module_& m);
void bind_workers(py::module_& m);
void bind_worker_watch(py::module_& m);
void bind_seed_watch(py::module_& m);
void bind_video(py::module_& m);
/// WebDataset's video=dict(frames=, stride=, size=, start=, max_seconds=, decode_threads=):
/// VideoOptions (None: the defaults). \throws TypeError naming a key it does not take.
VideoOptions video_options(const py::handle& obj, const char* where);
void bind_audio(py::module_& m);
/// AudioOptions from a dict of AudioFolder's keywords (None: the defaults). \throws TypeError
/// naming `who` and the key for a key AudioOptions lacks.
AudioOptions audio_options_from(const py::object& kw, const char* who);
void bind_dropin(py::module_& m);

/// The exception `p` as the Python error it is raised as (ferry's errors as their classes, a
/// bad_alloc as MemoryError, any other as RuntimeError), set as the current error. GIL held.
void set_python_error(const std::exception_ptr& p) noexcept;

/// Text from ferry that may hold a file's name, whose bytes need not be UTF-8 on Linux. A message
/// (an error's, a skip reason): bytes that are not UTF-8 appear as \\xNN. A name (a class
/// folder): as os.fsdecode spells it (surrogates), so that it reaches the file again.
py::str message_text(const std::string& text);
py::list message_texts(const std::vector<std::string>& texts);
py::list name_texts(const std::vector<std::string>& names);

/// None: Device::best(); a ferry.Device; or its text ("cpu", "cuda:1").
Device to_device(const py::handle& obj);
/// "u8", "f32", "float32", a numpy dtype or type: anything whose str() parse_dtype() takes.
DType to_dtype(const py::handle& obj);
/// A ferry.Tensor as is; otherwise the object's DLPack export (numpy, torch, any producer, or a
/// "dltensor" capsule), without a copy. \throws TypeError for an object that exports nothing.
Tensor tensor_from_object(const py::handle& obj);
/// A ferry dataset as is; any object with __len__ and __getitem__ as a Python dataset.
std::shared_ptr<const Dataset> to_dataset(const py::handle& obj);

/// The object a Python dataset reads (a borrowed reference), or nullptr for any other dataset.
PyObject* python_source(const Dataset& dataset) noexcept;

/// True while the interpreter may still run Python code from another thread: false once it
/// finalizes, and on threads other than the main one once the exit hook has begun (begin_exit).
bool python_usable() noexcept;
/// The exit hook has begun and this is not the main thread (exit_guard.cpp).
bool exit_begun_here() noexcept;
/// Interpreter exit: from now on threads other than the main one take the GIL no more; waits
/// (the GIL released) for those already on their way to it. Main thread, GIL held.
void begin_exit();
/// A fork's child: the parent's exit is not its own, nor are its other threads' regions.
void exit_forgotten() noexcept;

/// A stretch of code that may take the GIL on any thread (a destructor that releases it and
/// takes it back, a thread on its way to it). Entered unless the interpreter finalizes, or the
/// exit hook has begun (begin_exit) on a thread other than the main one that is in no region
/// yet; begin_exit() waits until every region entered has ended. Not entered: leave the Python
/// objects to the interpreter, and take no GIL.
class PythonRegion {
 public:
  PythonRegion() noexcept;
  ~PythonRegion();
  PythonRegion(const PythonRegion&) = delete;
  PythonRegion& operator=(const PythonRegion&) = delete;
  bool entered() const noexcept { return entered_; }

 private:
  bool entered_ = false;
};

/// The GIL (PyGILState_Ensure) and a PythonRegion while it lives, where the region is entered;
/// nothing otherwise (the interpreter is going: Python objects are then left to it). For
/// destructors and deleters that may run on any thread.
class GilIfUsable {
 public:
  GilIfUsable() noexcept;
  ~GilIfUsable();
  GilIfUsable(const GilIfUsable&) = delete;
  GilIfUsable& operator=(const GilIfUsable&) = delete;
  bool held() const noexcept { return held_; }

 private:
  PythonRegion region_;
  bool held_ = false;
  PyGILState_STATE state_{};
};

/// A Python dataset's failure for a sample, as raised there: the loader's DataError names the
/// sample, and the module raises the original exception (its type and message) with that
/// DataError's text as a note. `dataset` may be a Mixture (nested too): the failure is looked up
/// in the source that `index` belongs to. The exception keeps its traceback (its frames' code and
/// lines; their locals are let go). Returns an empty object when none is kept. Needs the GIL.
py::object take_python_failure(const Dataset& dataset, std::uint64_t index);

/// Whether this is the interpreter's main thread (where Python runs signal handlers).
bool is_main_thread() noexcept;
/// Forgets the main thread's identity (a fork's child has its own). GIL held.
void reset_main_thread();

/// Releases the GIL while it lives, like py::gil_scoped_release, except that a thread other than
/// the main one that would take it back while the interpreter finalizes stops there for good.
/// One that was already waiting for it when finalization began is ended by Python
/// (pthread_exit): its destructor lets that unwinding pass (pybind11 rethrows it), where a
/// noexcept one would abort the process ("exception not rethrown").
class ReleaseGil {
 public:
  ReleaseGil() noexcept;
  ~ReleaseGil() noexcept(false);
  ReleaseGil(const ReleaseGil&) = delete;
  ReleaseGil& operator=(const ReleaseGil&) = delete;

 private:
  PyThreadState* state_;
};

}  // namespace ferry::python
