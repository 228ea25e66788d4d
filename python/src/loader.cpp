// ferry.Loader, its epochs and batches, its state and stats. The loader's threads never touch
// Python except through a Python dataset's read(), which takes the GIL; so every call that may
// wait for them (next(), the epoch's and the loader's teardown) releases the GIL first.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "pipeline/testing.hpp"
#include "pipeline/validate.hpp"
#include "py_dataset.hpp"
#include "workers.hpp"

namespace ferry::python {

namespace {

/// Forks since the module was loaded: objects made before the last fork belong to the parent,
/// whose threads do not exist in this process.
std::atomic<std::uint64_t> g_generation{0};
/// Set by the atexit hook: the interpreter is going; no epoch starts any more.
std::atomic<bool> g_exiting{false};

/// Refuses an object made in the parent of a fork.
void check_generation(std::uint64_t generation, const char* what) {
  if (generation == g_generation.load()) return;
  throw ConfigError(std::string("ferry: this ") + what +
                    " was made before os.fork(), in the parent process; its threads do not "
                    "exist in this child. Make a new Loader in the child (datasets made before "
                    "the fork can be given to it)");
}

/// An epoch being iterated from Python. next() and close() may come from any Python thread:
/// next() calls are serialized, and close() wakes a next() in progress (it then ends the loop)
/// and waits for it before the epoch goes. Live ones are listed so that interpreter exit can
/// stop them before it finalizes (a worker must not wait for the GIL then).
struct PyEpoch {
  std::unique_ptr<Epoch> epoch;  // replaced only with next_mutex and state_mutex held
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const std::vector<std::string>> names;
  std::size_t size = 0;
  std::uint64_t generation = g_generation.load();
  std::mutex next_mutex;            // one next() (or the teardown) at a time
  std::mutex state_mutex;           // guards cancelling `epoch` against its teardown
  std::atomic<int> in_next{0};      // threads inside next_batch()
  std::atomic<bool> closed{false};  // close() was called: next() ends the loop
  // next() gave the end or raised: the loader no longer counts the epoch as iterated (another may
  // start), so closing it must not touch reads in flight, which may be the next epoch's.
  std::atomic<bool> finished{false};

  PyEpoch(std::unique_ptr<Epoch> e, std::shared_ptr<const Dataset> d);
  PyEpoch(const PyEpoch&) = delete;
  PyEpoch& operator=(const PyEpoch&) = delete;
  ~PyEpoch();
  /// Stops the epoch: wakes a next() in progress, waits for it, then joins the pipeline.
  void close();
  /// Asks the pipeline to stop without waiting (interpreter exit).
  void cancel();
};

std::mutex g_live_mutex;
std::set<PyEpoch*> g_live;  // guarded by g_live_mutex

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

/// A batch held by Python: a copy of the loader's, so its buffer stays out of the ring while
/// Python holds it (or any tensor of it).
struct PyBatch {
  Batch batch;
  std::shared_ptr<const std::vector<std::string>> names;
};

struct PyLoader {
  std::shared_ptr<const Dataset> dataset;
  std::unique_ptr<Loader> loader;
  std::uint64_t next_epoch = 0;        // what iter(loader) plays next
  std::optional<LoaderState> pending;  // load_state_dict's, for the next iter(loader)
  bool buffer_added = false;           // the loop's own buffer (make_options) was added
  std::uint64_t generation = g_generation.load();
  // References to `dataset` held by this object and its Loader, none by anything else: then the
  // Python dataset it reads is this object's to report to the garbage collector (a dataset
  // that refers to its loader makes a cycle that only the collector can free).
  long sole_owner_count = 0;
  std::vector<std::string> notes;  // stats().summary()'s: where a Python dataset runs, and why
  bool uses_processes = false;     // its Python datasets' worker processes count it as a user

