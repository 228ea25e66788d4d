#pragma once

// ferry's C++ datasets bound with their options as keyword arguments: what the files of the
// binding share. datasets.cpp binds the base class Dataset, Normalize and RemoteOptions, and
// parses the keywords that several datasets take; each family of datasets has a file of its own:
// datasets_arrays.cpp (TensorDataset), datasets_tables.cpp (CsvDataset, ParquetDataset,
// ArrowDataset), datasets_images.cpp (IdxDataset, ImageFolder), datasets_shards.cpp
// (TokenDataset, WebDataset) and datasets_mixture.cpp (Mixture).

#include <pybind11/stl.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "binding.hpp"

namespace ferry::python {

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
DType dtype_argument(const py::handle& obj, const std::string& where, const std::string& keyword);

/// A path or a list of paths given as `where`'s argument `keyword`.
std::vector<std::filesystem::path> to_paths(const py::handle& obj, const std::string& where,
                                            const std::string& keyword);

/// ImageOptions of ImageFolder's image keywords (those of WebDataset, ParquetDataset and
/// ArrowDataset too). \throws ConfigError for an unknown geometry.
ImageOptions image_options(int height, int width, int channels, const std::string& geometry,
                           int resize, bool random_flip, const std::optional<Normalize>& normalize,
                           std::int64_t max_pixels, int max_jpeg_scans);

void bind_dataset_arrays(py::module_& m);
void bind_dataset_tables(py::module_& m);
void bind_dataset_images(py::module_& m);
void bind_dataset_shards(py::module_& m);
void bind_mixture(py::module_& m);

}  // namespace ferry::python
