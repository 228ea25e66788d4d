// ferry.AudioFolder: sound files in class folders (include/ferry/audio.hpp says what each
// keyword does; the keywords are AudioOptions' members, with the same defaults).

#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <limits>
#include <string>

#include "binding.hpp"

namespace ferry::python {
namespace {

AudioCrop audio_crop(const std::string& text) {
  if (text == "random") return AudioCrop::random;
  if (text == "start") return AudioCrop::start;
  if (text == "center") return AudioCrop::center;
  // A text outside the choices: a ConfigError naming the option, as VideoFolder's start.
  throw ConfigError("AudioFolder: crop is \"random\", \"start\" or \"center\", not \"" + text +
                    "\"");
}

// A dict's int value: a Python int (not a bool) within int's range. \throws TypeError or
// ValueError naming `what` and the form it takes.
int int_value(const py::handle& value, const std::string& what) {
  if (!py::isinstance<py::int_>(value) || py::isinstance<py::bool_>(value)) {
    throw py::type_error(what + " must be an int, not " + py::repr(value).cast<std::string>() +
                         " (" + py::type::of(value).attr("__name__").cast<std::string>() + ")");
  }
  const auto v = value.cast<py::int_>();
  if (v < py::int_(std::numeric_limits<int>::min()) ||
      v > py::int_(std::numeric_limits<int>::max())) {
    throw py::value_error(what + " " + py::repr(v).cast<std::string>() +
                          " is out of range (an int of 32 bits)");
  }
  return v.cast<int>();
}

// A dict's count: int_value(), and a ValueError naming the least it takes when negative
// (docs/PYTHON.md: a negative count is a ValueError; 0 and other values past the least are
// ferry's ConfigError, from the options' check).
int count_value(const py::handle& value, const std::string& what, int least) {
  const int v = int_value(value, what);
  if (v < 0) {
    throw py::value_error(what + " is an int >= " + std::to_string(least) + ", not " +
                          std::to_string(v));
  }
  return v;
}

// A dict's float value: a Python int or float (not a bool). \throws TypeError naming `what`.
double float_value(const py::handle& value, const std::string& what) {
  if (!(py::isinstance<py::int_>(value) || py::isinstance<py::float_>(value)) ||
      py::isinstance<py::bool_>(value)) {
    throw py::type_error(what + " must be a number (int or float), not " +
                         py::repr(value).cast<std::string>() + " (" +
                         py::type::of(value).attr("__name__").cast<std::string>() + ")");
  }
  return value.cast<double>();
}

// mel=dict(n_fft=..., hop=..., n_mels=..., f_min=..., f_max=..., log_floor=...); True: the
// defaults. A key MelOptions does not have is a TypeError naming it, a value of another type a
// TypeError naming its key and the type it takes.
std::optional<MelOptions> mel_options(const py::object& mel) {
  if (mel.is_none()) return std::nullopt;
  MelOptions o;
  if (py::isinstance<py::bool_>(mel)) {
    if (!mel.cast<bool>()) return std::nullopt;
    return o;
  }
  if (!py::isinstance<py::dict>(mel)) {
    throw py::type_error(
        "AudioFolder: mel is None or a dict (n_fft, hop, n_mels, f_min, f_max, "
        "log_floor), not " +
        py::repr(mel).cast<std::string>());
  }
  for (const auto& [key, value] : mel.cast<py::dict>()) {
    const std::string k = py::str(key).cast<std::string>();
    const std::string what = "AudioFolder: mel['" + k + "']";
    if (k == "n_fft") {
      o.n_fft = count_value(value, what, 2);
    } else if (k == "hop" || k == "hop_length") {
      o.hop = count_value(value, what, 1);
    } else if (k == "n_mels") {
      o.n_mels = count_value(value, what, 1);
    } else if (k == "f_min") {
      o.f_min = float_value(value, what);
    } else if (k == "f_max") {
      o.f_max = value.is_none() ? 0.0 : float_value(value, what);
    } else if (k == "log_floor") {
      o.log_floor = float_value(value, what);  // finite and > 0: check_audio_options()
    } else {
      throw py::type_error("AudioFolder: mel has no key '" + k +
                           "' (it takes n_fft, hop, n_mels, f_min, f_max, log_floor)");
    }
  }
  return o;
}

// A method's sample index: an int from 0 to size() - 1. \throws TypeError or ValueError
// naming the argument.
std::size_t sample_index(const AudioFolder& ds, const py::object& index, const char* who) {
  if (!py::isinstance<py::int_>(index) || py::isinstance<py::bool_>(index)) {
    throw py::type_error(std::string(who) + ": index must be an int, not " +
                         py::repr(index).cast<std::string>());
  }
  const auto i = index.cast<py::int_>();
  if (i < py::int_(0) || i >= py::int_(ds.size())) {
    throw py::value_error(std::string(who) + ": index " + py::repr(i).cast<std::string>() +
                          " is not 0 to " + std::to_string(ds.size()) +
                          " - 1 (the folder's files)");
  }
  return i.cast<std::size_t>();
}

// AudioFolder's keywords: ints and numbers that are not bools (True is no sample rate).
AudioOptions audio_options(const py::object& sample_rate, const py::object& channels,
                           const py::object& clip_seconds, const py::object& crop,
                           const py::object& mel, const py::object& max_seconds) {
  AudioOptions o;
  o.sample_rate = int_value(sample_rate, "AudioFolder: sample_rate");
  o.channels = int_value(channels, "AudioFolder: channels");
  o.clip_seconds = float_value(clip_seconds, "AudioFolder: clip_seconds");
  if (!py::isinstance<py::str>(crop)) {
    throw py::type_error("AudioFolder: crop must be \"random\", \"start\" or \"center\", not " +
                         py::repr(crop).cast<std::string>());
  }
  o.crop = audio_crop(crop.cast<std::string>());
  o.mel = mel_options(mel);
  o.max_seconds = float_value(max_seconds, "AudioFolder: max_seconds");
  return o;
}

}  // namespace

AudioOptions audio_options_from(const py::object& kw, const char* who) {
  AudioOptions o;
  if (kw.is_none()) return o;
  if (!py::isinstance<py::dict>(kw)) {
    throw py::type_error(std::string(who) +
                         ": audio options are a dict of AudioFolder's keywords (sample_rate, "
                         "channels, clip_seconds, crop, mel, max_seconds), not " +
                         py::repr(kw).cast<std::string>());
  }
  for (const auto& [key, value] : kw.cast<py::dict>()) {
    const std::string k = py::str(key).cast<std::string>();
    const std::string what = std::string(who) + ": audio['" + k + "']";
    if (k == "sample_rate") {
      o.sample_rate = count_value(value, what, 0);
    } else if (k == "channels") {
      o.channels = count_value(value, what, 0);
    } else if (k == "clip_seconds") {
      o.clip_seconds = float_value(value, what);
    } else if (k == "crop") {
      if (!py::isinstance<py::str>(value)) {
        throw py::type_error(what + " must be \"random\", \"start\" or \"center\", not " +
                             py::repr(value).cast<std::string>());
      }
      o.crop = audio_crop(value.cast<std::string>());
    } else if (k == "mel") {
      o.mel = mel_options(py::reinterpret_borrow<py::object>(value));
    } else if (k == "max_seconds") {
      o.max_seconds = float_value(value, what);
    } else {
      throw py::type_error(std::string(who) + ": audio options have no key '" + k +
                           "' (they take sample_rate, channels, clip_seconds, crop, mel, "
                           "max_seconds)");
    }
  }
  return o;
}

void bind_audio(py::module_& m) {
  py::class_<AudioFolder, Dataset, std::shared_ptr<AudioFolder>>(m, "AudioFolder", R"doc(
root/<class>/<file> (.wav, .flac, .ogg, .opus, .mp3), decoded on the loader's workers by
libsndfile and resampled by libsoxr: "audio" f32 [T] (channels=1) or [T, C], time first, in
[-1, 1] (T ragged when clip_seconds is 0: pad or pack it with the loader's ragged=), or with
mel=dict(n_fft=400, hop=160, n_mels=80, f_min=0, f_max=0, log_floor=1e-10) the log-mel
spectrogram f32 [frames, n_mels] (torchaudio's MelSpectrogram, then log); and "label" i64 [].
crop: "random" (from the sample's seed), "start" or "center". sample_rate=0 or channels=0 keep
the first file's. A bad file is a DataError naming it, raised for its sample.)doc")
      .def(py::init([](const std::filesystem::path& root, const py::object& sample_rate,
                       const py::object& channels, const py::object& clip_seconds,
                       const py::object& crop, const py::object& mel,
                       const py::object& max_seconds) {
             const AudioOptions o =
                 audio_options(sample_rate, channels, clip_seconds, crop, mel, max_seconds);
             const py::gil_scoped_release release;
             return AudioFolder::open(root, o);
           }),
           py::arg("root"), py::kw_only(), py::arg("sample_rate") = 16000, py::arg("channels") = 1,
           py::arg("clip_seconds") = 0.0, py::arg("crop") = "random", py::arg("mel") = py::none(),
           py::arg("max_seconds") = 3600.0)
      .def(
          "length",
          [](const AudioFolder& ds, const py::object& index, const py::object& field) {
            const std::size_t i = sample_index(ds, index, "AudioFolder.length");
            if (!py::isinstance<py::str>(field)) {
              throw py::type_error("AudioFolder.length: field must be a str (\"audio\"), not " +
                                   py::repr(field).cast<std::string>());
            }
            const auto name = field.cast<std::string>();
            const std::vector<FieldSpec> fields = ds.fields();
            for (std::size_t f = 0; f < fields.size(); ++f) {
              if (fields[f].name != name) continue;
              const py::gil_scoped_release release;
              return ds.length(i, f);
            }
            throw py::value_error("AudioFolder.length: no field '" + name +
                                  "' (the fields are \"audio\" and \"label\")");
          },
          py::arg("index"), py::arg("field"),
          "Rows of sample `index`'s ragged field `field` (\"audio\" without a clip).")
      .def_property_readonly("classes",
                             [](const AudioFolder& d) { return name_texts(d.classes()); })
      .def_property_readonly("sample_rate",
                             [](const AudioFolder& ds) { return ds.options().sample_rate; })
      .def_property_readonly("channels",
                             [](const AudioFolder& ds) { return ds.options().channels; })
      .def(
          "path",
          [](const AudioFolder& ds, const py::object& index) {
            return ds.path(sample_index(ds, index, "AudioFolder.path"));
          },
          py::arg("index"))
      .def(
          "label",
          [](const AudioFolder& ds, const py::object& index) {
            return ds.label(sample_index(ds, index, "AudioFolder.label"));
          },
          py::arg("index"));
}

}  // namespace ferry::python
