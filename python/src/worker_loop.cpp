// A worker process's side of python/src/workers_*.cpp (ferry/_worker.py starts the process and
// hands over here): the loop that serves the messages coming on its socket (workers_protocol.cpp
// writes them), the read of one sample into its place and the give-back of a staging slot's pages
// (worker_watch.cpp: the watch that ends it with the training process). The loop is C++: Python
// runs only __getitem__ and the generators' seeding per sample (the task's framing, unpacking,
// mappings and answers took a fifth of a small sample's time in Python).

#include <poll.h>
#include <pybind11/stl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "py_dataset.hpp"
#include "workers.hpp"
#include "workers_internal.hpp"

namespace ferry::python {

namespace {

/// glibc's malloc in a worker process: blocks up to 32 MiB from the heap (not mapped for each
/// allocation and unmapped when freed), and up to 64 MiB free at the heap's top kept (not given
/// back with each free): the ceilings of glibc's own adaptive thresholds, which a process reaches
/// once it has freed a mapped block that large. A fresh process starts at 128 KiB (DataLoader's
/// workers, forked, inherit what the training process's thresholds have risen to), and a
/// __getitem__ that makes a few images of some hundred KB each (PIL's decode, resize, crop) then
/// maps, faults in and unmaps each of them: a quarter of a JPEG sample's time. Thresholds the
/// user set (MALLOC_*_ or GLIBC_TUNABLES) are left as they are.
void tune_malloc() noexcept {
#if defined(__GLIBC__)
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr ||
      std::getenv("MALLOC_TRIM_THRESHOLD_") != nullptr) {
    return;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 64 << 20;
  static_cast<void>(::mallopt(M_MMAP_THRESHOLD, kMmapThreshold));
  static_cast<void>(::mallopt(M_TRIM_THRESHOLD, kTrimThreshold));
#endif
}

/// A worker process's reader: the dataset, its layout and the seeder (GIL held throughout).
class WorkerReader {
 public:
  /// `seed_mode`: ProcessOptions::seed_mode() (0 none, 1 every sample, 2 watched).
  WorkerReader(py::object dataset, const py::tuple& layout, int seed_mode)
      : dataset_(std::move(dataset)),
        layout_(layout),
        seed_mode_(seed_mode),
        dest_(layout_.fields().size()),
        nbytes_(layout_.fields().size()),
        get_([this] {
          arrays_.clear();  // a second read's sample replaces the first's
          arrays_ = layout_.arrays(dataset_[py::int_(index_)], index_, nbytes_);
        }) {}

  std::size_t fields() const noexcept { return dest_.size(); }
  bool seed_python() const noexcept { return seed_mode_ != 0; }

  /// Task `token`'s sample `index` written into `target`: `places` holds (bytes, offset) of each
  /// field. The task's state word `state` (TaskState) is claimed after __getitem__ and every
  /// conversion, before the first byte is written, and marked done after: nothing is written
  /// when the parent cancelled the task first.
  void read(std::uint64_t index, std::uint64_t seed, std::byte* state, std::uint64_t token,
            std::span<std::byte> target, std::span<const std::uint64_t> places) {
    for (std::size_t f = 0; f < dest_.size(); ++f) {
      const std::uint64_t bytes = places[2 * f];
      const std::uint64_t offset = places[2 * f + 1];
      if (offset > target.size() || bytes > target.size() - offset) {
        throw py::value_error("a field's place is outside its region");
      }
      dest_[f] = target.data() + offset;
      nbytes_[f] = bytes;
    }
    // Every conversion first (a value's __array__ is Python code that may take long, and may
    // draw: it is read as part of the sample): a task is claimed only for the copy, so that a
    // cancel never waits on the user's code. get_ (made once: a read allocates no closure)
    // reads sample index_ into arrays_, which go when the read ends.
    index_ = index;
    const std::unique_ptr<std::vector<py::array>, void (*)(std::vector<py::array>*)> release(
        &arrays_, [](std::vector<py::array>* a) { a->clear(); });
    TaskState task(state, token);
    if (!task.begin()) return;  // called off before it began
    watch_.read(seed, seed_mode_, get_);
    if (!task.claim()) return;
    SampleLayout::copy(arrays_, dest_, nbytes_);
    task.finish(/*ok=*/true);
  }

