// ferry.Epoch: an epoch iterated from Python, its next() (the GIL released, signals handled on
// the main thread) and close(); the epochs still running stopped at interpreter exit, and those of
// a fork's parent forgotten in the child.

#include <pybind11/stl.h>

#include <charconv>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"
#include "py_loader.hpp"

namespace ferry::python {

namespace {

std::mutex g_live_mutex;
std::set<PyEpoch*> g_live;  // guarded by g_live_mutex

}  // namespace

PyEpoch::PyEpoch(std::unique_ptr<Epoch> e, std::shared_ptr<const Dataset> d)
    : epoch(std::move(e)), dataset(std::move(d)) {
  auto n = std::make_shared<std::vector<std::string>>();
  for (const FieldSpec& f : dataset->fields()) n->push_back(f.name);
  names = std::move(n);
  size = epoch ? epoch->size() : 0;
  closed.store(!epoch);
  const std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.insert(this);
}

PyEpoch::~PyEpoch() {
  // A thread other than the main one, once interpreter exit has begun: the epoch was closed by
  // the exit hook; what is left is the interpreter's (taking the GIL back would end the thread).
  const PythonRegion region;
  if (generation != g_generation.load() || !region.entered()) {
    // Made in the parent of a fork: its threads are not here to join. Left as it is.
    static_cast<void>(epoch.release());
    static_cast<void>(new std::shared_ptr<const Dataset>(std::move(dataset)));
    return;
  }
  {
    const std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.erase(this);
  }
  close();
}

void PyEpoch::cancel() {
  closed.store(true);
  const std::lock_guard<std::mutex> lock(state_mutex);
  if (epoch) epoch->cancel();
}

void PyEpoch::close() {
  if (closed.exchange(true) && in_next.load() == 0) {
    // Closed before and nobody inside next(): nothing to wake, and nothing to join unless a
    // close() in progress still joins it, which takes next_mutex as below.
    const std::lock_guard<std::mutex> lock(state_mutex);
    if (!epoch) return;  // without releasing the GIL (a destructor at interpreter exit)
  }
  {
    // A next() waiting for data wakes (and ends the loop) rather than make close() wait for it.
    const std::lock_guard<std::mutex> lock(state_mutex);
    if (epoch && in_next.load() > 0) epoch->cancel();
    // Left early: reads waiting for a worker process give up now (the processes' answers are
    // discarded when they come), so that teardown does not wait for a __getitem__ in progress.
    if (epoch && !finished.load()) {
      epoch->cancel();
      for (PyDataset* d : python_datasets(*dataset)) d->abandon_reads();
    }
  }
  const auto teardown = [this] {
    std::unique_ptr<Epoch> doomed;
    const std::lock_guard<std::mutex> next_lock(next_mutex);
    {
      const std::lock_guard<std::mutex> lock(state_mutex);
      doomed = std::move(epoch);
    }
    doomed.reset();  // joins the pipeline: its fill tasks may be waiting for the GIL
  };
  if (PyGILState_Check() != 0) {
    const ReleaseGil release;
    teardown();
  } else {
    teardown();
  }
}

namespace {

/// How long the main thread waits for data between checks for signals.
constexpr std::chrono::milliseconds kSignalSlice{20};

/// Counts a thread inside next_batch() while it lives.
class InNext {
 public:
  explicit InNext(std::atomic<int>& count) noexcept : count_(count) { count_.fetch_add(1); }
  InNext(const InNext&) = delete;
  InNext& operator=(const InNext&) = delete;
  ~InNext() { count_.fetch_sub(1); }

