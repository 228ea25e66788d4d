// The datasets of shards: TokenDataset (token files as language-model windows) and
// WebDataset (tar shards).

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

void bind_dataset_shards(py::module_& m) {
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
}

}  // namespace ferry::python
