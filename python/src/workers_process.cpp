// Worker processes for a Python dataset, the parent's side (ferry/_worker.py is the child's):
// the processes' life. The pool made and stopped, a process started (with its scratch region),
// retired, replaced when it ended, and its loss reported as the sample's DataError.

#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "py_dataset.hpp"
#include "workers.hpp"
#include "workers_internal.hpp"

namespace ferry::python {

namespace {

// A dataset's pickle (its large numpy arrays not in it) kept for the replacement of a worker
// process when no larger.
constexpr std::size_t kKeptPickle = std::size_t{16} << 20U;
std::atomic<std::uint64_t> g_pool_ids{0};  // ProcessPool::id_

/// The threads of this process (fork is safe with one).
std::size_t thread_count() {
  std::size_t n = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace

ProcessPool::ProcessPool(const PyDataset& dataset, ProcessOptions options)
    : options_(std::move(options)),
      id_(g_pool_ids.fetch_add(1) + 1),
      field_count_(dataset.layout().fields().size()) {
  if (options_.start_method != "forkserver" && options_.start_method != "spawn" &&
      options_.start_method != "fork") {
    throw ConfigError("Loader: start_method \"" + options_.start_method +
                      "\" is none of forkserver, spawn, fork");
  }
  if (options_.start_method == "fork" && thread_count() > 1) {
    throw ConfigError("Loader: start_method \"fork\" is refused: this process runs " +
                      std::to_string(thread_count()) +
                      " threads (ferry's, torch's or others'), and a forked child of a process "
                      "with threads can deadlock; use forkserver (the default) or spawn");
  }
  try {
    source_ = py::reinterpret_borrow<py::object>(dataset.source());
    pickled_ = py::module_::import("ferry._worker").attr("Packed")(source_);
  } catch (py::error_already_set& e) {
    throw ConfigError("Loader: processes=" + std::to_string(options_.count) +
                      ": the dataset cannot be pickled for the worker processes (" +
                      py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
                      py::str(e.value()).cast<std::string>() +
                      "); define its class at a module's top level, or use processes=0 (threads)");
  }
  const py::module_ worker = py::module_::import("ferry._worker");
  if (options_.start_method != "fork") {
    const py::object why = worker.attr("unpicklable_here")(py::handle(dataset.source()));
    if (!why.is_none()) {
      throw ConfigError("Loader: processes=" + std::to_string(options_.count) + ": " +
                        why.cast<std::string>() + ", or use processes=0 (threads)");
    }
  }
  if (options_.start_method != "fork" && options_.worker_init_fn &&
      !options_.worker_init_fn.is_none()) {
    try {  // it goes to each process pickled, as the dataset does
      static_cast<void>(py::module_::import("pickle").attr("dumps")(options_.worker_init_fn));
    } catch (py::error_already_set& e) {
      throw ConfigError(
          "Loader: worker_init_fn cannot be pickled for the worker processes (" +
          py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
          py::str(e.value()).cast<std::string>() +
          "); define it with def at a module's top level (not a lambda or a nested function)");
    }
  }
  layout_ = dataset.layout().describe();
  start_ = worker.attr("start");
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw Error(std::string("Loader: eventfd: ") + std::strerror(errno));
  control_fd_ = ::memfd_create("ferry-control", MFD_CLOEXEC);
  if (control_fd_ >= 0 && ::ftruncate(control_fd_, kControlBytes) == 0) {
    void* map = ::mmap(nullptr, kControlBytes, PROT_READ | PROT_WRITE, MAP_SHARED, control_fd_, 0);
    if (map != MAP_FAILED) control_ = static_cast<std::byte*>(map);
  }
  if (control_ == nullptr) {
    if (control_fd_ >= 0) ::close(control_fd_);
    control_fd_ = -1;  // no give-backs: idle slots keep their pages
  }
  children_.resize(static_cast<std::size_t>(options_.count));
  try {
    for (std::size_t i = 0; i < children_.size(); ++i) {
      children_[i].id = static_cast<int>(i);
      start(children_[i]);
    }
  } catch (...) {
    stop();
    throw;
  }
  // A replacement pickles the dataset again where its pickle is large (data not in numpy arrays):
  // that is not kept for it. A small one is, with its shared arrays, which a replacement then maps
  // as the others do.
  if (py::len(pickled_.attr("data")) > kKeptPickle) pickled_ = py::none();
  constructed_ = true;
}

ProcessPool::~ProcessPool() {
  stop();
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (control_ != nullptr) ::munmap(control_, kControlBytes);
  if (control_fd_ >= 0) ::close(control_fd_);
  if (!python_usable()) {
    static_cast<void>(start_.release());
    static_cast<void>(pickled_.release());
    static_cast<void>(source_.release());
    static_cast<void>(layout_.release());
    static_cast<void>(options_.worker_init_fn.release());
    for (Child& c : children_) static_cast<void>(c.process.release());
  }
}

std::uint64_t ProcessPool::started() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return started_;
}

void ProcessPool::start(Child& c) {
  // Inside a PythonRegion: the exit hook waits for the start to finish (multiprocessing gives
  // up the GIL within it, and a daemon thread that takes it back once the interpreter finalizes
  // is ended by Python, its unwinding through these frames crashing the process, 1 exit in 50).
  // Once exit has begun, no process starts.
  const PythonRegion region;
  if (!region.entered()) throw Error("Python dataset: the interpreter is exiting");
  retire(c);  // what is left of the process before it, if any: its socket, memfd and mapping
  const std::size_t bytes = kMinScratch;
  py::list close_fds;
  if (options_.start_method == "fork") {
    for (const Child& other : children_) {
      if (other.fd >= 0) close_fds.append(other.fd);
      if (other.memfd >= 0) close_fds.append(other.memfd);
    }
    close_fds.append(wake_fd_);
    if (control_fd_ >= 0) close_fds.append(control_fd_);
  }
  const std::uint64_t worker_seed =
      options_.seed * std::uint64_t{0x9E3779B97F4A7C15} + 1 + static_cast<std::uint64_t>(c.id);
  const py::object init = options_.worker_init_fn ? options_.worker_init_fn : py::none();
  py::tuple started;
  try {
    if (pickled_.is_none()) pickled_ = py::module_::import("ferry._worker").attr("Packed")(source_);
    started = start_(options_.start_method, pickled_, c.id, options_.count, worker_seed, layout_,
                     options_.seed_mode(), init, bytes, close_fds, control_fd_);
  } catch (py::error_already_set& e) {
    pickled_ = py::none();
    throw DataError("Python dataset: worker process " + std::to_string(c.id) +
                    " could not start (" +
                    py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
                    py::str(e.value()).cast<std::string>() + ")");
  }
  if (constructed_ && py::len(pickled_.attr("data")) > kKeptPickle) pickled_ = py::none();
  c.process = started[0];
  c.pid = c.process.attr("pid").cast<long>();
  c.fd = started[1].cast<int>();
  c.memfd = started[2].cast<int>();
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, c.memfd, 0);
  if (map == MAP_FAILED) {
    const int err = errno;
    retire(c);
    throw Error(std::string("Python dataset: mapping a worker's shared memory: ") +
                std::strerror(err));
  }
  c.map = static_cast<std::byte*>(map);
  c.map_size = bytes;
  c.dead = false;
  c.ready = false;
  const std::lock_guard<std::mutex> lock(mutex_);
  ++started_;
}

void ProcessPool::retire(Child& c) noexcept {
  if (c.fd >= 0) ::close(c.fd);
  c.fd = -1;
  if (c.map != nullptr) ::munmap(c.map, c.map_size);
  c.map = nullptr;
  c.map_size = 0;
  if (c.memfd >= 0) ::close(c.memfd);
  c.memfd = -1;
  c.dead = true;
  c.stale = 0;
  c.regions.clear();
  c.in_at = 0;
  c.in_end = 0;
}

void ProcessPool::grow(Child& c, std::size_t bytes) {
  if (::ftruncate(c.memfd, static_cast<off_t>(bytes)) != 0) {
    throw Error(std::string("Python dataset: growing a worker's shared memory: ") +
                std::strerror(errno));
  }
  void* map = ::mremap(c.map, c.map_size, bytes, MREMAP_MAYMOVE);
  if (map == MAP_FAILED) {
    throw Error(std::string("Python dataset: mapping a worker's shared memory: ") +
                std::strerror(errno));
  }
  c.map = static_cast<std::byte*>(map);
  c.map_size = bytes;
}

bool ProcessPool::stopping() {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

ProcessPool::Child& ProcessPool::acquire() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (stopping_) throw Error("Python dataset: the loader's worker processes are stopping");
    Child* draining = nullptr;
    for (Child& c : children_) {
      if (c.busy) continue;
      c.busy = true;
      if (c.stale > 0 && !c.dead) {
        // Answers of abandoned reads: taken if they came, else another process is tried first.
        lock.unlock();
        const bool clean = drain(c, /*wait=*/false);
        lock.lock();
        if (!clean) {
          c.busy = false;
          draining = &c;
          continue;
        }
      }
      // One that ended while idle (killed between epochs, or while the training process held a
      // batch) owes no sample: it is replaced now, before a task goes to it.
      if (!c.dead && c.stale == 0 && ended(c)) retire(c);
      if (c.dead && !init_overran_.empty()) {  // it would only hang in it again
        c.busy = false;
        idle_.notify_all();
        throw DataError(init_overran_);
      }
      if (c.dead) {
        lock.unlock();
        try {
          if (!python_usable()) throw Error("Python dataset: the interpreter is exiting");
          const ReaderGil gil;
          if (c.process) {
            // Reaped: the process that ended (its replacement gets a new one). One that closed
            // its socket but runs on is killed first: the join then waits for no one.
            if (c.process.attr("exitcode").is_none()) c.process.attr("kill")();
            c.process.attr("join")(5.0);
            c.process = py::object();
          }
          start(c);
        } catch (...) {
          lock.lock();
          c.busy = false;
          idle_.notify_all();
          throw;
        }
        lock.lock();
      }
      return c;
    }
    if (draining != nullptr && !draining->busy) {
      // Every free process still owes an abandoned answer: wait for one.
      Child& c = *draining;
      c.busy = true;
      lock.unlock();
      drain(c, /*wait=*/true);
      lock.lock();
      c.busy = false;
      continue;
    }
    idle_.wait(lock);
  }
}

