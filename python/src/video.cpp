// ferry.VideoFolder: the binding of include/ferry/video.hpp (the keywords are VideoOptions'
// members, documented there; size is (height, width)).

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "binding.hpp"

namespace ferry::python {
namespace {

ClipStart to_clip_start(const std::string& text) {
  if (text == "random") return ClipStart::random;
  if (text == "start") return ClipStart::start;
  if (text == "center") return ClipStart::center;
  if (text == "uniform") return ClipStart::uniform;
  throw ConfigError("VideoOptions: start \"" + text +
                    "\" is none of random, start, center, uniform");
}

// A Python int that fits a C int, else nullopt (a float, a str, or an int out of range).
std::optional<int> video_int(const py::handle& v) {
  // An int, or what __index__ makes one (numpy's integers); never a bool or a float.
  if (py::isinstance<py::bool_>(v) || PyIndex_Check(v.ptr()) == 0) return std::nullopt;
  const auto wide = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
  if (!wide) throw py::error_already_set();
  if (wide < py::int_(std::numeric_limits<int>::min()) ||
      wide > py::int_(std::numeric_limits<int>::max())) {
    return std::nullopt;
  }
  return wide.cast<int>();
}

// (height, width) from a pair of ints, or one int for a square.
void video_size(const py::handle& size, VideoOptions& o, const char* who) {
  if (const std::optional<int> side = video_int(size)) {
    o.height = o.width = *side;
    return;
  }
  if (py::isinstance<py::sequence>(size) && !py::isinstance<py::str>(size) && py::len(size) == 2) {
    const auto pair = size.cast<py::sequence>();
    const std::optional<int> h = video_int(pair[0]);
    const std::optional<int> w = video_int(pair[1]);
    if (h && w) {
      o.height = *h;
      o.width = *w;
      return;
    }
  }
  throw py::type_error(std::string(who) + ": size is (height, width) of ints or one int, not " +
                       py::repr(size).cast<std::string>());
}

// An int keyword of video=dict(...): a TypeError naming it otherwise.
int video_int_key(const py::handle& v, const std::string& key, const char* where) {
  if (const std::optional<int> i = video_int(v)) return *i;
  throw py::type_error(std::string(where) + ": video's " + key + " is an int, not " +
                       py::repr(v).cast<std::string>());
}

// A method's int argument `what` from 0 to `count` - 1 (`count` 0: any that fits 64 bits
// unsigned). \throws TypeError (not an int, or a bool) or IndexError / ValueError naming it.
std::uint64_t video_index_arg(const py::handle& v, const char* who, const char* what,
                              std::uint64_t count, const char* of) {
  if (py::isinstance<py::bool_>(v) || PyIndex_Check(v.ptr()) == 0) {
    throw py::type_error(std::string(who) + ": " + what + " is an int, not " +
                         py::repr(v).cast<std::string>());
  }
  const auto i = py::reinterpret_steal<py::int_>(PyNumber_Index(v.ptr()));
  if (!i) throw py::error_already_set();
  if (count > 0) {
    if (i < py::int_(0) || i >= py::int_(count)) {
      throw py::index_error(std::string(who) + ": " + what + " " + py::repr(i).cast<std::string>() +
                            " is not 0 to " + std::to_string(count) + " - 1 (" + of + ")");
    }
  } else if (i < py::int_(0) || i > py::int_(std::numeric_limits<std::uint64_t>::max())) {
    throw py::value_error(std::string(who) + ": " + what + " " + py::repr(i).cast<std::string>() +
                          " is not 0 to 2**64 - 1");
  }
  return i.cast<std::uint64_t>();
}

// An int keyword of the constructor: a TypeError naming it for a bool, a float or a str.
int video_keyword(const py::handle& v, const char* what) {
  if (const std::optional<int> i = video_int(v)) return *i;
  if (!py::isinstance<py::bool_>(v) && PyIndex_Check(v.ptr()) != 0) {
    throw py::value_error(std::string("VideoFolder: ") + what +
                          " is out of its range: " + py::repr(v).cast<std::string>());
  }
  throw py::type_error(std::string("VideoFolder: ") + what + " is an int, not " +
                       py::repr(v).cast<std::string>());
}

}  // namespace

VideoOptions video_options(const py::handle& obj, const char* where) {
  VideoOptions o;
  if (obj.is_none()) return o;
  if (!py::isinstance<py::dict>(obj)) {
    throw py::type_error(std::string(where) + ": video is a dict of VideoFolder's keywords, not " +
                         py::repr(obj).cast<std::string>());
  }
  for (const auto& [key, value] : obj.cast<py::dict>()) {
    if (!py::isinstance<py::str>(key)) {
      throw py::type_error(std::string(where) +
                           ": video's keys are strs (VideoFolder's "
                           "keywords), not " +
                           py::repr(key).cast<std::string>());
    }
    const auto k = key.cast<std::string>();
    if (k == "frames") {
      o.frames = video_int_key(value, k, where);
    } else if (k == "stride") {
      o.stride = video_int_key(value, k, where);
    } else if (k == "size") {
      video_size(value, o, where);
    } else if (k == "start") {
      if (!py::isinstance<py::str>(value)) {
        throw py::type_error(std::string(where) + ": video's start is a str, not " +
                             py::repr(value).cast<std::string>());
      }
      o.start = to_clip_start(value.cast<std::string>());
    } else if (k == "max_seconds") {
      if (!py::isinstance<py::float_>(value) && !video_int(value)) {
        throw py::type_error(std::string(where) + ": video's max_seconds is a number, not " +
                             py::repr(value).cast<std::string>());
      }
      o.max_seconds = value.cast<double>();
    } else if (k == "decode_threads") {
      o.decode_threads = video_int_key(value, k, where);
    } else {
      throw py::type_error(std::string(where) + ": video has no key " + k +
                           "; it takes frames, stride, size, start, max_seconds, decode_threads");
    }
  }
  return o;
}

void bind_video(py::module_& m) {
  py::class_<VideoFolder, Dataset, std::shared_ptr<VideoFolder>>(m, "VideoFolder", R"doc(
root/<class>/<video> (.mp4, .mkv, .webm, .avi, .mov), decoded by FFmpeg on the loader's workers:
"video" u8 [frames, height, width, 3] (RGB) and "label" i64 []. Frames are exact (counted by
presentation timestamps; in AVI, by the decoder's output). start: "random" (from the sample's seed), "start", "center" or
"uniform" (frames spread over the whole video); a clip past the end repeats the last frame.
clips_per_video=k makes k samples of each video. Each video is indexed at open (kept beside it
as <video>.ferryidx when index_files and the folder is writable). A bad video raises
ferry.DataError naming it when its samples are read. See VideoOptions in ferry/video.hpp.)doc")
      .def(py::init([](const std::filesystem::path& root, const py::object& frames,
                       const py::object& stride, const py::object& size, const std::string& start,
                       const py::object& clips_per_video, double max_seconds,
                       const py::object& decode_threads, bool index_files) {
             VideoOptions o;
             o.frames = video_keyword(frames, "frames");
             o.stride = video_keyword(stride, "stride");
             video_size(size, o, "VideoFolder");
             o.start = to_clip_start(start);
             o.clips_per_video = video_keyword(clips_per_video, "clips_per_video");
             o.max_seconds = max_seconds;
             o.decode_threads = video_keyword(decode_threads, "decode_threads");
             o.index_files = index_files;
             const py::gil_scoped_release release;
             return VideoFolder::open(root, o);
           }),
           py::arg("root"), py::kw_only(), py::arg("frames") = 16, py::arg("stride") = 1,
           py::arg("size") = py::make_tuple(112, 112), py::arg("start") = "random",
           py::arg("clips_per_video") = 1, py::arg("max_seconds") = 4 * 3600.0,
           py::arg("decode_threads") = 1, py::arg("index_files") = true)
      .def_property_readonly("classes",
                             [](const VideoFolder& d) { return name_texts(d.classes()); })
      .def_property_readonly("videos", &VideoFolder::videos)
      .def("path", &VideoFolder::path, py::arg("video"))
      .def("label", &VideoFolder::label, py::arg("video"))
      .def(
          "frame_count",
          [](const VideoFolder& d, const py::object& video) {
            const std::uint64_t v = video_index_arg(video, "VideoFolder.frame_count", "video",
                                                    d.videos(), "the folder's videos");
            const py::gil_scoped_release release;
            return d.frame_count(static_cast<std::size_t>(v));
          },
          py::arg("video"))
      .def(
          "clip_frames",
          [](const VideoFolder& d, const py::object& index, const py::object& seed) {
            const std::uint64_t i =
                video_index_arg(index, "VideoFolder.clip_frames", "index", d.size(), "the samples");
            const std::uint64_t s = video_index_arg(seed, "VideoFolder.clip_frames", "seed", 0, "");
            return d.clip_frames(static_cast<std::size_t>(i), s);
          },
          py::arg("index"), py::arg("seed"),
          "The frame numbers sample `index` takes with sample seed `seed`.");
}

}  // namespace ferry::python
