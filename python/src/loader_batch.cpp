// ferry.Batch (a batch held by Python: a mapping of field name to tensor) and ferry.LoaderStats.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_loader.hpp"

namespace ferry::python {

namespace {

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

void bind_batch(py::module_& m) {
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
}

}  // namespace ferry::python
