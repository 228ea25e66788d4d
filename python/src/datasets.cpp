// Every C++ dataset with its options as keyword arguments; a Python object with __len__ and
// __getitem__ becomes a PyDataset (py_dataset.hpp).

#include "datasets.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "py_dataset.hpp"

namespace ferry::python {

DType dtype_argument(const py::handle& obj, const std::string& where, const std::string& keyword) {
  try {
    return to_dtype(obj);
  } catch (const Error& e) {
    throw ConfigError(where + ": " + keyword + ": " + e.what());
  }
}

std::vector<std::filesystem::path> to_paths(const py::handle& obj, const std::string& where,
                                            const std::string& keyword) {
  if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__")) {
    return {argument<std::filesystem::path>(obj, where, keyword, "a path")};
  }
  return argument<std::vector<std::filesystem::path>>(obj, where, keyword,
                                                      "a path or a list of paths");
}

namespace {

Geometry to_geometry(const std::string& text) {
  if (text == "resize_then_center_crop") return Geometry::resize_then_center_crop;
  if (text == "random_resized_crop") return Geometry::random_resized_crop;
  if (text == "resize") return Geometry::resize;
  throw ConfigError("ImageOptions: geometry \"" + text +
                    "\" is none of resize_then_center_crop, random_resized_crop, resize");
}

}  // namespace

ImageOptions image_options(int height, int width, int channels, const std::string& geometry,
                           int resize, bool random_flip, const std::optional<Normalize>& normalize,
                           std::int64_t max_pixels, int max_jpeg_scans) {
  ImageOptions o;
  o.height = height;
  o.width = width;
  o.channels = channels;
  o.geometry = to_geometry(geometry);
  o.resize = resize;
  o.random_flip = random_flip;
  o.normalize = normalize;
  o.max_pixels = max_pixels;
  o.max_jpeg_scans = max_jpeg_scans;
  return o;
}

namespace {

py::list field_list(const Dataset& d) {
  py::list out;
  for (const FieldSpec& f : d.fields()) {
    py::tuple shape(f.shape.size());
    for (std::size_t i = 0; i < f.shape.size(); ++i) {
      shape[i] = f.shape[i] == ragged ? py::object(py::none()) : py::object(py::int_(f.shape[i]));
    }
    out.append(py::make_tuple(f.name, std::string(dtype_name(f.dtype)), shape));
  }
  return out;
}

// The index of field `name`, which must be ragged. \throws KeyError naming it otherwise.
std::size_t ragged_field(const Dataset& d, const std::string& name) {
  const std::vector<FieldSpec> fields = d.fields();
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (fields[f].name != name) continue;
    if (!fields[f].is_ragged()) throw py::key_error("field \"" + name + "\" is not ragged");
    return f;
  }
  throw py::key_error("no field \"" + name + "\"");
}

/// Sample `index` of `d` (an int; negative: from the end) as a position: TypeError for what is
/// no int, IndexError for one outside the dataset (however large).
std::size_t sample_position(const Dataset& d, const py::object& index) {
  if (!py::hasattr(index, "__index__") || py::isinstance<py::bool_>(index)) {
    const std::string shown = py::repr(index).cast<std::string>();
    throw py::type_error(
        "Dataset: an index is an int, not " + shown + " (" +
        py::str(py::type::of(index).attr("__name__")).cast<std::string>() + ")" +
        (py::isinstance<py::str>(index) ? "; ds[i][" + shown + "] is sample i's field" : ""));
  }
  const py::object i = py::module_::import("operator").attr("index")(index);
  const auto size = static_cast<std::int64_t>(d.size());
  const auto out_of_range = [&] {
    return py::index_error("Dataset: index " + py::str(i).cast<std::string>() +
                           " is out of range (" + std::to_string(size) +
                           (size == 1 ? " sample)" : " samples)"));
  };
  std::int64_t at = 0;
  try {
    at = i.cast<std::int64_t>();
  } catch (const py::cast_error&) {  // beyond int64: out of range too
    throw out_of_range();
  }
  if (at < 0) at += size;
  if (at < 0 || at >= size) throw out_of_range();
  return static_cast<std::size_t>(at);
}

