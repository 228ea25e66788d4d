// ferry.Loader's keywords: LoaderOptions (the loop's own buffer added), the loader's state as
// given back, and where a Python dataset runs (worker processes or ferry's threads).

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "binding.hpp"
#include "pipeline/testing.hpp"
#include "pipeline/validate.hpp"
#include "py_dataset.hpp"
#include "py_loader.hpp"
#include "workers.hpp"

namespace ferry::python {

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
    int overflow = 0;
    const long long count = PyLong_AsLongLongAndOverflow(processes.ptr(), &overflow);
    // Below zero a ValueError, as the other counts' (docs/PYTHON.md); above 1024 ferry's own.
    if (overflow < 0 || (overflow == 0 && count < 0)) {
      throw py::value_error("Loader: processes is None or an int >= 0, not " +
                            py::repr(processes).cast<std::string>());
    }
    if (overflow > 0 || count > 1024) {
      throw ConfigError("Loader: processes is 0 (threads), 1..1024, or None, not " +
                        py::repr(processes).cast<std::string>());
    }
    options.count = static_cast<int>(count);
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
  // Counts below zero are a ValueError, as those of the unsigned options are (docs/PYTHON.md);
  // their upper bounds stay ferry's own ConfigErrors.
  for (const auto& [name, value, least] :
       {std::tuple{"workers", workers, 0}, std::tuple{"prefetch", prefetch, 1},
        std::tuple{"device_buffers", device_buffers, 2}}) {
    if (value < 0) {
      throw py::value_error(std::string("Loader: ") + name + " is an int >= " +
                            std::to_string(least) + ", not " + std::to_string(value));
    }
  }
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

LoaderOptions with_loop_buffer(const Dataset& dataset, LoaderOptions o, bool& added) {
  detail::validate_options(&dataset, o, detail::SimulatedCopy{});
  int& buffers = o.device.is_cpu() ? o.prefetch : o.device_buffers;
  added = buffers < detail::kMaxBuffers;
  if (added) buffers += 1;
  return o;
}

}  // namespace ferry::python
