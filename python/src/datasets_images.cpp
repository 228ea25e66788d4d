// The datasets of images: IdxDataset (MNIST-style files) and ImageFolder.

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

void bind_dataset_images(py::module_& m) {
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
}

}  // namespace ferry::python