/// A seed or an epoch given to Dataset.sample(): an int in [0, 2^64).
std::uint64_t count_argument(const py::object& value, const char* name) {
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
    throw py::type_error(std::string("Dataset.sample: ") + name + " is an int, not " +
                         py::repr(value).cast<std::string>());
  }
  const std::string shown = py::str(value).cast<std::string>();
  if (value < py::int_(0)) {
    throw py::value_error(std::string("Dataset.sample: ") + name + " is an int >= 0, not " + shown);
  }
  try {
    return value.cast<std::uint64_t>();
  } catch (const py::cast_error&) {
    throw py::value_error(std::string("Dataset.sample: ") + name + " is an int below 2^64, not " +
                          shown);
  }
}

/// Dataset.sample(): sample `index` (negative: from the end) as {field: numpy array}.
py::dict sample_dict(const Dataset& d, const py::object& index, const py::object& seed,
                     const py::object& epoch) {
  const std::size_t at = sample_position(d, index);
  const std::uint64_t s = count_argument(seed, "seed");
  const std::uint64_t e = count_argument(epoch, "epoch");
  std::vector<std::pair<std::string, Tensor>> fields;
  {
    const py::gil_scoped_release release;
    fields = read_sample(d, at, s, e);
  }
  py::dict out;
  for (auto& [name, tensor] : fields) {
    const bool numpy = tensor.dtype() != DType::bf16;
    py::object value = py::cast(std::move(tensor));
    out[py::str(name)] = numpy ? value.attr("numpy")() : value;
  }
  return out;
}
}  // namespace

std::shared_ptr<const Dataset> to_dataset(const py::handle& obj) {
  if (py::isinstance<Dataset>(obj)) return obj.cast<std::shared_ptr<Dataset>>();
  if (py::hasattr(obj, "__len__") && py::hasattr(obj, "__getitem__")) {
    return std::make_shared<PyDataset>(py::reinterpret_borrow<py::object>(obj));
  }
  throw py::type_error(
      "ferry: a dataset is a ferry dataset or an object with __len__ and "
      "__getitem__, not " +
      py::repr(py::type::of(obj)).cast<std::string>());
}

PyObject* python_source(const Dataset& dataset) noexcept {
  const auto* d = dynamic_cast<const PyDataset*>(&dataset);
  return d != nullptr ? d->source() : nullptr;
}

py::object take_python_failure(const Dataset& dataset, std::uint64_t index) {
  // A Mixture's sample is its source's: look there, through nested mixtures.
  const Dataset* d = &dataset;
  while (const auto* mix = dynamic_cast<const Mixture*>(d)) {
    if (index >= mix->size()) return {};
    const std::size_t k = mix->source_of(index);
    index -= mix->offset(k);
    d = mix->source(k).dataset.get();
  }
  const auto* py_dataset = dynamic_cast<const PyDataset*>(d);
  return py_dataset != nullptr ? py_dataset->take_failure(index) : py::object();
}

