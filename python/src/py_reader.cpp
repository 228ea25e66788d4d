// PyDataset: a dataset written in Python, read on ferry's worker threads (each taking the GIL
// for its call) or in worker processes (workers.hpp; worker_loop.cpp is the processes' side).

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "py_dataset.hpp"
#include "workers.hpp"

namespace ferry::python {

ReaderGil::ReaderGil() {
  if (!region_.entered()) throw Error("Python dataset: the interpreter is exiting");
  state_ = PyGILState_Ensure();
  thread_local bool kept = false;
  if (!kept) {
    static_cast<void>(PyGILState_Ensure());  // held for the thread's life
    kept = true;
  }
}

ReaderGil::~ReaderGil() { PyGILState_Release(state_); }

PyDataset::PyDataset(py::object source) : source_(std::move(source)) {
  // Inside a PythonRegion: the exit hook waits for it to end. The dataset's own Python code runs
  // here (len(), the read of a sample to learn its fields) and gives up the GIL now and then; a
  // daemon thread that took it back once the interpreter finalizes would be ended by Python, its
  // unwinding through these frames letting go of Python objects without it (a crash at exit).
  const PythonRegion region;
  if (!region.entered()) throw Error("Python dataset: the interpreter is exiting");
  clear_frames_ = py::module_::import("traceback").attr("clear_frames");
  size_ = py::len(source_);
  if (size_ == 0) throw ConfigError("Python dataset: it is empty (len() == 0)");
  seeder_ = std::make_shared<const PythonSeeder>();
  layout_ = std::make_shared<const SampleLayout>(
      source_, [this](std::size_t& index) { return first_sample(index); });
  bool has_ragged = false;
  for (const FieldSpec& f : layout_->fields()) has_ragged = has_ragged || f.is_ragged();
  if (has_ragged) {
    length_ = py::getattr(source_, "length", py::none());
    if (length_.is_none()) {
      throw ConfigError(
          "Python dataset: `fields` declares a ragged field (shape (None, ...)); the dataset "
          "then gives length(index, field) -> rows");
    }
    max_length_ = py::getattr(source_, "max_length", py::none());
  }
}

py::object PyDataset::first_sample(std::size_t& index) const {
  // The training process reads a sample to learn the fields. Its generators are seeded as for
  // any read and put back after, so that the training's own draws (a model's initialization
  // after the loader is made) are as they would be without it. A sample that raises is passed
  // over: the epoch meets it again, and on_error decides there.
  constexpr std::size_t kTries = 16;
  const py::tuple kept = seeder_->states();
  const auto put_back = [&] { seeder_->restore(kept); };
  std::optional<py::error_already_set> failed;
  for (std::size_t i = 0; i < std::min(size_, kTries); ++i) {
    try {
      seeder_->seed(i);
      py::object sample = source_[py::int_(i)];
      put_back();
      index = i;
      return sample;
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_Exception)) {  // KeyboardInterrupt, SystemExit: not the sample's
        put_back();
        throw;
      }
      if (!failed) failed = std::move(e);
    }
  }
  put_back();
  const py::object error = failed->value();
  if (PyObject_SetAttrString(error.ptr(), "ferry_sample", py::int_(0).ptr()) != 0) PyErr_Clear();
  if (py::hasattr(error, "add_note")) {
    error.attr("add_note")(
        "ferry: sample 0, read in the training process to learn the dataset's "
        "fields; samples 0 to " +
        std::to_string(std::min(size_, kTries) - 1) +
        " all raised (declare `fields` to start without reading one)");
  }
  throw std::move(*failed);
}

PyDataset::~PyDataset() {
  const GilIfUsable gil;
  if (!gil.held()) {
    // The interpreter is going: its objects are left to it.
    if (pool_) pool_.reset();
    static_cast<void>(source_.release());
    static_cast<void>(length_.release());
    static_cast<void>(max_length_.release());
    static_cast<void>(clear_frames_.release());
    // (The layout and the seeder let go of theirs themselves when the last copy goes.)
    for (auto& [i, e] : failures_) static_cast<void>(e.release());
    return;
  }
  pool_.reset();
  source_ = length_ = max_length_ = clear_frames_ = py::object();
  failures_.clear();
  layout_.reset();
  seeder_.reset();
}

PyDataset::PyDataset(const PyDataset& other, CopyTag /*tag*/)
    : source_(other.source_),
      length_(other.length_),
      max_length_(other.max_length_),
      clear_frames_(other.clear_frames_),
      size_(other.size_),
      layout_(other.layout_),
      seeder_(other.seeder_),
      seed_python_(other.seed_python_) {}

std::shared_ptr<PyDataset> PyDataset::copy() const {
  return std::make_shared<PyDataset>(*this, CopyTag{});
}

std::int64_t PyDataset::length(std::size_t index, std::size_t field) const {
  if (!python_usable()) throw Error("Python dataset: the interpreter is exiting");
  const ReaderGil gil;
  try {
    return length_(index, layout_->fields().at(field).name).cast<std::int64_t>();
  } catch (py::error_already_set& e) {
    throw ConfigError("Python dataset: length(" + std::to_string(index) + ", \"" +
                      layout_->fields().at(field).name + "\"): " +
                      py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
                      py::str(e.value()).cast<std::string>());
  } catch (py::cast_error&) {
    throw ConfigError("Python dataset: length(" + std::to_string(index) + ", \"" +
                      layout_->fields().at(field).name + "\") did not give an int");
  }
}