 private:
  std::atomic<int>& count_;
};

/// Raises a pipeline's failure: a Python dataset's own exception as it was (with the loader's
/// text as a note), ferry's errors as their classes.
[[noreturn]] void raise_failure(PyEpoch& self, const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const DataError& e) {
    // "Loader: sample N (batch B, epoch E): Python dataset: ..." names the sample.
    const std::string what = e.what();
    const std::string prefix = "Loader: sample ";
    std::uint64_t index = 0;
    if (what.rfind(prefix, 0) == 0 &&
        std::from_chars(what.data() + prefix.size(), what.data() + what.size(), index).ec ==
            std::errc()) {
      py::object original = take_python_failure(*self.dataset, index);
      if (original) {
        if (py::hasattr(original, "add_note")) original.attr("add_note")("ferry: " + what);
        if (PyObject_SetAttrString(original.ptr(), "ferry_sample", py::int_(index).ptr()) != 0) {
          PyErr_Clear();
        }
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(original.ptr())), original.ptr());
        throw py::error_already_set();
      }
    }
    throw;
  }
}

}  // namespace

std::optional<Batch> next_batch(PyEpoch& self) {
  check_generation(self.generation, "Epoch");
  if (self.closed.load()) return std::nullopt;  // without releasing the GIL
  const bool main = is_main_thread();
  for (;;) {
    std::optional<Batch> got;
    std::exception_ptr error;
    bool end = false;
    {
      const InNext inside(self.in_next);
      const ReleaseGil release;
      const std::lock_guard<std::mutex> lock(self.next_mutex);
      if (!self.epoch || self.closed.load()) {
        end = true;
      } else {
        try {
          const Batch* b = nullptr;
          bool done = true;
          if (main) {
            done = self.epoch->try_next(kSignalSlice, b);
          } else {
            b = self.epoch->next();
          }
          if (done) {
            if (b != nullptr) {
              got = *b;
            } else {
              end = true;
              self.finished.store(true);
            }
          }
        } catch (...) {
          error = std::current_exception();
          self.finished.store(true);
        }
      }
    }
    if (error) {
      if (self.closed.load()) return std::nullopt;  // close() woke it: the loop ends
      raise_failure(self, error);
    }
    if (end) return std::nullopt;
    if (got) return got;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

void bind_epoch(py::module_& m) {
  py::class_<PyEpoch>(m, "Epoch", R"doc(
One epoch being iterated: `for batch in loader.epoch(e)`. len() is its number of batches.
Dropping it early (break, del) stops the pipeline promptly. close() does so at once.)doc")
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__",
           [](PyEpoch& self) {
             std::optional<Batch> b = next_batch(self);
             if (!b) {
               self.close();
               throw py::stop_iteration();
             }
             return PyBatch{std::move(*b), self.names};
           })
      .def("__len__", [](const PyEpoch& self) { return self.size; })
      .def("close", &PyEpoch::close, "Stops the epoch now; its batches already taken stay valid.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEpoch& self, const py::args&) { self.close(); });
}

void bind_exit_and_fork(py::module_& m) {
  // Interpreter exit: stop every epoch still running before finalization starts, while the
  // loader's workers can still take the GIL to finish a Python dataset's read. Each is closed: a
  // thread inside its next() is woken (its loop ends), the reads in flight end, the pipeline is
  // joined; after that no thread of ferry's takes the GIL. Epochs started later yield nothing.
  m.def("_stop_all", [] {
    g_exiting.store(true);
    std::vector<PyEpoch*> live;
    {
      const std::lock_guard<std::mutex> lock(g_live_mutex);
      live.assign(g_live.begin(), g_live.end());
    }
    // Their Python objects, held while they are closed: another thread may drop its last
    // reference meanwhile (close() releases the GIL).
    std::vector<py::object> held;
    for (PyEpoch* e : live) {
      held.push_back(py::cast(e, py::return_value_policy::reference));
      e->cancel();
    }
    for (PyEpoch* e : live) e->close();
    begin_exit();  // other threads take the GIL no more
  });

  // os.register_at_fork's after_in_child: the child starts clean. Epochs and loaders of the parent
  // are forgotten (their threads are not here) and refuse use; new ones work.
  m.def("_after_fork_in_child", [] {
    g_generation.fetch_add(1);
    g_exiting.store(false);
    exit_forgotten();
    reset_main_thread();
    const std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.clear();
  });
}

}  // namespace ferry::python