void bind_datasets(py::module_& m) {
  py::class_<Normalize>(m, "Normalize", R"doc(
Per-channel normalization of u8 images, done on the loader's device after the copy:
(pixel * scale - mean) / std, delivered as `dtype` [C, H, W].)doc")
      .def(py::init([](std::vector<float> mean, std::vector<float> std, float scale,
                       const py::object& dtype) {
             Normalize n;
             n.mean = std::move(mean);
             n.std = std::move(std);
             n.scale = scale;
             n.dtype = dtype_argument(dtype, "Normalize", "dtype");
             return n;
           }),
           py::kw_only(), py::arg("mean") = std::vector<float>{0.0F},
           py::arg("std") = std::vector<float>{1.0F}, py::arg("scale") = 1.0F / 255.0F,
           py::arg("dtype") = "f32")
      .def_readonly("mean", &Normalize::mean)
      .def_readonly("std", &Normalize::std)
      .def_readonly("scale", &Normalize::scale)
      .def_property_readonly("dtype",
                             [](const Normalize& n) { return std::string(dtype_name(n.dtype)); });

  py::class_<RemoteOptions>(m, "RemoteOptions", R"doc(
How files given as URLs ("https://...", "http://...", "s3://bucket/key", "file://...") are
fetched: into a local cache (cache_dir; None: $FERRY_CACHE_DIR, else ~/.cache/ferry) of at most
cache_bytes (0: 50 GiB), over `connections` parallel transfers, each retried `retries` times
(exponential backoff, jitter), a transfer without progress for timeout_seconds failing; a file
fetched while reading that is larger than part_bytes (0: never) comes in parts of that size on
several connections at once (include/ferry/remote.hpp).)doc")
      .def(py::init([](const std::optional<std::filesystem::path>& cache_dir,
                       std::uint64_t cache_bytes, int connections, int retries,
                       double timeout_seconds, std::uint64_t part_bytes) {
             RemoteOptions r;
             if (cache_dir) r.cache_dir = *cache_dir;
             r.cache_bytes = cache_bytes;
             r.connections = connections;
             r.retries = retries;
             r.timeout_seconds = timeout_seconds;
             r.part_bytes = part_bytes;
             return r;
           }),
           py::kw_only(), py::arg("cache_dir") = py::none(), py::arg("cache_bytes") = 0,
           py::arg("connections") = 8, py::arg("retries") = 5, py::arg("timeout_seconds") = 60.0,
           py::arg("part_bytes") = RemoteOptions{}.part_bytes)
      .def_readwrite("cache_dir", &RemoteOptions::cache_dir)
      .def_readwrite("cache_bytes", &RemoteOptions::cache_bytes)
      .def_readwrite("connections", &RemoteOptions::connections)
      .def_readwrite("retries", &RemoteOptions::retries)
      .def_readwrite("timeout_seconds", &RemoteOptions::timeout_seconds)
      .def_readwrite("part_bytes", &RemoteOptions::part_bytes);
  m.def("expand_braces", &expand_braces, py::arg("pattern"),
        "webdataset's brace notation: \"s3://b/train-{0000..0003}.tar\" gives the four names.");

  py::class_<Dataset, std::shared_ptr<Dataset>>(m, "Dataset", R"doc(
Random-access samples: the base of ferry's datasets. len(dataset) is its size; `fields` lists
(name, dtype, shape) per sample, None standing for a ragged (variable) first dimension.)doc")
      .def("__len__", &Dataset::size)
      .def_property_readonly("fields", &field_list)
      .def(
          "length",
          [](const Dataset& d, const py::object& index, const std::string& field) {
            const std::size_t f = ragged_field(d, field);
            return d.length(sample_position(d, index), f);
          },
          py::arg("index"), py::arg("field"),
          "Rows of sample `index`'s ragged field `field` (its first dimension); a negative index "
          "counts from the end, IndexError beyond it.")
      .def(
          "max_length",
          [](const Dataset& d, const std::string& field) -> std::optional<std::int64_t> {
            const std::int64_t most = d.max_length(ragged_field(d, field));
            if (most < 0) return std::nullopt;
            return most;
          },
          py::arg("field"),
          "The longest sample's rows in ragged field `field` when the dataset knows it without "
          "asking every sample (a WebDataset from its index, a Mixture from its sources), else "
          "None: a loader then asks every sample's length once, when it is made.")
      .def("sample", &sample_dict, py::arg("index"), py::kw_only(), py::arg("seed") = py::int_(0),
           py::arg("epoch") = py::int_(0), R"doc(
Sample `index` as a dict of field name -> numpy array, read as a Loader(seed=seed) reads it in
epoch `epoch` (the same random augmentations, a normalize applied; a ragged field: its own
rows; a bf16 field: a ferry.Tensor, numpy having no bfloat16). For looking at samples, not fast.
A negative index counts from the end; IndexError beyond it.)doc")
      .def(
          "__getitem__",
          [](const Dataset& d, const py::object& index) {
            return sample_dict(d, index, py::int_(0), py::int_(0));
          },
          py::arg("index"), "sample(index): as a Loader with the default seed=0 delivers it.");

  bind_dataset_arrays(m);
  bind_dataset_tables(m);
  bind_dataset_images(m);
  bind_dataset_shards(m);
  bind_mixture(m);
}

}  // namespace ferry::python