void ProcessPool::release(Child& c) {
  // Give-backs that waited for tasks to go with (a slot let go while every process was busy
  // with the epoch's last batches) go to it now, before it idles.
  bool gone = false;
  if (unsent_.load() > 0 && !c.dead && c.fd >= 0) {
    try {
      std::vector<std::byte> out;
      send_discards(c, out);
      gone = !out.empty() && !send_all(c.fd, out.data(), out.size());
    } catch (...) {  // NOLINT(bugprone-empty-catch): no memory: they wait for the next message
    }
  }
  const std::lock_guard<std::mutex> lock(mutex_);
  // Replaced before its next task (its socket, memfd, mapping and regions let go now); its
  // give-backs settle as it ends.
  if (gone || c.failed_start) retire(c);
  c.failed_start = false;
  c.busy = false;
  idle_.notify_all();
}

std::string ProcessPool::ending(Child& c) {
  if (!python_usable()) return "ended";
  const ReaderGil gil;
  try {
    c.process.attr("join")(5.0);
    const py::object code = c.process.attr("exitcode");
    if (code.is_none()) {
      // Its socket closed, yet it runs on (it closed its descriptors, say): it is killed, so
      // that nothing waits for it.
      c.process.attr("kill")();
      c.process.attr("join")(5.0);
      return "closed its socket and stopped answering, and was killed";
    }
    const int n = code.cast<int>();
    if (n < 0) {
      const char* name = ::sigabbrev_np(-n);
      return "was killed by signal " + std::to_string(-n) +
             (name != nullptr ? std::string(" (SIG") + name + ")" : std::string());
    }
    return "exited with code " + std::to_string(n);
  } catch (py::error_already_set&) {
    return "ended";
  }
}

