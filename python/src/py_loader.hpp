#pragma once

// ferry.Loader, its epochs and batches: what the files of the binding share. loader.cpp binds the
// Loader class (its epochs started, its state, the garbage collector's view of it),
// loader_options.cpp turns its keywords into LoaderOptions and ProcessOptions, loader_epoch.cpp
// binds Epoch (next() and close(), interpreter exit and fork), loader_batch.cpp binds Batch and
// LoaderStats.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"
#include "workers.hpp"

namespace ferry::python {

/// Forks since the module was loaded: objects made before the last fork belong to the parent,
/// whose threads do not exist in this process.
inline std::atomic<std::uint64_t> g_generation{0};
/// Set by the atexit hook: the interpreter is going; no epoch starts any more.
inline std::atomic<bool> g_exiting{false};

/// Refuses an object made in the parent of a fork.
void check_generation(std::uint64_t generation, const char* what);

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

/// next() of an epoch, GIL released. On the main thread it waits in slices and runs Python's
/// signal handlers between them, so that a handler runs promptly and whatever it raises (a
/// KeyboardInterrupt, say) leaves next() with the epoch intact; a handler that returns lets the
/// wait go on. Nothing when the epoch is over or closed.
std::optional<Batch> next_batch(PyEpoch& self);

/// Where the Python datasets in `dataset` run: worker processes (`processes` of them; None: as
/// many as `workers`, 0 there meaning half the cores, when the datasets can be pickled; returns
/// their number) or ferry's threads (returns 0). `notes`, for stats().summary(), gets which and
/// why.
int use_processes(const Dataset& dataset, const py::object& processes, ProcessOptions options,
                  int workers, std::vector<std::string>& notes);
LoaderOptions make_options(std::size_t batch_size, bool shuffle, std::uint64_t seed, bool drop_last,
                           int workers, int prefetch, int device_buffers, const py::object& device,
                           bool pin_memory, const py::object& rank, const py::object& world_size,
                           const std::string& on_error, const std::string& ragged, double pad_value,
                           std::int64_t pad_multiple, std::size_t max_tokens,
                           std::size_t bucket_window, std::size_t shuffle_window,
                           std::uintptr_t stream, bool autotune, std::uint64_t memory_budget,
                           bool from_env);
LoaderState to_state(const py::handle& state);

/// A Python for loop still holds the previous batch while it asks for the next one (the loop
/// variable is rebound only after __next__ returns), so one buffer more than asked is made: the
/// loop's own, so that prefetch (or device_buffers) batches stay in flight behind it, and
/// prefetch=1 does not stall. The options are checked as the user gave them first, so that
/// what they set is what errors and stats() quote.
LoaderOptions with_loop_buffer(const Dataset& dataset, LoaderOptions o, bool& added);

/// LoaderStats and Batch (loader_batch.cpp).
void bind_batch(py::module_& m);
/// Epoch (loader_epoch.cpp).
void bind_epoch(py::module_& m);
/// _stop_all (interpreter exit) and _after_fork_in_child (loader_epoch.cpp).
void bind_exit_and_fork(py::module_& m);

}  // namespace ferry::python
