// ferry.Loader, its epochs and batches, its state and stats. The loader's threads never touch
// Python except through a Python dataset's read(), which takes the GIL; so every call that may
// wait for them (next(), the epoch's and the loader's teardown) releases the GIL first. This file
// binds the Loader class; py_loader.hpp says where its other parts are.

#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "binding.hpp"
#include "py_dataset.hpp"
#include "py_loader.hpp"
#include "workers.hpp"

namespace ferry::python {

void check_generation(std::uint64_t generation, const char* what) {
  if (generation == g_generation.load()) return;
  throw ConfigError(std::string("ferry: this ") + what +
                    " was made before os.fork(), in the parent process; its threads do not "
                    "exist in this child. Make a new Loader in the child (datasets made before "
                    "the fork can be given to it)");
}

namespace {

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

}  // namespace

void bind_loader(py::module_& m) {
  bind_batch(m);
  bind_epoch(m);

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
each sample's seed before its __getitem__; in worker processes random's and numpy's only once a
sample has drawn from them, that sample read again; "always": every one before every sample)
concern a dataset written in Python.)doc")
      .def(py::init([](const py::object& dataset, std::size_t batch_size, bool shuffle,
                       std::uint64_t seed, bool drop_last, int workers, int prefetch,
                       int device_buffers, const py::object& device, bool pin_memory,
                       const py::object& rank, const py::object& world_size,
                       const std::string& on_error, const std::string& ragged, double pad_value,
                       std::int64_t pad_multiple, std::size_t max_tokens, std::size_t bucket_window,
                       std::size_t shuffle_window, std::uintptr_t stream, bool autotune,
                       std::uint64_t memory_budget, bool from_env, const py::object& processes,
                       const std::string& start_method, const py::object& worker_init_fn,
                       double timeout, const py::object& seed_python) {
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
             if (py::isinstance<py::str>(seed_python) &&
                 seed_python.cast<std::string>() == "always") {
               po.seed_python = po.seed_always = true;
             } else if (py::isinstance<py::bool_>(seed_python) ||
                        py::type::of(seed_python).attr("__name__").cast<std::string>() ==
                            "bool_") {  // numpy's
               po.seed_python = seed_python.cast<bool>();
             } else {
               throw ConfigError("Loader: seed_python must be True, False or \"always\", not " +
                                 py::repr(seed_python).cast<std::string>());
             }
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

  bind_exit_and_fork(m);
}

}  // namespace ferry::python