void ProcessPool::lost(Child& c, std::size_t index, const std::string& why, bool reading) {
  const std::string pid = std::to_string(c.pid);
  retire(c);
  release(c);
  throw DataError("Python dataset: worker process " + std::to_string(c.id) + " (pid " + pid + ") " +
                  why + (reading ? " while reading sample " : " before reading sample ") +
                  std::to_string(index) + "; a fresh process takes its place");
}

void ProcessPool::stop() {
  std::unique_lock<std::mutex> lock(mutex_);
  stopping_ = true;
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    static_cast<void>(::write(wake_fd_, &one, sizeof one));
  }
  idle_.notify_all();
  // Reads in flight wake (wake_fd_) and leave; then no thread uses a child.
  const auto busy = [this] {
    return std::any_of(children_.begin(), children_.end(), [](const Child& c) { return c.busy; });
  };
  if (busy()) {
    lock.unlock();
    {
      const ReleaseGil release;
      std::unique_lock<std::mutex> again(mutex_);
      idle_.wait(again, [&] { return !busy(); });
    }
    lock.lock();
  }
  for (Child& c : children_) retire(c);  // their sockets close: idle processes end
  lock.unlock();
  if (!python_usable()) return;
  // A process still in __getitem__ ends when it is done; one that takes longer than a second
  // is killed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (Child& c : children_) {
    if (!c.process) continue;
    try {
      const double left = std::max(
          0.0, std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count());
      c.process.attr("join")(left);
      if (!c.process.attr("exitcode").is_none()) {
        c.process = py::object();
        continue;
      }
      c.process.attr("kill")();
      c.process.attr("join")();
    } catch (py::error_already_set&) {
    }
    c.process = py::object();
  }
}

}  // namespace ferry::python
