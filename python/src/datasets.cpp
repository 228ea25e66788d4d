// Every C++ dataset with its options as keyword arguments; a Python object with __len__ and
// __getitem__ becomes a PyDataset (py_dataset.hpp).

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

namespace {

/// `obj`, the value of `where`'s argument `keyword`, as T. \throws TypeError naming the
/// argument, what it takes (`expected`) and what it was given otherwise.
template <class T>
T argument(const py::handle& obj, const std::string& where, const std::string& keyword,
           const char* expected) {
  try {
    return obj.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(where + ": " + keyword + " is " + expected + ", not " +
                         py::repr(obj).cast<std::string>() + " (" +
                         py::str(py::type::of(obj).attr("__name__")).cast<std::string>() + ")");
  }
}

/// A dtype given as `where`'s argument `keyword`. \throws ConfigError naming it otherwise.
DType dtype_argument(const py::handle& obj, const std::string& where, const std::string& keyword) {
  try {
    return to_dtype(obj);
  } catch (const Error& e) {
    throw ConfigError(where + ": " + keyword + ": " + e.what());
  }
}

Column to_column(const py::handle& obj, const std::string& keyword) {
  if (obj.is_none()) return Column::none();
  if (py::isinstance<py::str>(obj)) return Column::name(obj.cast<std::string>());
  const auto i = argument<std::int64_t>(obj, "CsvDataset", keyword, "a column name or index");
  if (i == -1) return Column::last();
  if (i < 0) {
    throw ConfigError("CsvDataset: " + keyword +
                      ": a column index is >= 0, or -1 for the last column");
  }
  return Column::index(static_cast<std::size_t>(i));
}

/// None (no columns given) or a list of column names or indices.
std::vector<Column> to_columns(const py::handle& obj, const std::string& keyword) {
  std::vector<Column> out;
  if (obj.is_none()) return out;
  if (py::isinstance<py::str>(obj) || !py::isinstance<py::iterable>(obj)) {
    throw py::type_error("CsvDataset: " + keyword +
                         " is None or a list of column names or indices, not " +
                         py::repr(obj).cast<std::string>());
  }
  for (const py::handle c : obj) out.push_back(to_column(c, keyword));
  return out;
}

std::vector<std::filesystem::path> to_paths(const py::handle& obj, const std::string& where,
                                            const std::string& keyword) {
  if (py::isinstance<py::str>(obj) || py::hasattr(obj, "__fspath__")) {
    return {argument<std::filesystem::path>(obj, where, keyword, "a path")};
  }
  return argument<std::vector<std::filesystem::path>>(obj, where, keyword,
                                                      "a path or a list of paths");
}

Geometry to_geometry(const std::string& text) {
  if (text == "resize_then_center_crop") return Geometry::resize_then_center_crop;
  if (text == "random_resized_crop") return Geometry::random_resized_crop;
  if (text == "resize") return Geometry::resize;
  throw ConfigError("ImageOptions: geometry \"" + text +
                    "\" is none of resize_then_center_crop, random_resized_crop, resize");
}

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

// The TableOptions of ParquetDataset's and ArrowDataset's keywords but the image ones; `who`
// names the class in the error for a wrong `missing`.
TableOptions table_options(const std::string& who,
                           const std::optional<std::vector<std::string>>& columns,
                           const std::optional<std::vector<std::string>>& images,
                           const std::optional<std::vector<std::string>>& categorical,
                           const std::string& missing, const std::optional<RemoteOptions>& remote) {
  TableOptions o;
  if (remote) o.remote = *remote;
  if (columns) o.columns = *columns;
  if (images) o.images = *images;
  if (categorical) o.categorical = *categorical;
  if (missing == "error") {
    o.missing = Missing::error;
  } else if (missing == "nan") {
    o.missing = Missing::nan;
  } else {
    throw ConfigError(who + ": missing is \"error\" or \"nan\", not \"" + missing + "\"");
  }
  return o;
}

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

/// Dataset.sample(): sample `index` (negative: from the end) as {field: numpy array}.
py::dict sample_dict(const Dataset& d, std::int64_t index, std::uint64_t seed,
                     std::uint64_t epoch) {
  const auto size = static_cast<std::int64_t>(d.size());
  const std::int64_t at = index < 0 ? index + size : index;
  if (at < 0 || at >= size) {
    throw py::index_error("Dataset: index " + std::to_string(index) + " is out of range (" +
                          std::to_string(size) + (size == 1 ? " sample)" : " samples)"));
  }
  std::vector<std::pair<std::string, Tensor>> fields;
  {
    const py::gil_scoped_release release;
    fields = read_sample(d, static_cast<std::size_t>(at), seed, epoch);
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
          [](const Dataset& d, std::size_t index, const std::string& field) {
            return d.length(index, ragged_field(d, field));
          },
          py::arg("index"), py::arg("field"),
          "Rows of sample `index`'s ragged field `field` (its first dimension).")
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
      .def("sample", &sample_dict, py::arg("index"), py::kw_only(), py::arg("seed") = 0,
           py::arg("epoch") = 0, R"doc(
Sample `index` as a dict of field name -> numpy array, read as a Loader(seed=seed) reads it in
epoch `epoch` (the same random augmentations, a normalize applied; a ragged field: its own
rows; a bf16 field: a ferry.Tensor, numpy having no bfloat16). For looking at samples, not fast.
A negative index counts from the end; IndexError beyond it.)doc")
      .def(
          "__getitem__",
          [](const Dataset& d, const py::object& index) {
            if (!py::hasattr(index, "__index__")) {
              const std::string shown = py::repr(index).cast<std::string>();
              throw py::type_error(
                  "Dataset: an index is an int, not " + shown + " (" +
                  py::str(py::type::of(index).attr("__name__")).cast<std::string>() + ")" +
                  (py::isinstance<py::str>(index) ? "; ds[i][" + shown + "] is sample i's field"
                                                  : ""));
            }
            const py::object i = py::module_::import("operator").attr("index")(index);
            std::int64_t at = 0;
            try {
              at = i.cast<std::int64_t>();
            } catch (const py::cast_error&) {  // beyond int64: out of range too
              throw py::index_error("Dataset: index " + py::str(i).cast<std::string>() +
                                    " is out of range (" + std::to_string(d.size()) +
                                    (d.size() == 1 ? " sample)" : " samples)"));
            }
            return sample_dict(d, at, 0, 0);
          },
          py::arg("index"), "sample(index): as a Loader with the default seed=0 delivers it.");

  py::class_<TensorDataset, Dataset, std::shared_ptr<TensorDataset>>(m, "TensorDataset", R"doc(
Tensors that share dimension 0 (the sample), by field name, without a copy:
ferry.TensorDataset({"image": images, "label": labels}). The arrays may be numpy arrays,
torch tensors, ferry tensors or any DLPack producer, read-only numpy arrays too (np.frombuffer,
np.memmap(mode="r")); they are kept alive by the dataset. An error names the field.)doc")
      .def(py::init([](const py::dict& tensors) {
             std::vector<std::pair<std::string, Tensor>> pairs;
             for (const auto& [name, value] : tensors) {
               std::string field = py::str(name).cast<std::string>();
               const std::string where = "TensorDataset: field \"" + field + "\": ";
               try {
                 pairs.emplace_back(std::move(field), tensor_from_object(value));
               } catch (const ConfigError& e) {
                 throw ConfigError(where + e.what());
               } catch (py::error_already_set& e) {
                 const std::string what = where + py::str(e.value()).cast<std::string>();
                 PyErr_SetString(e.type().ptr(), what.c_str());
                 throw py::error_already_set();
               } catch (const py::builtin_exception& e) {  // TypeError, BufferError
                 e.set_error();
                 const py::error_already_set raised;
                 const std::string what = where + e.what();
                 PyErr_SetString(raised.type().ptr(), what.c_str());
                 throw py::error_already_set();
               }
             }
             return std::make_shared<TensorDataset>(std::move(pairs));
           }),
           py::arg("tensors"))
      .def_property_readonly("device", &TensorDataset::device)
      .def_property_readonly("tensors", &TensorDataset::tensors)
      .def(
          "to",
          [](const TensorDataset& d, const py::object& device) {
            const Device target = to_device(device);
            const py::gil_scoped_release release;
            return d.to(target);
          },
          py::arg("device"), "The same samples on `device` (no copy where they are already).");

  py::class_<CsvDataset, Dataset, std::shared_ptr<CsvDataset>>(m, "CsvDataset", R"doc(
A CSV file parsed once into memory (in parallel): "features" f32 [F], "label", and an i64 []
field per categorical column, named as the column, holding category codes.
label: a column name, an index, -1 for the last column, or None for no label.
features: the numeric columns (names or indices); None: every column but the label and the
categorical ones. categorical: columns of text, coded in sorted byte order (categories(name)
lists them); vocabulary: {column: [texts]} or the training CsvDataset, whose categories number
this file's codes; unknown: "error" (a DataError naming file, line and value) or "reserved"
(the code len(vocabulary[column])) for a text outside it. A file whose features are all
categorical has no "features" field.
classes=True: labels are i64 class ids (text labels numbered in sorted order);
False: an f32 target. missing: "error" or "nan" for empty features.)doc")
      .def(py::init([](const std::filesystem::path& path, const py::object& label,
                       const py::object& features, const py::object& categorical,
                       const py::object& vocabulary, const std::string& unknown, bool header,
                       const std::string& delimiter, bool classes, const std::string& missing,
                       std::uint64_t max_decompressed_bytes,
                       const std::optional<RemoteOptions>& remote) {
             CsvOptions o;
             if (remote) o.remote = *remote;
             o.label = to_column(label, "label");
             o.features = to_columns(features, "features");
             o.categorical = to_columns(categorical, "categorical");
             if (py::isinstance<CsvDataset>(vocabulary)) {
               o.categories_from(*vocabulary.cast<std::shared_ptr<CsvDataset>>());
             } else if (!vocabulary.is_none()) {
               o.vocabulary = argument<std::map<std::string, std::vector<std::string>>>(
                   vocabulary, "CsvDataset", "vocabulary",
                   "a CsvDataset or a dict of column name to a list of texts");
             }
             if (unknown == "error") {
               o.unknown = Unknown::error;
             } else if (unknown == "reserved") {
               o.unknown = Unknown::reserved;
             } else {
               throw ConfigError("CsvDataset: unknown is \"error\" or \"reserved\", not \"" +
                                 unknown + "\"");
             }
             o.header = header;
             if (delimiter.size() != 1) {
               throw ConfigError("CsvDataset: the delimiter is one character, not \"" + delimiter +
                                 "\"");
             }
             o.delimiter = delimiter[0];
             o.classes = classes;
             if (missing == "error") {
               o.missing = Missing::error;
             } else if (missing == "nan") {
               o.missing = Missing::nan;
             } else {
               throw ConfigError("CsvDataset: missing is \"error\" or \"nan\", not \"" + missing +
                                 "\"");
             }
             o.max_decompressed_bytes = max_decompressed_bytes;
             const py::gil_scoped_release release;
             return CsvDataset::open(path, o);
           }),
           py::arg("path"), py::kw_only(), py::arg("label") = "label",
           py::arg("features") = py::none(), py::arg("categorical") = py::none(),
           py::arg("vocabulary") = py::none(), py::arg("unknown") = "error",
           py::arg("header") = true, py::arg("delimiter") = ",", py::arg("classes") = true,
           py::arg("missing") = "error", py::arg("max_decompressed_bytes") = 0,
           py::arg("remote") = py::none())
      .def_property_readonly("num_features", &CsvDataset::num_features)
      .def_property_readonly("feature_names", &CsvDataset::feature_names)
      .def_property_readonly("classes", &CsvDataset::classes)
      .def_property_readonly("categorical_names", &CsvDataset::categorical_names)
      .def(
          "categories",
          [](const CsvDataset& d, const std::string& name) { return d.categories(name); },
          py::arg("name"), "Categorical column `name`'s texts: code i is categories(name)[i].")
      .def_property_readonly("device", &CsvDataset::device);

  py::class_<IdxDataset, Dataset, std::shared_ptr<IdxDataset>>(m, "IdxDataset", R"doc(
MNIST-style IDX files (gzipped or not): "image" u8 [rows, cols] and "label" i64 [].)doc")
      .def(py::init([](const std::filesystem::path& images, const std::filesystem::path& labels,
                       std::uint64_t max_decompressed_bytes,
                       const std::optional<RemoteOptions>& remote) {
             IdxOptions o;
             if (remote) o.remote = *remote;
             o.max_decompressed_bytes = max_decompressed_bytes;
             const py::gil_scoped_release release;
             return IdxDataset::open(images, labels, o);
           }),
           py::arg("images"), py::arg("labels"), py::kw_only(),
           py::arg("max_decompressed_bytes") = 0, py::arg("remote") = py::none())
      .def_property_readonly("rows", &IdxDataset::rows)
      .def_property_readonly("cols", &IdxDataset::cols);

  py::class_<ImageFolder, Dataset, std::shared_ptr<ImageFolder>>(m, "ImageFolder", R"doc(
root/<class>/<image> (JPEG or PNG), decoded on the loader's workers: "image" u8 [H, W, C]
(or normalize.dtype [C, H, W] with normalize=ferry.Normalize(...)) and "label" i64 [].
geometry: "resize_then_center_crop" (torchvision's Resize + CenterCrop), "random_resized_crop",
or "resize".)doc")
      .def(py::init([](const std::filesystem::path& root, int height, int width, int channels,
                       const std::string& geometry, int resize, bool random_flip,
                       const std::optional<Normalize>& normalize, std::int64_t max_pixels,
                       int max_jpeg_scans) {
             const ImageOptions o =
                 image_options(height, width, channels, geometry, resize, random_flip, normalize,
                               max_pixels, max_jpeg_scans);
             const py::gil_scoped_release release;
             return ImageFolder::open(root, o);
           }),
           py::arg("root"), py::kw_only(), py::arg("height") = 224, py::arg("width") = 224,
           py::arg("channels") = 3, py::arg("geometry") = "resize_then_center_crop",
           py::arg("resize") = 0, py::arg("random_flip") = false, py::arg("normalize") = py::none(),
           py::arg("max_pixels") = std::int64_t{1} << 26, py::arg("max_jpeg_scans") = 256)
      .def_property_readonly("classes",
                             [](const ImageFolder& d) { return name_texts(d.classes()); })
      .def("path", &ImageFolder::path, py::arg("index"))
      .def("label", &ImageFolder::label, py::arg("index"));

  py::class_<TokenDataset, Dataset, std::shared_ptr<TokenDataset>>(m, "TokenDataset", R"doc(
Language-model windows over token files (llm.c shards, .npy, raw tokens), memory-mapped:
"input" [seq_len] and "target" [seq_len] (input shifted by one). Windows never cross files.)doc")
      .def(py::init([](const py::object& files, std::int64_t seq_len, std::int64_t stride,
                       const py::object& dtype, const py::object& raw_dtype,
                       const std::optional<RemoteOptions>& remote) {
             TokenOptions o;
             if (remote) o.remote = *remote;
             o.seq_len = seq_len;
             o.stride = stride;
             o.dtype = dtype_argument(dtype, "TokenDataset", "dtype");
             o.raw_dtype = dtype_argument(raw_dtype, "TokenDataset", "raw_dtype");
             std::vector<std::filesystem::path> paths = to_paths(files, "TokenDataset", "files");
             const py::gil_scoped_release release;
             return TokenDataset::open(std::move(paths), o);
           }),
           py::arg("files"), py::kw_only(), py::arg("seq_len") = 1024, py::arg("stride") = 0,
           py::arg("dtype") = "i64", py::arg("raw_dtype") = "u16", py::arg("remote") = py::none())
      .def_property_readonly("num_tokens", &TokenDataset::num_tokens)
      .def_property_readonly("num_files", &TokenDataset::num_files);

  py::class_<WebDataset, Dataset, std::shared_ptr<WebDataset>>(m, "WebDataset", R"doc(
WebDataset tar shards with random access (an index per shard, kept as <shard>.idx):
one field per member extension of the first sample, sorted; images decode as ImageFolder's,
videos (.mp4 .mkv .webm .avi) as VideoFolder's (video=dict(frames=, size=, ...)), sound members
(.wav .flac .ogg .opus .mp3) as AudioFolder's under audio=dict(AudioFolder's keywords).)doc")
      .def(py::init([](const py::object& shards, int height, int width, int channels,
                       const std::string& geometry, int resize, bool random_flip,
                       const std::optional<Normalize>& normalize, std::int64_t max_pixels,
                       int max_jpeg_scans, bool index_files,
                       const std::optional<RemoteOptions>& remote, const py::object& video,
                       const py::object& audio) {
             WebDatasetOptions o;
             o.audio = audio_options_from(audio, "WebDataset");
             if (remote) o.remote = *remote;
             o.video = video_options(video, "WebDataset");
             o.image = image_options(height, width, channels, geometry, resize, random_flip,
                                     normalize, max_pixels, max_jpeg_scans);
             o.index_files = index_files;
             std::vector<std::filesystem::path> paths = to_paths(shards, "WebDataset", "shards");
             const py::gil_scoped_release release;
             return WebDataset::open(std::move(paths), o);
           }),
           py::arg("shards"), py::kw_only(), py::arg("height") = 224, py::arg("width") = 224,
           py::arg("channels") = 3, py::arg("geometry") = "resize_then_center_crop",
           py::arg("resize") = 0, py::arg("random_flip") = false, py::arg("normalize") = py::none(),
           py::arg("max_pixels") = std::int64_t{1} << 26, py::arg("max_jpeg_scans") = 256,
           py::arg("index_files") = true, py::arg("remote") = py::none(),
           py::arg("video") = py::none(), py::arg("audio") = py::none())
      .def("key", &WebDataset::key, py::arg("index"))
      .def("shard_of", &WebDataset::shard_of, py::arg("index"));

  py::class_<ParquetDataset, Dataset, std::shared_ptr<ParquetDataset>>(m, "ParquetDataset", R"doc(
Parquet files: the rows of all the files, in order, are the samples; each column read is a field
named as the column. Numbers are scalar fields of their type (bool as u8); binary and text are
ragged u8 [L] (the bytes as stored); columns named in images (binary, or HF's Image
struct{bytes, path}) are decoded as ImageFolder does (the image keywords as ImageFolder's);
columns named in audio (binary, or HF's Audio struct) as AudioFolder does, with
audio_options=dict(AudioFolder's keywords; a clip_seconds is needed);
columns named in categorical (text) are i64 codes in sorted byte order (categories(name) lists
them). columns: the columns read, in this order (None: all). missing: "error" (a null is a
DataError when its row is read) or "nan" (NaN in a float column, -1 as a categorical code).
files may be URLs (http, https, s3, file), read by ranges (the footer, then the column chunks
read); remote: a RemoteOptions (its retries and timeout_seconds).)doc")
      .def(py::init([](const py::object& files,
                       const std::optional<std::vector<std::string>>& columns,
                       const std::optional<std::vector<std::string>>& images,
                       const std::optional<std::vector<std::string>>& categorical,
                       const std::string& missing, int height, int width, int channels,
                       const std::string& geometry, int resize, bool random_flip,
                       const std::optional<Normalize>& normalize, std::int64_t max_pixels,
                       int max_jpeg_scans, const std::optional<RemoteOptions>& remote,
                       const std::optional<std::vector<std::string>>& audio,
                       const py::object& audio_options) {
             TableOptions o =
                 table_options("ParquetDataset", columns, images, categorical, missing, remote);
             if (audio) o.audio = *audio;
             o.audio_options = audio_options_from(audio_options, "ParquetDataset");
             o.image = image_options(height, width, channels, geometry, resize, random_flip,
                                     normalize, max_pixels, max_jpeg_scans);
             std::vector<std::filesystem::path> paths = to_paths(files, "ParquetDataset", "files");
             const py::gil_scoped_release release;
             return ParquetDataset::open(std::move(paths), std::move(o));
           }),
           py::arg("files"), py::arg("columns") = py::none(), py::kw_only(),
           py::arg("images") = py::none(), py::arg("categorical") = py::none(),
           py::arg("missing") = "error", py::arg("height") = 224, py::arg("width") = 224,
           py::arg("channels") = 3, py::arg("geometry") = "resize_then_center_crop",
           py::arg("resize") = 0, py::arg("random_flip") = false, py::arg("normalize") = py::none(),
           py::arg("max_pixels") = std::int64_t{1} << 26, py::arg("max_jpeg_scans") = 256,
           py::arg("remote") = py::none(), py::arg("audio") = py::none(),
           py::arg("audio_options") = py::none())
      .def(
          "categories",
          [](const ParquetDataset& d, const std::string& name) { return d.categories(name); },
          py::arg("name"), "Categorical column `name`'s texts: code i is categories(name)[i].")
      .def_property_readonly("num_row_groups", &ParquetDataset::num_row_groups);

  py::class_<ArrowDataset, Dataset, std::shared_ptr<ArrowDataset>>(m, "ArrowDataset", R"doc(
Arrow IPC files, stream format (Hugging Face datasets' cache files, data-00000-of-000NN.arrow)
or file format: the rows of all the files, in order, are the samples; each column read is a field
named as the column. Numbers are scalar fields of their type (bool as u8, float16 as f16);
fixed_size_list columns have their sizes as shape; list columns are ragged [L, ...]; Hugging
Face's Array2D..Array5D features take the shape their metadata gives (ragged when the first
dimension varies), each row checked against it; a null fixed-shape slot (or a null inside it) is
NaN throughout under missing="nan" in a float column; binary and
text are ragged u8 [L] (the bytes as stored); columns named in images (binary, or HF's Image
struct{bytes, path}) are decoded as ImageFolder does (the image keywords as ImageFolder's);
columns named in categorical (text) and dictionary-encoded text are i64 codes in sorted byte order
(categories(name) lists them). columns: the columns read, in this order (None: all). missing:
"error" (a null is a DataError when its row is read) or "nan" (NaN in a float column, -1 as a
categorical code). Uncompressed files are memory-mapped; LZ4_FRAME / ZSTD record batches are
decompressed once per read of them. files may be URLs (http, https, s3, file), read by ranges
(the footer or the stream's message headers, then the buffers of the columns read); remote: a
RemoteOptions (its retries and timeout_seconds).)doc")
      .def(py::init([](const py::object& files,
                       const std::optional<std::vector<std::string>>& columns,
                       const std::optional<std::vector<std::string>>& images,
                       const std::optional<std::vector<std::string>>& categorical,
                       const std::string& missing, int height, int width, int channels,
                       const std::string& geometry, int resize, bool random_flip,
                       const std::optional<Normalize>& normalize, std::int64_t max_pixels,
                       int max_jpeg_scans, const std::optional<RemoteOptions>& remote,
                       const std::optional<std::vector<std::string>>& audio,
                       const py::object& audio_options) {
             TableOptions o =
                 table_options("ArrowDataset", columns, images, categorical, missing, remote);
             if (audio) o.audio = *audio;
             o.audio_options = audio_options_from(audio_options, "ArrowDataset");
             o.image = image_options(height, width, channels, geometry, resize, random_flip,
                                     normalize, max_pixels, max_jpeg_scans);
             std::vector<std::filesystem::path> paths = to_paths(files, "ArrowDataset", "files");
             const py::gil_scoped_release release;
             return ArrowDataset::open(std::move(paths), std::move(o));
           }),
           py::arg("files"), py::arg("columns") = py::none(), py::kw_only(),
           py::arg("images") = py::none(), py::arg("categorical") = py::none(),
           py::arg("missing") = "error", py::arg("height") = 224, py::arg("width") = 224,
           py::arg("channels") = 3, py::arg("geometry") = "resize_then_center_crop",
           py::arg("resize") = 0, py::arg("random_flip") = false, py::arg("normalize") = py::none(),
           py::arg("max_pixels") = std::int64_t{1} << 26, py::arg("max_jpeg_scans") = 256,
           py::arg("remote") = py::none(), py::arg("audio") = py::none(),
           py::arg("audio_options") = py::none())
      .def(
          "categories",
          [](const ArrowDataset& d, const std::string& name) { return d.categories(name); },
          py::arg("name"),
          "Categorical or dictionary-encoded column `name`'s texts: code i is "
          "categories(name)[i].")
      .def_property_readonly("num_record_batches", &ArrowDataset::num_record_batches);

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