  PyLoader() = default;
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;
  ~PyLoader() {
    // As ~PyEpoch: at interpreter exit, another thread than the main one leaves it as it is.
    const PythonRegion region;
    if (generation != g_generation.load() || !region.entered()) {
      static_cast<void>(loader.release());  // the parent's, as PyEpoch's
      static_cast<void>(new std::shared_ptr<const Dataset>(std::move(dataset)));
      return;
    }
    // Worker processes first: reads waiting for them wake, so that the loader's teardown does not
    // wait for a __getitem__ in progress.
    release_processes();
    const ReleaseGil release;
    loader.reset();
    dataset.reset();
  }
  /// This loader's use of its Python datasets' worker processes ends (the last user stops them).
  void release_processes() {
    if (!uses_processes || !dataset) return;
    uses_processes = false;
    for (PyDataset* d : python_datasets(*dataset)) d->stop_processes();
  }
  Loader& get() {
    check_generation(generation, "Loader");
    if (!loader) throw ConfigError("ferry: this Loader was cleared by the garbage collector");
    return *loader;
  }
};

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

/// next() of an epoch, GIL released. On the main thread it waits in slices and runs Python's
/// signal handlers between them, so that a handler runs promptly and whatever it raises (a
/// KeyboardInterrupt, say) leaves next() with the epoch intact; a handler that returns lets the
/// wait go on. Nothing when the epoch is over or closed.
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

/// Where the Python datasets in `dataset` run: worker processes (`processes` of them; None: as
/// many as `workers`, 0 there meaning half the cores, when the datasets can be pickled; returns
/// their number) or ferry's threads (returns 0). `notes`, for stats().summary(), gets which and
/// why.
int use_processes(const Dataset& dataset, const py::object& processes, ProcessOptions options,
                  int workers, std::vector<std::string>& notes) {
  const std::vector<PyDataset*> python = python_datasets(dataset);
  for (PyDataset* d : python) d->set_seed_python(options.seed_python);
  if (!(options.timeout >= 0) || options.timeout > 1e9) {
    throw ConfigError("Loader: timeout is seconds >= 0 (0: no limit), not " +
                      std::to_string(options.timeout));
  }
  if (!options.worker_init_fn.is_none() && !PyCallable_Check(options.worker_init_fn.ptr())) {
    throw py::type_error("Loader: worker_init_fn is None or a callable(worker_id), not " +
                         py::repr(options.worker_init_fn).cast<std::string>());
  }
  const bool automatic = processes.is_none();
  if (automatic) {
    if (python.empty()) return 0;
    const int cores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
    options.count = workers > 0 ? workers : std::max(1, cores / 2);
  } else {
    if (!py::isinstance<py::int_>(processes) || py::isinstance<py::bool_>(processes)) {
      throw py::type_error("Loader: processes is None or an int, not " +
                           py::repr(processes).cast<std::string>());
    }
    options.count = processes.cast<int>();
    if (options.count < 0 || options.count > 1024) {
      throw ConfigError("Loader: processes is 0 (threads), 1..1024, or None, not " +
                        std::to_string(options.count));
    }
    if (options.count == 0) return 0;
    if (python.empty()) {
      throw ConfigError("Loader: processes=" + std::to_string(options.count) +
                        " is for datasets written in Python; ferry's own datasets already read "
                        "on every core with its threads (use workers)");
    }
  }
  if (automatic) {
    // A dataset that cannot be pickled stays on threads, and the summary says why.
    const py::object check = py::module_::import("ferry._worker").attr("check_picklable");
    const py::object unpicklable = py::module_::import("ferry._worker").attr("unpicklable_here");
    for (PyDataset* d : python) {
      std::string why;
      try {
        static_cast<void>(check(py::handle(d->source())));
        const py::object reason = unpicklable(py::handle(d->source()));
        if (!reason.is_none()) why = reason.cast<std::string>();
      } catch (py::error_already_set& e) {
        why = "it cannot be pickled (" +
              py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
              py::str(e.value()).cast<std::string>() + ")";
      }
      if (!why.empty()) {
        notes.push_back("the Python dataset runs on ferry's threads, not worker processes: " + why);
        return 0;
      }
    }
  }
  for (PyDataset* d : python) d->use_processes(options);
  notes.push_back("the Python dataset runs in " + std::to_string(options.count) +
                  " worker process" + (options.count == 1 ? "" : "es") + " (" +
                  options.start_method + ")");
  return options.count;
}

LoaderOptions make_options(std::size_t batch_size, bool shuffle, std::uint64_t seed, bool drop_last,
                           int workers, int prefetch, int device_buffers, const py::object& device,
                           bool pin_memory, const py::object& rank, const py::object& world_size,
                           const std::string& on_error, const std::string& ragged, double pad_value,
                           std::int64_t pad_multiple, std::size_t max_tokens,
                           std::size_t bucket_window, std::size_t shuffle_window,
                           std::uintptr_t stream, bool autotune, std::uint64_t memory_budget,
                           bool from_env) {
  LoaderOptions o = from_env ? LoaderOptions::from_env() : LoaderOptions{};
  o.autotune = autotune;
  o.memory_budget = memory_budget;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.workers = workers;
  o.prefetch = prefetch;
  o.device_buffers = device_buffers;
  if (!device.is_none() || !from_env) o.device = to_device(device);
  o.pin_memory = pin_memory;
  const auto whole = [](const py::object& value, const char* name) {
    if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
      throw py::type_error(std::string("Loader: ") + name + " is an int or None, not " +
                           py::repr(value).cast<std::string>());
    }
    return value.cast<int>();
  };
  if (!rank.is_none()) o.rank = whole(rank, "rank");
  if (!world_size.is_none()) o.world_size = whole(world_size, "world_size");
  if (on_error == "raise") {
    o.on_error = ErrorPolicy::raise;
  } else if (on_error == "skip") {
    o.on_error = ErrorPolicy::skip;
  } else {
    throw ConfigError("Loader: on_error is \"raise\" or \"skip\", not \"" + on_error + "\"");
  }
  if (ragged == "pad") {
    o.ragged = RaggedBatch::pad;
  } else if (ragged == "pack") {
    o.ragged = RaggedBatch::pack;
  } else {
    throw ConfigError("Loader: ragged is \"pad\" or \"pack\", not \"" + ragged + "\"");
  }
  o.pad_value = pad_value;
  o.pad_multiple = pad_multiple;
  o.max_tokens = max_tokens;
  o.bucket_window = bucket_window;
  o.shuffle_window = shuffle_window;
  o.stream = reinterpret_cast<CUstream_st*>(stream);
  return o;
}

LoaderState to_state(const py::handle& state) {
  if (py::isinstance<py::dict>(state)) {
    return LoaderState::parse(state.cast<py::dict>()["state"].cast<std::string>());
  }
  return LoaderState::parse(state.cast<std::string>());
}

/// A Python for loop still holds the previous batch while it asks for the next one (the loop
/// variable is rebound only after __next__ returns), so one buffer more than asked is made: the
/// loop's own, so that prefetch (or device_buffers) batches stay in flight behind it, and
/// prefetch=1 does not stall. The options are checked as the user gave them first, so that
/// what they set is what errors and stats() quote.
LoaderOptions with_loop_buffer(const Dataset& dataset, LoaderOptions o, bool& added) {
  detail::validate_options(&dataset, o, detail::SimulatedCopy{});
  int& buffers = o.device.is_cpu() ? o.prefetch : o.device_buffers;
  added = buffers < detail::kMaxBuffers;
  if (added) buffers += 1;
  return o;
}

std::unique_ptr<PyEpoch> start(PyLoader& self, const std::function<Epoch(Loader&)>& make) {
  Loader& loader = self.get();
  std::unique_ptr<Epoch> e;
  if (g_exiting.load()) {
    // The interpreter is exiting: an epoch started now (by a daemon thread) yields nothing.
    return std::make_unique<PyEpoch>(nullptr, self.dataset);
  }
  // Reads go to the worker processes again (an epoch left early had them give up). A loader
  // runs one epoch at a time: none of another epoch's reads is in flight now.
  for (PyDataset* d : python_datasets(*self.dataset)) d->resume_reads();
  {
    const ReleaseGil release;
    e = std::make_unique<Epoch>(make(loader));
  }
  return std::make_unique<PyEpoch>(std::move(e), self.dataset);
}

/// iter(loader): the epoch load_state_dict() left off in, else the next one of 0, 1, 2, ...
/// The loader's position moves only once the epoch has started.
std::unique_ptr<PyEpoch> next_epoch(PyLoader& self) {
  if (self.pending) {
    const LoaderState state = *self.pending;
    std::unique_ptr<PyEpoch> rest = start(self, [&](Loader& l) { return l.resume(state); });
    self.pending.reset();
    self.next_epoch = state.epoch + 1;
    if (rest->size != 0) return rest;
    rest.reset();  // that epoch was over: go on with the next
  }
  const std::uint64_t e = self.next_epoch;
  std::unique_ptr<PyEpoch> epoch = start(self, [e](Loader& l) { return l.epoch(e); });
  self.next_epoch = e + 1;
  return epoch;
}

/// The garbage collector's view of a Loader: the Python dataset it reads, where it alone holds it.
int traverse_loader(PyObject* self, visitproc visit, void* arg) {
#if PY_VERSION_HEX >= 0x03090000
  Py_VISIT(Py_TYPE(self));
#endif
  auto& inst = *reinterpret_cast<py::detail::instance*>(self);
  const py::detail::value_and_holder vh = inst.get_value_and_holder(nullptr, false);
  if (!vh || !vh.holder_constructed()) return 0;
  const auto* loader = vh.value_ptr<PyLoader>();
  if (loader == nullptr || !loader->dataset || !loader->loader) return 0;
  if (loader->dataset.use_count() != loader->sole_owner_count) return 0;
  if (loader->generation != g_generation.load()) return 0;
  PyObject* source = python_source(*loader->dataset);
  Py_VISIT(source);
  return 0;
}

/// pybind11's dealloc of a Loader, the object untracked by the garbage collector first: its
/// teardown releases the GIL (joining the loader's threads), and a collection meanwhile (on
/// another thread, or the interpreter's last one at exit) must not find it and free it again.
void dealloc_loader(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Py_TYPE(self)->tp_base->tp_dealloc(self);  // pybind11's (pybind11_object's)
}

/// Breaks a cycle through a Loader: the loader goes (its threads joined), then its dataset.
int clear_loader(PyObject* self) {
  auto& inst = *reinterpret_cast<py::detail::instance*>(self);
  const py::detail::value_and_holder vh = inst.get_value_and_holder(nullptr, false);
  if (!vh || !vh.holder_constructed()) return 0;
  auto* loader = vh.value_ptr<PyLoader>();
  if (loader == nullptr || loader->generation != g_generation.load()) return 0;
  const PythonRegion region;
  if (!region.entered()) return 0;
  loader->release_processes();
  {
    const ReleaseGil release;
    loader->loader.reset();
  }
  loader->dataset.reset();
  return 0;
}

/// The loader's state, or the one load_state_dict() gave until an epoch starts from it.
LoaderState current_state(PyLoader& self) {
  Loader& loader = self.get();
  return self.pending ? *self.pending : loader.state();
}

/// The position of field `key` in a batch; nothing for a name it lacks or a key not a str.
std::optional<std::size_t> field_of(const PyBatch& b, const py::object& key) {
  if (!py::isinstance<py::str>(key)) return std::nullopt;
  const auto name = key.cast<std::string>();
  for (std::size_t f = 0; f < b.names->size(); ++f) {
    if ((*b.names)[f] == name) return f;
  }
  return std::nullopt;
}

py::array indices_array(const Batch& b) {
  py::array_t<std::int64_t> out(static_cast<py::ssize_t>(b.size()));
  auto* p = out.mutable_data();
  for (std::size_t i = 0; i < b.size(); ++i) p[i] = static_cast<std::int64_t>(b.indices()[i]);
  return out;
}

}  // namespace

