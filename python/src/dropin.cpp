// What ferry.torch.DataLoader needs to stand in for torch's: the form of a Python dataset's
// samples (a dict gives dict batches, a tuple tuples, one array a tensor), and each loader's own
// copy of the Python datasets it reads (loader_copy), so that two loaders over one Mixture each
// have their own worker processes and reads.

#include <memory>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"

namespace ferry::python {

std::shared_ptr<const Dataset> loader_copy(const std::shared_ptr<const Dataset>& dataset) {
  if (const auto* p = dynamic_cast<const PyDataset*>(dataset.get())) return p->copy();
  const auto* mix = dynamic_cast<const Mixture*>(dataset.get());
  if (mix == nullptr) return dataset;
  std::vector<MixtureSource> sources;
  bool changed = false;
  for (std::size_t k = 0; k < mix->num_sources(); ++k) {
    MixtureSource s = mix->source(k);
    std::shared_ptr<const Dataset> own = loader_copy(s.dataset);
    changed = changed || own != s.dataset;
    s.dataset = std::move(own);
    sources.push_back(std::move(s));
  }
  if (!changed) return dataset;
  return Mixture::open(std::move(sources), mix->options());
}

namespace {

/// The form of the samples of the first Python dataset in `dataset` (a Mixture's first source
/// that is one): "dict", "tuple", "single", "declared", or None for none.
py::object sample_form(const Dataset& dataset) {
  const std::vector<PyDataset*> python = python_datasets(dataset);
  if (python.empty()) return py::none();
  switch (python.front()->layout().form()) {
    case SampleLayout::Form::dict:
      return py::str("dict");
    case SampleLayout::Form::tuple:
      return py::str("tuple");
    case SampleLayout::Form::single:
      return py::str("single");
    case SampleLayout::Form::declared:
      return py::str("declared");
  }
  return py::none();
}

}  // namespace

void bind_dropin(py::module_& m) {
  m.def(
      "_sample_form", [](const Dataset& d) { return sample_form(d); }, py::arg("dataset"),
      "What a Python dataset's samples are: \"dict\", \"tuple\", \"single\" (one array), "
      "\"declared\" (by `fields`), or None for a dataset with no Python dataset in it.");
}

}  // namespace ferry::python
