// Mixture: weighted mixing of datasets with the same fields.

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "datasets.hpp"

namespace ferry::python {

void bind_mixture(py::module_& m) {
  py::class_<Mixture, Dataset, std::shared_ptr<Mixture>>(m, "Mixture", R"doc(
Weighted mixing of datasets with the same fields: ferry.Mixture([(a, 1.0), (b, 3.0)],
epoch_size=0). Index offset(k) + i is sample i of source k. Each epoch of a loader over it holds
exactly shares[k] samples of source k (epoch_size x w_k / sum w, rounded by largest remainders;
epoch_size 0: the sum of the sizes); a source asked for more than it has repeats every sample as
evenly as possible, one asked for fewer gives another subset each epoch. source_field: the name
of an extra i64 field holding each sample's source. stratified: a batch size (batch_size x
world_size) whose every batch holds each source's share to within one sample; the mixture then
orders its epochs itself, whatever the loader's shuffle.)doc")
      .def(py::init([](const py::sequence& sources, std::size_t epoch_size,
                       const std::string& source_field, std::size_t stratified) {
             std::vector<MixtureSource> list;
             std::size_t k = 0;
             for (const py::handle item : sources) {
               const std::string name = "sources[" + std::to_string(k++) + "]";
               if (!(py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) ||
                   py::len(item) != 2) {
                 throw ConfigError("Mixture: " + name + " is a (dataset, weight) pair, not " +
                                   py::repr(item).cast<std::string>());
               }
               const auto pair = item.cast<py::tuple>();
               const double weight =
                   argument<double>(pair[1], "Mixture", name + "'s weight", "a number");
               list.push_back({to_dataset(pair[0]), weight});
             }
             MixtureOptions o;
             o.epoch_size = epoch_size;
             o.source_field = source_field;
             o.stratified = stratified;
             return Mixture::open(std::move(list), o);
           }),
           py::arg("sources"), py::kw_only(), py::arg("epoch_size") = 0,
           py::arg("source_field") = "", py::arg("stratified") = 0)
      .def_property_readonly("epoch_size", &Mixture::epoch_size)
      .def_property_readonly("shares", &Mixture::shares)
      .def_property_readonly("num_sources", &Mixture::num_sources)
      .def(
          "offset",
          [](const Mixture& mix, std::size_t source) {
            if (source >= mix.num_sources()) throw py::index_error("Mixture: no such source");
            return mix.offset(source);
          },
          py::arg("source"), "The index of the source's first sample.")
      .def(
          "source_of",
          [](const Mixture& mix, std::size_t index) {
            if (index >= mix.size()) throw py::index_error("Mixture: index past the samples");
            return mix.source_of(index);
          },
          py::arg("index"))
      .def(
          "epoch_indices",
          [](const Mixture& mix, std::uint64_t seed, std::uint64_t epoch) {
            return mix.epoch_indices(seed, epoch);
          },
          py::arg("seed"), py::arg("epoch"),
          "The dataset indices epoch `epoch` holds, unshuffled, from (seed, epoch) only.");
}

}  // namespace ferry::python
