// The datasets of tables: CsvDataset, ParquetDataset and ArrowDataset, a row a sample.

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

namespace {

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

/// `table` (ParquetDataset or ArrowDataset) with its constructor: both take the same keywords;
/// `who` names the class in errors.
template <class Table>
py::class_<Table, Dataset, std::shared_ptr<Table>> with_table_init(
    py::class_<Table, Dataset, std::shared_ptr<Table>> table, const char* who) {
  return table.def(
      py::init([who](const py::object& files,
                     const std::optional<std::vector<std::string>>& columns,
                     const std::optional<std::vector<std::string>>& images,
                     const std::optional<std::vector<std::string>>& categorical,
                     const std::string& missing, int height, int width, int channels,
                     const std::string& geometry, int resize, bool random_flip,
                     const std::optional<Normalize>& normalize, std::int64_t max_pixels,
                     int max_jpeg_scans, const std::optional<RemoteOptions>& remote,
                     const std::optional<std::vector<std::string>>& audio,
                     const py::object& audio_options) {
        TableOptions o = table_options(who, columns, images, categorical, missing, remote);
        if (audio) o.audio = *audio;
        o.audio_options = audio_options_from(audio_options, who);
        o.image = image_options(height, width, channels, geometry, resize, random_flip, normalize,
                                max_pixels, max_jpeg_scans);
        std::vector<std::filesystem::path> paths = to_paths(files, who, "files");
        const py::gil_scoped_release release;
        return Table::open(std::move(paths), std::move(o));
      }),
      py::arg("files"), py::arg("columns") = py::none(), py::kw_only(),
      py::arg("images") = py::none(), py::arg("categorical") = py::none(),
      py::arg("missing") = "error", py::arg("height") = 224, py::arg("width") = 224,
      py::arg("channels") = 3, py::arg("geometry") = "resize_then_center_crop",
      py::arg("resize") = 0, py::arg("random_flip") = false, py::arg("normalize") = py::none(),
      py::arg("max_pixels") = std::int64_t{1} << 26, py::arg("max_jpeg_scans") = 256,
      py::arg("remote") = py::none(), py::arg("audio") = py::none(),
      py::arg("audio_options") = py::none());
}

}  // namespace

void bind_dataset_tables(py::module_& m) {
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
  with_table_init(py::class_<ParquetDataset, Dataset, std::shared_ptr<ParquetDataset>>(
                      m, "ParquetDataset", R"doc(
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
read); remote: a RemoteOptions (its retries and timeout_seconds).)doc"),
                  "ParquetDataset")
      .def(
          "categories",
          [](const ParquetDataset& d, const std::string& name) { return d.categories(name); },
          py::arg("name"), "Categorical column `name`'s texts: code i is categories(name)[i].")
      .def_property_readonly("num_row_groups", &ParquetDataset::num_row_groups);

  with_table_init(
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
RemoteOptions (its retries and timeout_seconds).)doc"),
      "ArrowDataset")
      .def(
          "categories",
          [](const ArrowDataset& d, const std::string& name) { return d.categories(name); },
          py::arg("name"),
          "Categorical or dictionary-encoded column `name`'s texts: code i is "
          "categories(name)[i].")
      .def_property_readonly("num_record_batches", &ArrowDataset::num_record_batches);
}

}  // namespace ferry::python