void bind_loader(py::module_& m) {
  py::class_<LoaderStats>(m, "LoaderStats", "Time and volume per stage since the loader was made.")
      .def_readonly("batches", &LoaderStats::batches)
      .def_readonly("samples", &LoaderStats::samples)
      .def_readonly("bytes", &LoaderStats::bytes)
      .def_readonly("skipped", &LoaderStats::skipped)
      .def_property_readonly("skip_reasons",
                             [](const LoaderStats& s) { return message_texts(s.skip_reasons); })
      .def_readonly("read_seconds", &LoaderStats::read_seconds)
      .def_readonly("worker_capacity_seconds", &LoaderStats::worker_capacity_seconds)
      .def_readonly("slot_wait_seconds", &LoaderStats::slot_wait_seconds)
      .def_readonly("copy_seconds", &LoaderStats::copy_seconds)
      .def_readonly("consumer_wait_seconds", &LoaderStats::consumer_wait_seconds)
      .def_readonly("wall_seconds", &LoaderStats::wall_seconds)
      .def_readonly("first_batch_seconds", &LoaderStats::first_batch_seconds)
      .def_readonly("staging_allocations", &LoaderStats::staging_allocations)
      .def_readonly("device_allocations", &LoaderStats::device_allocations)
      .def_readonly("host_syncs", &LoaderStats::host_syncs)
      .def_readonly("background_syncs", &LoaderStats::background_syncs)
      .def_readonly("workers", &LoaderStats::workers)
      .def_readonly("prefetch", &LoaderStats::prefetch)
      .def_readonly("memory_bytes", &LoaderStats::memory_bytes)
      .def_readonly("memory_budget", &LoaderStats::memory_budget)
      .def_readonly("autotune", &LoaderStats::autotune)
      .def_readonly("source_samples", &LoaderStats::source_samples)
      .def_readonly("notes", &LoaderStats::notes)
      .def("consumer_wait_fraction", &LoaderStats::consumer_wait_fraction)
      .def("worker_busy_fraction", &LoaderStats::worker_busy_fraction)
      .def("summary", &LoaderStats::summary,
           "One line naming the bottleneck (input or compute), with the figures behind it.")
      .def("__repr__", [](const LoaderStats& s) { return "ferry.LoaderStats: " + s.summary(); });

  py::class_<PyBatch>(m, "Batch", R"doc(
One batch: a mapping of field name to ferry.Tensor ([batch, ...field shape], on the loader's
device). batch.indices are the samples' dataset indices; batch.size their count. A batch (or any
tensor of it) kept past its iteration keeps its buffer out of the ring until it is gone; keeping
as many as there are buffers raises ferry.ConfigError instead of waiting.)doc")
      .def("__getitem__",
           [](const PyBatch& b, const py::object& key) {
             const std::optional<std::size_t> f = field_of(b, key);
             if (!f) throw py::key_error(py::repr(key).cast<std::string>());
             return b.batch.at(*f);
           })
      .def(
          "get",
          [](const PyBatch& b, const py::object& key, const py::object& fallback) -> py::object {
            const std::optional<std::size_t> f = field_of(b, key);
            return f ? py::cast(b.batch.at(*f)) : fallback;
          },
          py::arg("key"), py::arg("default") = py::none())
      .def("__len__", [](const PyBatch& b) { return b.names->size(); })
      .def("__contains__",
           [](const PyBatch& b, const py::object& key) { return field_of(b, key).has_value(); })
      .def("__iter__", [](const PyBatch& b) { return py::iter(py::cast(*b.names)); })
      .def("keys", [](const PyBatch& b) { return *b.names; })
      .def("values",
           [](const PyBatch& b) {
             std::vector<Tensor> out;
             for (std::size_t f = 0; f < b.names->size(); ++f) out.push_back(b.batch.at(f));
             return out;
           })
      .def("items",
           [](const PyBatch& b) {
             std::vector<std::pair<std::string, Tensor>> out;
             for (std::size_t f = 0; f < b.names->size(); ++f) {
               out.emplace_back((*b.names)[f], b.batch.at(f));
             }
             return out;
           })
      .def_property_readonly(
          "indices", [](const PyBatch& b) { return indices_array(b.batch); },
          "The samples' dataset indices, in batch order (numpy int64).")
      .def_property_readonly(
          "size", [](const PyBatch& b) { return b.batch.size(); }, "Samples in this batch.")
      .def_property_readonly(
          "number", [](const PyBatch& b) { return b.batch.number(); },
          "The batch's position in its epoch.")
      .def(
          "lengths", [](const PyBatch& b, const std::string& f) { return b.batch.lengths(f); },
          py::arg("field"), "A ragged field's rows per sample: i64 [N].")
      .def(
          "offsets", [](const PyBatch& b, const std::string& f) { return b.batch.offsets(f); },
          py::arg("field"), "A packed ragged field's sample starts: i32 [N + 1] (cu_seqlens).")
      .def("__repr__", [](const PyBatch& b) {
        std::string names;
        for (const auto& n : *b.names) names += (names.empty() ? "" : ", ") + n;
        return "ferry.Batch(number=" + std::to_string(b.batch.number()) +
               ", size=" + std::to_string(b.batch.size()) + ", fields=[" + names + "])";
      });

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

  m.def("default_memory_budget", &default_memory_budget,
        "The budget autotune keeps to when memory_budget is 0: an eighth of the memory this "
        "process may use (physical memory, or its cgroup's limit where lower), in bytes.");

  py::class_<PyLoader>(m, "Loader", py::custom_type_setup([](PyHeapTypeObject* heap) {
                         auto* type = &heap->ht_type;
                         type->tp_flags |= Py_TPFLAGS_HAVE_GC;
                         type->tp_traverse = traverse_loader;
                         type->tp_clear = clear_loader;
                         type->tp_dealloc = dealloc_loader;
                       }),
                       R"doc(
Feeds a training loop: batches of `dataset` already on `device`, read and batched on ferry's
worker threads (a Python dataset's __getitem__ in worker processes: processes=, see README),
staged in pinned memory and copied ahead of the loop.

    loader = ferry.Loader(dataset, batch_size=256, shuffle=True, device="cuda")
    for epoch in range(10):
        for batch in loader.epoch(epoch):
            x, y = batch["image"], batch["label"]

Every option of C++'s LoaderOptions is a keyword argument. device=None is Device.best()
(cuda:0 where a GPU is usable, else cpu); rank and world_size None are 0 and 1, or the
launcher's with from_env=True (torchrun's RANK / WORLD_SIZE / LOCAL_RANK, or mpirun's),
which also picks cuda:LOCAL_RANK. stream: the consumer's CUDA stream (a cudaStream_t as an
int; 0 is the default stream). autotune=True (the default) chooses workers and prefetch while
the loader runs (workers and prefetch are where it starts), never above memory_budget (0:
ferry.default_memory_budget(), or what the starting options need where that is more);
autotune=False keeps them as given. iter(loader) plays epochs 0, 1, 2, ... one per iter().
processes (None: as many as workers when a Python dataset can be pickled, else threads; 0:
threads), start_method ("forkserver", "spawn"), worker_init_fn(worker_id), timeout (seconds a
sample, or a worker_init_fn, may take in a process; 0: no limit) and seed_python (seed random, numpy and torch from
each sample's seed before its __getitem__) concern a dataset written in Python.)doc")
      .def(py::init([](const py::object& dataset, std::size_t batch_size, bool shuffle,
                       std::uint64_t seed, bool drop_last, int workers, int prefetch,
                       int device_buffers, const py::object& device, bool pin_memory,
                       const py::object& rank, const py::object& world_size,
                       const std::string& on_error, const std::string& ragged, double pad_value,
                       std::int64_t pad_multiple, std::size_t max_tokens, std::size_t bucket_window,
                       std::size_t shuffle_window, std::uintptr_t stream, bool autotune,
                       std::uint64_t memory_budget, bool from_env, const py::object& processes,
                       const std::string& start_method, const py::object& worker_init_fn,
                       double timeout, bool seed_python) {
             auto self = std::make_unique<PyLoader>();
             // Its own copy of each Python dataset: its own worker processes and reads.
             self->dataset = loader_copy(to_dataset(dataset));
             LoaderOptions o = with_loop_buffer(
                 *self->dataset,
                 make_options(batch_size, shuffle, seed, drop_last, workers, prefetch,
                              device_buffers, device, pin_memory, rank, world_size, on_error,
                              ragged, pad_value, pad_multiple, max_tokens, bucket_window,
                              shuffle_window, stream, autotune, memory_budget, from_env),
                 self->buffer_added);
             ProcessOptions po;
             po.start_method = start_method;
             po.worker_init_fn = worker_init_fn;
             po.timeout = timeout;
             po.seed = o.seed;
             po.seed_python = seed_python;
             const int count = use_processes(*self->dataset, processes, po, o.workers, self->notes);
             self->uses_processes = count > 0;
             // A worker thread drives one process at a time: as many threads as processes
             // (autotune may use fewer, and so fewer processes).
             if (count > 0) o.workers = count;
             {
               const ReleaseGil release;
               self->loader = std::make_unique<Loader>(self->dataset, o);
             }
             self->sole_owner_count = self->dataset.use_count();
             return self;
           }),
           py::arg("dataset"), py::kw_only(), py::arg("batch_size") = 32,
           py::arg("shuffle") = false, py::arg("seed") = 0, py::arg("drop_last") = false,
           py::arg("workers") = 0, py::arg("prefetch") = 4, py::arg("device_buffers") = 2,
           py::arg("device") = py::none(), py::arg("pin_memory") = true,
           py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
           py::arg("on_error") = "raise", py::arg("ragged") = "pad", py::arg("pad_value") = 0.0,
           py::arg("pad_multiple") = 1, py::arg("max_tokens") = 0, py::arg("bucket_window") = 0,
           py::arg("shuffle_window") = 0, py::arg("stream") = 0, py::arg("autotune") = true,
           py::arg("memory_budget") = 0, py::arg("from_env") = false,
           py::arg("processes") = py::none(), py::arg("start_method") = "forkserver",
           py::arg("worker_init_fn") = py::none(), py::arg("timeout") = 0.0,
           py::arg("seed_python") = true)
      .def(
          "epoch",
          [](PyLoader& self, std::uint64_t e, std::size_t start_batch) {
            std::unique_ptr<PyEpoch> epoch =
                start(self, [&](Loader& l) { return l.epoch(e, start_batch); });
            self.next_epoch = e + 1;
            return epoch;
          },
          py::arg("epoch"), py::arg("start_batch") = 0, py::keep_alive<0, 1>(),
          "Epoch `epoch` from batch `start_batch`: the same batches, in the same order, as an "
          "uninterrupted run gives from there.")
      .def(
          "resume",
          [](PyLoader& self, const py::object& state) {
            if (state.is_none()) {
              throw py::type_error(
                  "Loader.resume: state is required (what Loader.state() returned)");
            }
            const LoaderState s = to_state(state);
            std::unique_ptr<PyEpoch> epoch = start(self, [&](Loader& l) { return l.resume(s); });
            self.next_epoch = s.epoch + 1;
            return epoch;
          },
          py::arg("state") = py::none(), py::keep_alive<0, 1>(),
          "The rest of the epoch where `state` (from state(), perhaps of another process or "
          "world size) left off.")
      .def("__iter__", &next_epoch, py::keep_alive<0, 1>())
      .def("__len__", [](PyLoader& self) { return self.get().batches_per_epoch(); })
      .def_property_readonly("batches_per_epoch",
                             [](PyLoader& self) { return self.get().batches_per_epoch(); })
      .def(
          "state", [](PyLoader& self) { return current_state(self).str(); },
          "Where the consumer stands, as text: the epoch, the next batch and the job's position "
          "(after load_state_dict(), the loaded position until its epoch starts).")
      .def(
          "state_dict",
          [](PyLoader& self) {
            py::dict d;
            d["state"] = current_state(self).str();
            return d;
          },
          "torchdata StatefulDataLoader's convention: {\"state\": state()}.")
      .def(
          "load_state_dict",
          [](PyLoader& self, const py::object& d) {
            if (!py::isinstance<py::dict>(d) || !d.cast<py::dict>().contains("state")) {
              throw py::type_error(
                  "Loader.load_state_dict: state_dict is a dict with a "
                  "\"state\" text (from state_dict()), not " +
                  py::repr(d).cast<std::string>());
            }
            const py::object text = d.cast<py::dict>()["state"];
            if (!py::isinstance<py::str>(text)) {
              throw py::type_error("Loader.load_state_dict: state_dict[\"state\"] is a text, not " +
                                   py::repr(text).cast<std::string>());
            }
            const LoaderState state = LoaderState::parse(text.cast<std::string>());
            self.get().check_state(state);  // refused: nothing changes
            self.pending = state;
          },
          py::arg("state_dict"),
          "The next iter(loader) continues where the state dict left off (resume()). A state of "
          "another order is refused (ConfigError) and changes nothing.")
      .def(
          "stats",
          [](PyLoader& self) {
            LoaderStats s = self.get().stats();
            s.notes.insert(s.notes.end(), self.notes.begin(), self.notes.end());
            // The loop's own buffer (with_loop_buffer) is the binding's, not the user's.
            if (self.buffer_added && self.get().options().device.is_cpu() && s.prefetch > 1) {
              s.prefetch -= 1;
            }
            return s;
          },
          "The loader's statistics; stats().summary() names the bottleneck.")
      .def_property_readonly("device", [](PyLoader& self) { return self.get().options().device; })
      .def_property_readonly("dataset", [](const PyLoader& self) -> py::object {
        auto d = std::const_pointer_cast<Dataset>(self.dataset);
        return py::cast(d);
      });

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