std::int64_t PyDataset::max_length(std::size_t field) const {
  if (max_length_.is_none() || !python_usable()) return -1;
  const ReaderGil gil;
  try {
    return max_length_(layout_->fields().at(field).name).cast<std::int64_t>();
  } catch (py::error_already_set& e) {
    throw ConfigError("Python dataset: max_length(\"" + layout_->fields().at(field).name +
                      "\"): " + py::str(e.value()).cast<std::string>());
  }
}

void PyDataset::read(std::size_t index, SampleRef out) const {
  if (pool_) {
    pool_->read(*this, index, out);
    return;
  }
  if (!python_usable()) throw Error("Python dataset: the interpreter is exiting");
  const ReaderGil gil;
  const std::size_t n = layout_->fields().size();
  std::vector<std::byte*> dest(n);
  std::vector<std::size_t> nbytes(n);
  for (std::size_t f = 0; f < n; ++f) {
    dest[f] = static_cast<std::byte*>(out.data(f));
    nbytes[f] = out.nbytes(f);
  }
  try {
    if (seed_python_) seeder_->seed(out.seed());
    const py::object sample = source_[py::int_(index)];
    layout_->write(sample, index, dest, nbytes);
  } catch (py::builtin_exception& e) {  // the layout's own TypeError, KeyError, ...
    e.set_error();
    fail(index, py::error_already_set());
  } catch (py::error_already_set& e) {
    fail(index, e);
  }
}

void PyDataset::begin_reads(std::span<const std::size_t> indices,
                            std::span<const SampleRef> out) const noexcept {
  if (pool_) pool_->begin_reads(indices, out);
}

std::size_t PyDataset::read_share() const noexcept { return pool_ ? pool_->read_share() : 0; }

void PyDataset::end_reads() const noexcept {
  if (pool_) pool_->end_reads();
}

void PyDataset::staging_released(std::span<std::byte> slot) const noexcept {
  if (pool_) pool_->released(slot);
}

void PyDataset::staging_reused(std::span<std::byte> slot) const noexcept {
  if (pool_) pool_->reused(slot);
}

std::uint64_t PyDataset::reader_memory(std::uint64_t sample_bytes) const noexcept {
  return pool_ ? pool_->memory_bound(sample_bytes) : 0;
}

void PyDataset::use_processes(const ProcessOptions& options) {
  if (pool_ && pool_users_ > 0) {
    if (pool_->options() == options) {
      ++pool_users_;
      return;
    }
    throw ConfigError(
        "Loader: this Python dataset already feeds another loader's worker processes, with other "
        "options; give each loader its own dataset object");
  }
  pool_ = std::make_unique<ProcessPool>(*this, options);
  pool_users_ = 1;
}

void PyDataset::abandon_reads() noexcept {
  if (pool_) pool_->abandon();
}

void PyDataset::resume_reads() noexcept {
  if (pool_) pool_->resume();
}

void PyDataset::stop_processes() {
  if (!pool_ || pool_users_ == 0) return;
  if (--pool_users_ == 0) pool_->stop();
}

void PyDataset::fail(std::size_t index, const py::error_already_set& e) const {
  std::string what = py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
                     py::str(e.value()).cast<std::string>();
  // The value alone is kept: raised again, it brings the traceback it holds. Its frames'
  // locals are let go (a decoded image, say): under on_error="skip" up to 256 failures wait
  // here; the frames' code and lines, which a traceback shows, stay.
  if (e.trace()) {
    PyException_SetTraceback(e.value().ptr(), e.trace().ptr());
    try {
      clear_frames_(e.trace());
    } catch (py::error_already_set&) {  // a frame still running: its locals stay
    }
  }
  keep_failure(index, e.value());
  throw DataError("Python dataset: " + what);
}

void PyDataset::keep_failure(std::uint64_t index, py::object error) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  // Bounded: under on_error="skip" nothing takes them.
  if (failures_.size() >= 256) failures_.erase(failures_.begin());
  failures_[index] = std::move(error);
}

void PyDataset::keep_remote_failure(std::uint64_t index, std::string pickled,
                                    std::string traceback) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (remote_failures_.size() >= 256) remote_failures_.erase(remote_failures_.begin());
  remote_failures_[index] = RemoteFailure{std::move(pickled), std::move(traceback)};
}

py::object PyDataset::take_failure(std::uint64_t index) const {
  RemoteFailure remote;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = failures_.find(index); it != failures_.end()) {
      py::object e = std::move(it->second);
      failures_.erase(it);
      return e;
    }
    const auto it = remote_failures_.find(index);
    if (it == remote_failures_.end()) return {};
    remote = std::move(it->second);
    remote_failures_.erase(it);
  }
  // A worker process's exception: the same type and message, and its traceback's text as a note
  // (its frames stay in the process that ran them).
  py::object e;
  try {
    e = py::module_::import("pickle").attr("loads")(py::bytes(remote.pickled));
  } catch (py::error_already_set&) {
    return {};
  }
  if (py::hasattr(e, "add_note")) {
    e.attr("add_note")("ferry: in the worker process:\n" + remote.traceback);
  }
  return e;
}

std::vector<PyDataset*> python_datasets(const Dataset& dataset) {
  std::vector<PyDataset*> out;
  // The loader holds its dataset const; the Python datasets in it are the module's own objects.
  if (const auto* p = dynamic_cast<const PyDataset*>(&dataset)) {
    out.push_back(const_cast<PyDataset*>(p));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  } else if (const auto* mix = dynamic_cast<const Mixture*>(&dataset)) {
    for (std::size_t k = 0; k < mix->num_sources(); ++k) {
      for (PyDataset* d : python_datasets(*mix->source(k).dataset)) out.push_back(d);
    }
  }
  return out;
}

}  // namespace ferry::python