 private:
  py::object dataset_;
  SampleLayout layout_;
  SeedWatch watch_;
  int seed_mode_;
  std::vector<std::byte*> dest_;
  std::vector<std::size_t> nbytes_;
  std::uint64_t index_ = 0;
  std::vector<py::array> arrays_;
  std::function<void()> get_;
};

/// A shared read-write mapping of a memfd: the scratch region, or a staging slot's region.
class Mapping {
 public:
  Mapping() = default;
  /// `bytes` of descriptor `fd` (0: its whole size). \throws OSError.
  Mapping(int fd, std::size_t bytes) {
    if (bytes == 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0) throw_os_error();
      bytes = static_cast<std::size_t>(st.st_size);
      if (bytes == 0) throw py::value_error("a region of 0 bytes cannot be mapped");
    }
    void* at = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (at == MAP_FAILED) throw_os_error();
    at_ = static_cast<std::byte*>(at);
    bytes_ = bytes;
  }
  Mapping(Mapping&& other) noexcept
      : at_(std::exchange(other.at_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept {
    if (this != &other) {
      release();
      at_ = std::exchange(other.at_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { release(); }

  std::span<std::byte> bytes() const noexcept { return {at_, bytes_}; }

  [[noreturn]] static void throw_os_error() {
    PyErr_SetFromErrno(PyExc_OSError);
    throw py::error_already_set();
  }

 private:
  void release() noexcept {
    if (at_ != nullptr) ::munmap(at_, bytes_);
    at_ = nullptr;
    bytes_ = 0;
  }
  std::byte* at_ = nullptr;
  std::size_t bytes_ = 0;
};

/// The messages coming on the socket, in multiprocessing.Connection's framing (a 4-byte
/// big-endian length). The parent sends several at a time in one write: they are read together
/// and split here. The descriptors of map messages wait in order (a read ends after the message
/// that brings one).
class Messages {
 public:
  explicit Messages(int fd) : fd_(fd) {}
  Messages(const Messages&) = delete;
  Messages& operator=(const Messages&) = delete;
  ~Messages() {
    for (const int fd : fds_) ::close(fd);
  }

  /// The next whole message that has come (valid until wait()), or false.
  bool take(std::string_view& message) noexcept {
    const std::size_t left = size_ - at_;
    if (left < 4) return false;
    const auto* p = reinterpret_cast<const unsigned char*>(buffer_.get() + at_);
    const std::size_t n = (std::size_t{p[0]} << 24U) | (std::size_t{p[1]} << 16U) |
                          (std::size_t{p[2]} << 8U) | std::size_t{p[3]};
    if (left - 4 < n) return false;
    message = std::string_view(buffer_.get() + at_ + 4, n);
    at_ += 4 + n;
    return true;
  }

  /// Reads what comes next, waiting for it with the GIL released: false once the socket closed
  /// (or failed).
  bool wait() {
    if (at_ > 0) {
      std::memmove(buffer_.get(), buffer_.get() + at_, size_ - at_);
      size_ -= at_;
      at_ = 0;
    }
    if (capacity_ - size_ < kChunk) {
      capacity_ = std::max(2 * capacity_, size_ + kChunk);
      auto grown = std::make_unique_for_overwrite<char[]>(capacity_);
      if (size_ > 0) std::memcpy(grown.get(), buffer_.get(), size_);
      buffer_ = std::move(grown);
    }
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int) * kMostFds)> control{};
    iovec io{buffer_.get() + size_, capacity_ - size_};
    msghdr header{};
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    header.msg_control = control.data();
    header.msg_controllen = control.size();
    ssize_t got = 0;
    for (;;) {
      {
        const py::gil_scoped_release unlocked;
        got = ::recvmsg(fd_, &header, MSG_CMSG_CLOEXEC);
      }
      if (got >= 0 || errno != EINTR) break;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&header); c != nullptr; c = CMSG_NXTHDR(&header, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds_.push_back(fd);
      }
    }
    if (got <= 0) return false;
    size_ += static_cast<std::size_t>(got);
    return true;
  }

  /// Whether something comes within `ms` milliseconds (the GIL released meanwhile).
  bool comes_within(int ms) {
    if (at_ < size_) return true;
    pollfd p{fd_, POLLIN, 0};
    for (;;) {
      int n = 0;
      {
        const py::gil_scoped_release unlocked;
        n = ::poll(&p, 1, ms);
      }
      if (n >= 0 || errno != EINTR) return n != 0;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  /// The descriptor that came with the map message just taken. \throws ValueError for none.
  int take_fd() {
    if (fds_.empty()) throw py::value_error("a map message came without its descriptor");
    const int fd = fds_.front();
    fds_.pop_front();
    return fd;
  }

 private:
  static constexpr std::size_t kChunk = 64 << 10;
  static constexpr std::size_t kMostFds = 16;
  int fd_;
  std::unique_ptr<char[]> buffer_;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
  std::size_t at_ = 0;
  std::deque<int> fds_;
};

/// Writes all of `data` to socket `fd` (workers_protocol.cpp's send_all), the GIL released:
/// false when it failed (the parent went).
bool write_all(int fd, std::string_view data) {
  const py::gil_scoped_release unlocked;
  return send_all(fd, reinterpret_cast<const std::byte*>(data.data()), data.size());
}

std::uint64_t word_at(std::string_view message, std::size_t i) noexcept {
  std::uint64_t w = 0;
  std::memcpy(&w, message.data() + 8 * i, sizeof w);  // little-endian, as the parent wrote it
  return w;
}

/// The current Python error, normalized, with its traceback on it (an exception object).
py::object fetch_error() {
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* trace = nullptr;
  PyErr_Fetch(&type, &value, &trace);
  PyErr_NormalizeException(&type, &value, &trace);
  if (trace != nullptr && value != nullptr) PyException_SetTraceback(value, trace);
  Py_XDECREF(type);
  Py_XDECREF(trace);
  if (value == nullptr) return py::none();
  return py::reinterpret_steal<py::object>(value);
}

/// The staging slot `pages` of the training process, let go by it: its pages freed, unless it
/// called that off first (the state word at `state_at` in `control`, a TaskState).
void give_back(std::span<std::byte> control, std::uint64_t state_at, std::uint64_t token,
               std::span<std::byte> pages) {
  if (state_at % alignof(std::uint64_t) != 0 || state_at > control.size() ||
      control.size() - state_at < sizeof(std::uint64_t)) {
    throw py::value_error("the give-back's state word is outside the control region");
  }
  TaskState state(control.data() + state_at, token);
  if (!state.claim()) return;
  const int rc = ::madvise(pages.data(), pages.size(), MADV_REMOVE);
  state.finish(rc == 0);
}

// A give-back waits until the loop has been idle this long: an epoch started at once reuses the
// slot (and calls the give-back off) instead of faulting its pages in again (on 1,000 JPEGs a
// run, batches of 256, every slot of an epoch is its tail's: 5% of the epoch's time).
constexpr int kGiveBackIdleMs = 250;

// Message sizes (ferry/_worker.py's docstring; workers_protocol.cpp writes them): a task is
// kTaskWords and 2 a field (workers_internal.hpp), map 2, drop 1, give-back 3.
constexpr std::size_t kMapBytes = 16;
constexpr std::size_t kDropBytes = 8;
constexpr std::size_t kGiveBackBytes = 24;
constexpr std::string_view kDone{"\0\0\0\1\0", 5};  // a sample's answer, framed

/// The loop of a worker process (ferry/_worker.py's _main, once started): serves the messages
/// of socket `fd` until it closes. `reader` is None where the start failed (`failure`, then
/// each task's answer). `control_fd` (-1: none) is the memfd of the give-backs' state words,
/// mapped here and closed. `worker` is ferry._worker (its _failure makes a failure's answer, its
/// _sample_seed and _torch_worker_info serve a torch that __getitem__ imports).
void serve(const py::object& reader_object, int fd, int memfd, int control_fd,
           const py::object& failure, std::size_t fields, const py::module_& worker,
           const py::object& ferry_error) {
  WorkerReader* reader = reader_object.is_none() ? nullptr : reader_object.cast<WorkerReader*>();
  if (reader != nullptr && reader->fields() != fields) {
    throw py::value_error("a reader of " + std::to_string(reader->fields()) + " fields, tasks of " +
                          std::to_string(fields));
  }
  Mapping control;
  if (control_fd >= 0) {
    try {
      control = Mapping(control_fd, 0);
    } catch (...) {
      ::close(control_fd);
      throw;
    }
    ::close(control_fd);
  }
  const py::object make_failure = worker.attr("_failure");
  const py::object tell_torch = worker.attr("_torch_worker_info");
  const auto modules = py::reinterpret_borrow<py::dict>(py::module_::import("sys").attr("modules"));
  // Looked at for every task: interned names, the module's own dict (no string made a sample).
  const auto torch_name = py::reinterpret_steal<py::object>(PyUnicode_InternFromString("torch"));
  const auto seed_name =
      py::reinterpret_steal<py::object>(PyUnicode_InternFromString("_sample_seed"));
  const auto worker_dict = py::reinterpret_borrow<py::dict>(worker.attr("__dict__"));
  const auto has_torch = [&] { return PyDict_Contains(modules.ptr(), torch_name.ptr()) == 1; };
  const auto set_sample_seed = [&](const py::object& value) {
    if (PyDict_SetItem(worker_dict.ptr(), seed_name.ptr(), value.ptr()) != 0) {
      throw py::error_already_set();
    }
  };
  bool torch_told = has_torch();
  Messages messages(fd);
  Mapping scratch;
  std::uint64_t scratch_bytes = 0;
  std::unordered_map<std::uint64_t, Mapping> regions;
  std::string answers;
  std::uint64_t answered = 0;
  const std::size_t task_bytes = 8 * (kTaskWords + 2 * fields);
  std::vector<std::uint64_t> places(2 * fields);
  std::vector<std::array<std::uint64_t, 3>> give_backs;  // (region, state word, token) deferred
  for (;;) {
    std::string_view m;
    if (!messages.take(m)) {
      if (!answers.empty()) {  // nothing more to do now: the answers go
        if (!write_all(fd, answers)) break;
        answers.clear();
        answered = 0;
      }
      if (!give_backs.empty() && !messages.comes_within(kGiveBackIdleMs)) {
        for (const auto& [region, state_at, token] : give_backs) {
          const auto it = regions.find(region);
          if (it != regions.end()) give_back(control.bytes(), state_at, token, it->second.bytes());
        }
        give_backs.clear();
      }
      if (!messages.wait()) break;
      continue;
    }
    if (m.size() == kMapBytes) {
      const int region_fd = messages.take_fd();
      try {
        regions[word_at(m, 0)] = Mapping(region_fd, word_at(m, 1));
      } catch (...) {
        ::close(region_fd);
        throw;
      }
      ::close(region_fd);
      continue;
    }
    if (m.size() == kGiveBackBytes) {
      if (control_fd >= 0) give_backs.push_back({word_at(m, 0), word_at(m, 1), word_at(m, 2)});
      continue;
    }
    if (m.size() == kDropBytes) {
      regions.erase(word_at(m, 0));
      continue;
    }
    if (m.size() != task_bytes) {
      throw py::value_error("a message of " + std::to_string(m.size()) + " bytes");
    }
    const std::uint64_t index = word_at(m, 0);
    const std::uint64_t seed = word_at(m, 1);
    const std::uint64_t want = word_at(m, 2);
    const std::uint64_t state_at = word_at(m, 3);
    std::uint64_t group = word_at(m, 4);
    const std::uint64_t token = word_at(m, 5);
    const std::uint64_t region = word_at(m, 6);
    if (fields > 0) std::memcpy(places.data(), m.data() + 8 * kTaskWords, 16 * fields);
    if (!torch_told && has_torch()) {  // imported by a __getitem__ since
      torch_told = true;
      tell_torch(modules["torch"]);
    }
    const auto fail = [&](const py::object& error) {
      auto answer = make_failure(error, ferry_error).cast<std::string>();
      if (reader == nullptr) answer[0] = '\2';  // the start failed: the parent replaces it
      const auto n = static_cast<std::uint32_t>(answer.size());
      const std::array<char, 4> length{static_cast<char>(n >> 24U), static_cast<char>(n >> 16U),
                                       static_cast<char>(n >> 8U), static_cast<char>(n)};
      answers.append(length.data(), length.size());
      answers += answer;
      group = 1;
    };
    if (reader == nullptr) {
      fail(failure);
    } else {
      try {
        if (want != scratch_bytes) {
          scratch = Mapping();
          scratch_bytes = 0;
          scratch = Mapping(memfd, want);
          scratch_bytes = want;
        }
        const std::span<std::byte> state = scratch.bytes();
        if (state_at % alignof(std::uint64_t) != 0 || state_at > state.size() ||
            state.size() - state_at < sizeof(std::uint64_t)) {
          throw py::value_error("the task's state word is outside the scratch region");
        }
        std::span<std::byte> target = state;
        if (region != 0) {
          const auto it = regions.find(region);
          if (it == regions.end()) throw py::key_error(std::to_string(region));
          target = it->second.bytes();
        }
        if (!torch_told && reader->seed_python()) set_sample_seed(py::int_(seed));
        reader->read(index, seed, state.data() + state_at, token, target, places);
        answers += kDone;
      } catch (...) {
        set_python_error(std::current_exception());
        fail(fetch_error());
      }
    }
    if (!torch_told && reader != nullptr && reader->seed_python()) set_sample_seed(py::none());
    if (++answered >= group) {
      if (!write_all(fd, answers)) break;
      answers.clear();
      answered = 0;
    }
  }
}

}  // namespace

void bind_workers(py::module_& m) {
  py::class_<WorkerReader>(m, "_WorkerReader").def(py::init<py::object, py::tuple, int>());
  m.def("_serve", &serve, py::arg("reader"), py::arg("fd"), py::arg("memfd"), py::arg("control"),
        py::arg("failure"), py::arg("fields"), py::arg("worker"), py::arg("ferry_error"));
  m.def("_worker_prepare", [] { tune_malloc(); });
}

}  // namespace ferry::python
