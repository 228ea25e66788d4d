// ferry.Loader, its epochs and batches, its state and stats. The loader's threads never touch
// Python except through a Python dataset's read(), which takes the GIL; so every call that may
// wait for them (next(), the epoch's and the loader's teardown) releases the GIL first.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"

namespace ferry::python {

namespace {

struct PyLoader;

/// An epoch being iterated from Python. Live ones are listed so that interpreter exit can stop
/// them before it finalizes (a worker must not wait for the GIL then).
struct PyEpoch {
  std::unique_ptr<Epoch> epoch;
  std::shared_ptr<const Dataset> dataset;
  std::shared_ptr<const std::vector<std::string>> names;
  std::size_t size = 0;
  std::atomic<bool> in_next{false};  // a thread is inside next() (GIL released)

  PyEpoch(std::unique_ptr<Epoch> e, std::shared_ptr<const Dataset> d);
  PyEpoch(const PyEpoch&) = delete;
  PyEpoch& operator=(const PyEpoch&) = delete;
  ~PyEpoch();
  void close();
};

std::mutex g_live_mutex;
std::set<PyEpoch*> g_live;  // guarded by g_live_mutex

PyEpoch::PyEpoch(std::unique_ptr<Epoch> e, std::shared_ptr<const Dataset> d)
    : epoch(std::move(e)), dataset(std::move(d)) {
  auto n = std::make_shared<std::vector<std::string>>();
  for (const FieldSpec& f : dataset->fields()) n->push_back(f.name);
  names = std::move(n);
  size = epoch->size();
  const std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.insert(this);
}

PyEpoch::~PyEpoch() {
  {
    const std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.erase(this);
  }
  close();
}

/// Stops the pipeline (promptly: its fill tasks may be waiting for the GIL, which is released).
void PyEpoch::close() {
  if (!epoch) return;
  std::unique_ptr<Epoch> doomed = std::move(epoch);
  if (PyGILState_Check() != 0) {
    const py::gil_scoped_release release;
    doomed.reset();
  } else {
    doomed.reset();
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

  PyLoader() = default;
  PyLoader(const PyLoader&) = delete;
  PyLoader& operator=(const PyLoader&) = delete;
  ~PyLoader() {
    const py::gil_scoped_release release;
    loader.reset();
    dataset.reset();
  }
};

/// next() of an epoch, GIL released, Ctrl-C able to wake it. Raises what the epoch raised: a
/// Python dataset's own exception as it was (with the loader's text as a note), KeyboardInterrupt
/// after Ctrl-C, ferry's errors as their classes.
const Batch* next_batch(PyEpoch& self) {
  if (!self.epoch) return nullptr;
  std::exception_ptr error;
  const Batch* b = nullptr;
  bool interrupted = false;
  {
    const InterruptScope scope(self.epoch.get());
    {
      self.in_next.store(true);
      const py::gil_scoped_release release;
      try {
        b = self.epoch->next();
      } catch (...) {
        error = std::current_exception();
      }
      self.in_next.store(false);
    }
    interrupted = scope.interrupted();
  }
  if (!error) return b;
  if (interrupted) {
    // The epoch is cancelled; it is joined when it goes (a read still running ends first).
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    PyErr_SetNone(PyExc_KeyboardInterrupt);
    throw py::error_already_set();
  }
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
  if (!rank.is_none()) o.rank = rank.cast<int>();
  if (!world_size.is_none()) o.world_size = world_size.cast<int>();
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
  // A Python for loop still holds the previous batch while it asks for the next one (the loop
  // variable is rebound only after __next__ returns), so one buffer more than asked is made:
  // the loop's own, so that prefetch (or device_buffers) batches stay in flight behind it, and
  // prefetch=1 does not stall.
  if (o.device.is_cpu()) {
    o.prefetch += 1;
  } else {
    o.device_buffers += 1;
  }
  return o;
}

LoaderState to_state(const py::handle& state) {
  if (py::isinstance<py::dict>(state)) {
    return LoaderState::parse(state.cast<py::dict>()["state"].cast<std::string>());
  }
  return LoaderState::parse(state.cast<std::string>());
}

std::unique_ptr<PyEpoch> start(PyLoader& self, const std::function<Epoch(Loader&)>& make) {
  std::unique_ptr<Epoch> e;
  {
    const py::gil_scoped_release release;
    e = std::make_unique<Epoch>(make(*self.loader));
  }
  return std::make_unique<PyEpoch>(std::move(e), self.dataset);
}

/// iter(loader): the epoch load_state_dict() left off in, else the next one of 0, 1, 2, ...
std::unique_ptr<PyEpoch> next_epoch(PyLoader& self) {
  if (self.pending) {
    const LoaderState state = *self.pending;
    self.pending.reset();
    self.next_epoch = state.epoch + 1;
    std::unique_ptr<PyEpoch> rest = start(self, [&](Loader& l) { return l.resume(state); });
    if (rest->size != 0) return rest;
    rest.reset();  // that epoch was over: go on with the next
  }
  const std::uint64_t e = self.next_epoch++;
  return start(self, [e](Loader& l) { return l.epoch(e); });
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
      .def_readonly("skip_reasons", &LoaderStats::skip_reasons)
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
      .def("__getitem__", [](const PyBatch& b, const std::string& name) { return b.batch[name]; })
      .def("__len__", [](const PyBatch& b) { return b.names->size(); })
      .def("__contains__",
           [](const PyBatch& b, const std::string& name) {
             for (const auto& n : *b.names) {
               if (n == name) return true;
             }
             return false;
           })
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
             const Batch* b = next_batch(self);
             if (b == nullptr) {
               self.close();
               throw py::stop_iteration();
             }
             return PyBatch{*b, self.names};
           })
      .def("__len__", [](const PyEpoch& self) { return self.size; })
      .def("close", &PyEpoch::close, "Stops the epoch now; its batches already taken stay valid.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEpoch& self, const py::args&) { self.close(); });

  m.def("default_memory_budget", &default_memory_budget,
        "The budget autotune keeps to when memory_budget is 0: an eighth of the memory this "
        "process may use (physical memory, or its cgroup's limit where lower), in bytes.");

  py::class_<PyLoader>(m, "Loader", R"doc(
Feeds a training loop: batches of `dataset` already on `device`, read and batched on ferry's
worker threads (no worker processes), staged in pinned memory and copied ahead of the loop.

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
autotune=False keeps them as given. iter(loader) plays epochs 0, 1, 2, ... one per iter().)doc")
      .def(py::init([](const py::object& dataset, std::size_t batch_size, bool shuffle,
                       std::uint64_t seed, bool drop_last, int workers, int prefetch,
                       int device_buffers, const py::object& device, bool pin_memory,
                       const py::object& rank, const py::object& world_size,
                       const std::string& on_error, const std::string& ragged, double pad_value,
                       std::int64_t pad_multiple, std::size_t max_tokens, std::size_t bucket_window,
                       std::size_t shuffle_window, std::uintptr_t stream, bool autotune,
                       std::uint64_t memory_budget, bool from_env) {
             auto self = std::make_unique<PyLoader>();
             self->dataset = to_dataset(dataset);
             const LoaderOptions o =
                 make_options(batch_size, shuffle, seed, drop_last, workers, prefetch,
                              device_buffers, device, pin_memory, rank, world_size, on_error,
                              ragged, pad_value, pad_multiple, max_tokens, bucket_window,
                              shuffle_window, stream, autotune, memory_budget, from_env);
             const py::gil_scoped_release release;
             self->loader = std::make_unique<Loader>(self->dataset, o);
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
           py::arg("memory_budget") = 0, py::arg("from_env") = false)
      .def(
          "epoch",
          [](PyLoader& self, std::uint64_t e, std::size_t start_batch) {
            self.next_epoch = e + 1;
            return start(self, [&](Loader& l) { return l.epoch(e, start_batch); });
          },
          py::arg("epoch"), py::arg("start_batch") = 0, py::keep_alive<0, 1>(),
          "Epoch `epoch` from batch `start_batch`: the same batches, in the same order, as an "
          "uninterrupted run gives from there.")
      .def(
          "resume",
          [](PyLoader& self, const py::object& state) {
            const LoaderState s = to_state(state);
            self.next_epoch = s.epoch + 1;
            return start(self, [&](Loader& l) { return l.resume(s); });
          },
          py::arg("state"), py::keep_alive<0, 1>(),
          "The rest of the epoch where `state` (from state(), perhaps of another process or "
          "world size) left off.")
      .def("__iter__", &next_epoch, py::keep_alive<0, 1>())
      .def("__len__", [](const PyLoader& self) { return self.loader->batches_per_epoch(); })
      .def_property_readonly("batches_per_epoch",
                             [](const PyLoader& self) { return self.loader->batches_per_epoch(); })
      .def(
          "state", [](const PyLoader& self) { return self.loader->state().str(); },
          "Where the consumer stands, as text: the epoch, the next batch and the job's position.")
      .def(
          "state_dict",
          [](const PyLoader& self) {
            py::dict d;
            d["state"] = self.loader->state().str();
            return d;
          },
          "torchdata StatefulDataLoader's convention: {\"state\": state()}.")
      .def(
          "load_state_dict", [](PyLoader& self, const py::dict& d) { self.pending = to_state(d); },
          py::arg("state_dict"),
          "The next iter(loader) continues where the state dict left off (resume()).")
      .def(
          "stats", [](const PyLoader& self) { return self.loader->stats(); },
          "The loader's statistics; stats().summary() names the bottleneck.")
      .def_property_readonly("device",
                             [](const PyLoader& self) { return self.loader->options().device; })
      .def_property_readonly("dataset", [](const PyLoader& self) -> py::object {
        auto d = std::const_pointer_cast<Dataset>(self.dataset);
        return py::cast(d);
      });

  // Interpreter exit: stop every epoch still running before finalization starts, while the
  // loader's workers can still take the GIL to finish a Python dataset's read.
  m.def("_stop_all", [] {
    std::vector<PyEpoch*> live;
    {
      const std::lock_guard<std::mutex> lock(g_live_mutex);
      live.assign(g_live.begin(), g_live.end());
    }
    for (PyEpoch* e : live) {
      if (e->epoch) e->epoch->cancel();
    }
    // Joined here, GIL released, unless another (daemon) thread is inside its next().
    for (PyEpoch* e : live) {
      if (!e->in_next.load()) e->close();
    }
  });
}

}  // namespace ferry::python
