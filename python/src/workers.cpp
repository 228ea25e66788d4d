// Worker processes for a Python dataset: the parent's side (ferry/_worker.py is the child's).

#include "workers.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "py_dataset.hpp"

namespace ferry::python {

namespace {

constexpr std::size_t kAlign = 64;
constexpr std::size_t kMinScratch = 1U << 20U;
// A dataset's pickle (its large numpy arrays not in it) kept for the replacement of a worker
// process when no larger.
constexpr std::size_t kKeptPickle = std::size_t{16} << 20U;
constexpr int kSliceMs = 100;
// The control region: a state word (TaskState) per give-back of a slot's pages in flight.
constexpr std::size_t kControlWords = 64;  // a bit each in ProcessPool::words_used_
constexpr std::size_t kControlBytes = 4096;
static_assert(kControlWords == 64 && kControlWords * sizeof(std::uint64_t) <= kControlBytes);
constexpr std::size_t kReadBytes = 1U << 16U;     // what one read of a socket may take
constexpr std::uint32_t kMaxMessage = 1U << 30U;  // a longer message is a broken process
std::atomic<std::uint64_t> g_pool_ids{0};         // ProcessPool::id_

std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

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

/// Whole message, or false when the other side is gone.
bool send_all(int fd, const std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (unsigned i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8U * i)));
}

std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8U) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

/// Whether process `pid` still runs (not ended, nor a zombie): a process that has ended can no
/// longer write into shared memory.
bool running(long pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return false;
  char text[512];
  const std::size_t n = std::fread(text, 1, sizeof text - 1, f);
  std::fclose(f);
  text[n] = 0;
  const char* end = std::strrchr(text, ')');  // the name may hold anything; the state follows
  return end != nullptr && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X' && end[2] != 0;
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  while (t.size() > 1 && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t + " s";
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
                     options_.seed_python, init, bytes, close_fds, control_fd_);
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

bool ProcessPool::drain(Child& c, bool wait) {
  while (c.stale > 0) {
    if (next_message(c)) {
      --c.stale;
      continue;
    }
    pollfd fd{c.fd, POLLIN, 0};
    const int ready = ::poll(&fd, 1, wait ? kSliceMs : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (!wait || stopping()) return false;
      continue;
    }
    if (ready < 0 || !take_in(c)) {  // it ended meanwhile: replaced before its next task
      retire(c);
      return true;
    }
  }
  return true;
}

bool ProcessPool::take_in(Child& c) {
  if (c.in_at == c.in_end) {
    c.in_at = c.in_end = 0;
  } else if (c.in_at > 0 && c.in.size() - c.in_end < kReadBytes / 4) {
    std::memmove(c.in.data(), c.in.data() + c.in_at, c.in_end - c.in_at);
    c.in_end -= c.in_at;
    c.in_at = 0;
  }
  if (c.in.size() - c.in_end < kReadBytes / 4) c.in.resize(std::max(2 * c.in.size(), kReadBytes));
  for (;;) {
    const ssize_t k = ::read(c.fd, c.in.data() + c.in_end, c.in.size() - c.in_end);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c.in_end += static_cast<std::size_t>(k);
    return true;
  }
}

bool ProcessPool::next_message(Child& c) {
  if (c.in_end - c.in_at < 4) return false;
  std::uint32_t size = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    size = (size << 8U) | std::to_integer<std::uint32_t>(c.in[c.in_at + i]);
  }
  if (c.in_end - c.in_at - 4 < size) return false;
  const auto* at = c.in.data() + c.in_at + 4;
  c.taken.assign(at, at + size);
  c.in_at += 4 + std::size_t{size};
  return true;
}

bool ProcessPool::ended(const Child& c) noexcept {
  if (c.fd < 0) return true;
  pollfd fd{c.fd, 0, 0};
  return ::poll(&fd, 1, 0) > 0 && (fd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
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
  if (gone) retire(c);
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

const std::vector<std::byte>& ProcessPool::receive(Child& c, std::size_t index, bool answer,
                                                   int also_stale, DoneMark done) {
  auto begin = std::chrono::steady_clock::now();
  bool timed = answer && options_.timeout > 0;
  bool initializing = false;  // in its worker_init_fn: that has the timeout's time too
  for (;;) {
    if (abandoned_.load()) {
      // Its epoch was left: an answer still to come is discarded when it comes, and its sample
      // is not written (nor those of the tasks behind it).
      if (answer) cancel_in_flight(c, done);
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (answer) c.stale += 1 + also_stale;
      }
      release(c);
      throw Error("Python dataset: the read of sample " + std::to_string(index) +
                  " was abandoned (its epoch was left)");
    }
    if (next_message(c)) {
      if (c.taken.empty()) lost(c, index, "sent an empty message");
      if (!answer && c.taken.size() == 1 && c.taken[0] == std::byte{'I'}) {
        // Its dataset unpickled, it runs worker_init_fn now.
        initializing = true;
        timed = options_.timeout > 0;
        begin = std::chrono::steady_clock::now();
        continue;
      }
      return c.taken;
    }
    if (c.in_end - c.in_at >= 4) {
      std::uint32_t size = 0;
      for (std::size_t i = 0; i < 4; ++i) {
        size = (size << 8U) | std::to_integer<std::uint32_t>(c.in[c.in_at + i]);
      }
      if (size > kMaxMessage)
        lost(c, index, "sent a message of " + std::to_string(size) + " bytes");
    }
    std::array<pollfd, 2> fds{pollfd{c.fd, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    int slice = kSliceMs;
    if (timed) {
      const double left =
          options_.timeout -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      if (left <= 0) {
        ::kill(static_cast<pid_t>(c.pid), SIGKILL);
        const std::string how = ending(c);
        if (initializing) {
          const std::lock_guard<std::mutex> lock(mutex_);
          init_overran_ = "Python dataset: the worker_init_fn of worker process " +
                          std::to_string(c.id) + " (pid " + std::to_string(c.pid) +
                          ") overran timeout=" + seconds_text(options_.timeout) +
                          "; no process starts again until the next epoch";
        }
        lost(c, index,
             "overran timeout=" + seconds_text(options_.timeout) +
                 (initializing ? " in its worker_init_fn" : "") + " and " +
                 (how.rfind("was killed", 0) == 0 ? "was killed" : how),
             /*reading=*/!initializing);
      }
      slice = std::min(slice, static_cast<int>(left * 1000) + 1);
    }
    const int ready = ::poll(fds.data(), fds.size(), slice);
    if (ready < 0 && errno != EINTR) lost(c, index, std::string("poll: ") + std::strerror(errno));
    if (fds[1].revents != 0) {
      if (answer) cancel_in_flight(c, done);
      release(c);
      throw Error("Python dataset: the loader's worker processes are stopping");
    }
    if (ready > 0 && fds[0].revents != 0 && !take_in(c)) {
      // It ended. The samples it did before, their answers not sent yet (it answers in
      // groups), are whole, their tasks marked done: taken as answered. The first not done is
      // the one it ended on.
      if (answer && done.token != 0 && done.at + sizeof(std::uint64_t) <= c.map_size &&
          TaskState(c.map + done.at, done.token).code() == TaskState::Code::done) {
        c.taken.assign(1, std::byte{0});
        return c.taken;
      }
      lost(c, index, ending(c));
    }
  }
}

namespace {

/// A share of a batch this thread reads through one process, its tasks sent ahead
/// (ProcessPool::begin_reads): the tasks (index, seed, each field's bytes and place), which have
/// been sent and read, and where each lands. Kept by the thread (cleared, not freed) from one
/// share to the next, so that a share costs no allocation.
struct Range {
  std::uint64_t pool = 0;  // the pool's id_; 0: none
  void* child = nullptr;   // its Child
  std::size_t fields = 0;
  std::vector<std::size_t> indices;
  std::vector<std::uint64_t> seeds;
  std::vector<std::size_t> nbytes;   // `fields` a task
  std::vector<std::size_t> offsets;  // `fields` a task: their places in `region` (direct)
  std::uint64_t region = 0;          // the staging region the process writes into; 0: its memfd
  std::uintptr_t region_base = 0;    // its first byte here
  std::size_t next_read = 0;
  std::size_t next_send = 0;
  std::size_t window = 0;      // tasks in flight at most, each with its own part of the memfd
  std::size_t slot_bytes = 0;  // the size of such a part: its state word's line, then the fields
  std::size_t group = 1;       // the process answers this many samples together
  std::uint64_t token = 0;     // task n's token is token + n

  std::span<const std::size_t> bytes_of(std::size_t t) const {
    return {nbytes.data() + t * fields, fields};
  }
  /// Where task t's state word lies in the memfd (its fields follow it, when they go there).
  std::size_t state_at(std::size_t t) const noexcept { return (t % window) * slot_bytes; }
  void clear() noexcept {
    pool = 0;
    child = nullptr;
    indices.clear();
    seeds.clear();
    nbytes.clear();
    offsets.clear();
    region = 0;
    region_base = 0;
    next_read = next_send = window = slot_bytes = 0;
    group = 1;
  }
};
thread_local Range t_range;
thread_local std::vector<std::byte> t_out;        // tasks on their way, several in one write
thread_local std::vector<std::size_t> t_nbytes;   // a read one by one: its fields' bytes
thread_local std::vector<std::size_t> t_offsets;  // a task's fields' places
// Tasks in flight per process: as many as fit in kWindowBytes, within [kWindowMin, kWindowMax].
// 4 MiB: 27 tasks of a 224 x 224 RGB image, answered 13 at a time (with 1 MiB: 6, 3 at a time,
// and the training process woke for every third sample). Samples written straight into a staging
// slot take only their state word's line of the memfd: up to kWindowDirect tasks then.
constexpr std::size_t kWindowMin = 4;
constexpr std::size_t kWindowMax = 32;
constexpr std::size_t kWindowDirect = 64;
constexpr std::size_t kWindowBytes = 4U << 20U;

std::size_t total_of(std::span<const std::size_t> nbytes) {
  std::size_t total = 0;
  for (const std::size_t n : nbytes) total += aligned(n);
  return total;
}

/// The places of a task's fields in its memfd: from `base`, each at a 64-byte aligned offset.
std::span<const std::size_t> scratch_places(std::size_t base, std::span<const std::size_t> nbytes) {
  t_offsets.clear();
  for (const std::size_t n : nbytes) {
    t_offsets.push_back(base);
    base += aligned(n);
  }
  return t_offsets;
}

/// The places of `out`'s fields in one staging region, appended to `offsets`, or false where one
/// is not in it. `region` and `base` (its first byte) are looked up at the first place
/// (shared_region(), under a lock) and kept for the next samples of a share, which lie in the
/// same slot.
bool direct_places(SampleRef out, std::size_t fields, SharedRegion& region, std::uintptr_t& base,
                   std::vector<std::size_t>& offsets) {
  for (std::size_t f = 0; f < fields; ++f) {
    const std::size_t n = out.nbytes(f);
    if (n == 0) {
      offsets.push_back(0);
      continue;
    }
    const auto p = reinterpret_cast<std::uintptr_t>(out.data(f));
    if (region.id == 0) {
      if (!shared_region(out.data(f), n, region)) return false;
      base = p - region.offset;
    }
    if (p < base || p - base > region.size || n > region.size - (p - base)) return false;
    offsets.push_back(p - base);
  }
  return region.id != 0;
}

/// A task message (Connection framing) at the end of `out`: see ferry/_worker.py.
void append_task(std::vector<std::byte>& out, std::size_t index, std::uint64_t seed,
                 std::size_t map_size, std::size_t state_at, std::size_t group, std::uint64_t token,
                 std::uint64_t region, std::span<const std::size_t> nbytes,
                 std::span<const std::size_t> offsets) {
  const std::size_t at = out.size();
  out.resize(at + 4);
  put_u64(out, index);
  put_u64(out, seed);
  put_u64(out, map_size);
  put_u64(out, state_at);
  put_u64(out, group);
  put_u64(out, token);
  put_u64(out, region);
  for (std::size_t f = 0; f < nbytes.size(); ++f) {
    put_u64(out, nbytes[f]);
    put_u64(out, offsets[f]);
  }
  const auto n = static_cast<std::uint32_t>(out.size() - at - 4);
  for (unsigned i = 0; i < 4; ++i) out[at + i] = static_cast<std::byte>(n >> (8U * (3 - i)));
}

/// A message of `payload` (Connection framing) with descriptor `fd` attached (SCM_RIGHTS), or
/// without one where fd < 0. False when the other side is gone.
bool send_message(int socket, std::span<const std::byte> payload, int fd) {
  std::vector<std::byte> frame(4 + payload.size());
  const auto n = static_cast<std::uint32_t>(payload.size());
  for (unsigned i = 0; i < 4; ++i) frame[i] = static_cast<std::byte>(n >> (8U * (3 - i)));
  std::copy(payload.begin(), payload.end(), frame.begin() + 4);
  if (fd < 0) return send_all(socket, frame.data(), frame.size());
  iovec io{frame.data(), frame.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> control{};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  for (;;) {
    const ssize_t k = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    // The descriptor went with the first byte; the rest (if any) goes plainly.
    const auto sent = static_cast<std::size_t>(k);
    return sent == frame.size() || send_all(socket, frame.data() + sent, frame.size() - sent);
  }
}

}  // namespace

std::uint64_t ProcessPool::memory_bound(std::uint64_t sample_bytes) const noexcept {
  // A task's part: its state word's line, then each field from a line of its own.
  const std::uint64_t part = kAlign * (1 + field_count_) + sample_bytes;
  // A window of tasks fills at most kWindowBytes, or kWindowMin parts where those are more; a
  // read one by one grows the region to under two parts.
  const std::uint64_t each =
      std::max<std::uint64_t>({kMinScratch, kWindowBytes, kWindowMin * part});
  return each * static_cast<std::uint64_t>(options_.count);
}

bool ProcessPool::map_region(Child& c, const SharedRegion& region) {
  const std::uint64_t freed = shared_regions_freed();
  if (freed != c.freed_seen) {
    c.freed_seen = freed;
    for (std::size_t i = 0; i < c.regions.size();) {
      if (shared_region_live(c.regions[i])) {
        ++i;
        continue;
      }
      std::vector<std::byte> drop;  // <Q id>: let it go
      put_u64(drop, c.regions[i]);
      if (!send_message(c.fd, drop, -1)) return false;
      c.regions.erase(c.regions.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  if (std::find(c.regions.begin(), c.regions.end(), region.id) != c.regions.end()) return true;
  std::vector<std::byte> map;  // <QQ id, size>, its memfd attached: map it
  put_u64(map, region.id);
  put_u64(map, region.size);
  if (!send_message(c.fd, map, region.fd)) return false;
  c.regions.push_back(region.id);
  return true;
}

void ProcessPool::released(std::span<std::byte> slot) noexcept {
  if (control_ == nullptr) return;
  SharedRegion region;
  // A slot is a SharedBuffer of its own: its pages go from the first byte to the last.
  if (!shared_region(slot.data(), slot.size(), region) || region.offset != 0) return;
  if (queue_discard(region.id)) send_to_idle(region.id);
}

void ProcessPool::send_to_idle(std::uint64_t region) noexcept {
  // A give-back goes with the next tasks sent to a process that maps the region; where none is
  // being sent tasks (the epoch's last batches, or between epochs), an idle one takes it now.
  Child* idle = nullptr;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    for (Child& c : children_) {
      if (c.busy || c.dead || !c.ready || c.stale > 0 ||
          std::find(c.regions.begin(), c.regions.end(), region) == c.regions.end()) {
        continue;
      }
      c.busy = true;
      idle = &c;
      break;
    }
  }
  if (idle != nullptr) release(*idle);  // which sends it the give-backs waiting
}

bool ProcessPool::queue_discard(std::uint64_t region) noexcept {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return false;
  try {
    // Those of regions freed since (a loader gone, autotune's slots given back) go first.
    std::erase_if(discards_, [this](const Discard& d) {
      if (shared_region_live(d.region)) return false;
      if (!d.sent) {
        unsent_.fetch_sub(1);
        return true;
      }
      if (!settle(d, /*wait=*/false)) return false;
      free_word(d);
      return true;
    });
    for (const Discard& d : discards_) {
      if (d.region == region) return !d.sent;
    }
    discards_.push_back(Discard{region});
    unsent_.fetch_add(1);
    return true;
  } catch (...) {  // no memory: the slot keeps its pages
    return false;
  }
}

void ProcessPool::reused(std::span<std::byte> slot) noexcept {
  if (control_ == nullptr) return;
  SharedRegion region;
  if (!shared_region(slot.data(), slot.size(), region)) return;
  Discard d;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(discards_.begin(), discards_.end(),
                                 [&](const Discard& e) { return e.region == region.id; });
    if (it == discards_.end()) return;
    d = *it;
    discards_.erase(it);
    if (!d.sent) {
      unsent_.fetch_sub(1);
      return;
    }
  }
  settle(d, /*wait=*/true);
  const std::lock_guard<std::mutex> lock(mutex_);
  free_word(d);
}

bool ProcessPool::settle(const Discard& d, bool wait) noexcept {
  TaskState state(control_ + d.word, d.token);
  // Being done: that takes the time of freeing a slot's pages, unless the process ends first.
  while (state.cancel() == TaskState::Code::writing) {
    if (!running(d.pid)) return true;
    if (!wait) return false;
    ::usleep(100);
  }
  return true;
}

void ProcessPool::send_discards(Child& c, std::vector<std::byte>& out) noexcept {
  if (unsent_.load() == 0) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  try {
    for (Discard& d : discards_) {
      if (d.sent || words_used_ == ~std::uint64_t{0} ||
          std::find(c.regions.begin(), c.regions.end(), d.region) == c.regions.end()) {
        continue;
      }
      const auto word = static_cast<std::size_t>(std::countr_one(words_used_));
      // <QQQ region, its word's place, token>: give the region's pages back. Room first, so
      // that the message goes whole or not at all.
      out.reserve(out.size() + 4 + 3 * sizeof(std::uint64_t));
      out.insert(out.end(), {std::byte{0}, std::byte{0}, std::byte{0}, std::byte{24}});
      put_u64(out, d.region);
      put_u64(out, word * sizeof(std::uint64_t));
      put_u64(out, discard_token_);
      words_used_ |= std::uint64_t{1} << word;
      d.sent = true;
      d.pid = c.pid;
      d.word = word * sizeof(std::uint64_t);
      d.token = discard_token_++;
      TaskState(control_ + d.word, d.token).open();
      unsent_.fetch_sub(1);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory: they wait for the next message
  }
}

void ProcessPool::cancel(Child& c, std::size_t at, std::uint64_t token) noexcept {
  if (c.map == nullptr || at + sizeof(std::uint64_t) > c.map_size) return;
  TaskState state(c.map + at, token);
  // Being written: that takes the time of copying a sample, unless the process ends first.
  while (state.cancel() == TaskState::Code::writing) {
    pollfd fd{c.fd, 0, 0};
    if (::poll(&fd, 1, 1) > 0 && (fd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return;
  }
}

void ProcessPool::cancel_in_flight(Child& c, DoneMark awaited) noexcept {
  const Range& r = t_range;
  if (r.pool == id_ && r.child == &c) {
    for (std::size_t n = r.next_read; n < r.next_send; ++n) cancel(c, r.state_at(n), r.token + n);
    return;
  }
  if (awaited.token != 0) cancel(c, awaited.at, awaited.token);
}

void ProcessPool::deliver(const PyDataset& dataset, const Child& c, std::size_t index,
                          const std::vector<std::byte>& answer, std::size_t base, bool direct,
                          SampleRef out) {
  const std::size_t size = answer.size();
  if (answer[0] == std::byte{0}) {
    if (direct) return;  // the process wrote the sample into its place in the slot
    // Each field at a 64-byte aligned offset from `base`, as the task said.
    for (std::size_t f = 0; f < field_count_; ++f) {
      const std::size_t n = out.nbytes(f);
      if (n != 0) std::memcpy(out.data(f), c.map + base, n);
      base += aligned(n);
    }
    return;
  }
  // A failure: its text, its traceback's text, the exception pickled.
  const std::size_t head = 1 + 8;
  const std::uint32_t text_size = size >= head ? get_u32(answer.data() + 1) : 0;
  const std::uint32_t trace_size = size >= head ? get_u32(answer.data() + 5) : 0;
  if (size < head || size - head < static_cast<std::size_t>(text_size) + trace_size) {
    throw DataError("Python dataset: worker process " + std::to_string(c.id) +
                    " gave a malformed answer for sample " + std::to_string(index));
  }
  const auto* p = reinterpret_cast<const char*>(answer.data() + head);
  std::string text(p, text_size);
  std::string trace(p + text_size, trace_size);
  std::string pickled(p + text_size + trace_size, size - head - text_size - trace_size);
  if (!pickled.empty()) dataset.keep_remote_failure(index, std::move(pickled), std::move(trace));
  throw DataError("Python dataset: " + text);
}

void ProcessPool::begin_reads(std::span<const std::size_t> indices,
                              std::span<const SampleRef> out) noexcept {
  end_reads();
  if (indices.size() < 2 || abandoned_.load()) return;
  Child* c = nullptr;
  try {
    c = &acquire();
  } catch (...) {
    return;  // stopping, or no process could start: the reads go one by one, and say why
  }
  bool held = true;  // receive() lets c go when it throws
  Range& r = t_range;
  try {
    if (!c->ready) {
      held = false;
      static_cast<void>(receive(*c, indices[0], /*answer=*/false, 0));
      held = true;
      c->ready = true;
    }
    r.fields = field_count_;
    r.indices.assign(indices.begin(), indices.end());
    r.seeds.resize(indices.size());
    r.nbytes.resize(indices.size() * field_count_);
    // Straight into the slot where every sample's fields lie in one staging region.
    SharedRegion region;
    bool direct = true;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      r.seeds[i] = out[i].seed();
      for (std::size_t f = 0; f < field_count_; ++f) {
        r.nbytes[i * field_count_ + f] = out[i].nbytes(f);
      }
      direct = direct && direct_places(out[i], field_count_, region, r.region_base, r.offsets);
      r.slot_bytes = std::max(r.slot_bytes, kAlign + total_of(r.bytes_of(i)));
    }
    if (direct && map_region(*c, region)) {
      r.region = region.id;
      r.slot_bytes = kAlign;
    } else {
      r.offsets.clear();
    }
    r.window = std::min(indices.size(),
                        std::clamp(kWindowBytes / std::max<std::size_t>(r.slot_bytes, 1),
                                   kWindowMin, r.region != 0 ? kWindowDirect : kWindowMax));
    // Answers in groups of half the window (the tasks that then go fill the half their samples
    // freed): one write, and here one read, for a group. One by one where a timeout is set: a
    // sample's timeout counts its own time only.
    r.group = options_.timeout > 0 ? 1 : std::max<std::size_t>(1, r.window / 2);
    if (r.window * r.slot_bytes > c->map_size) grow(*c, r.window * r.slot_bytes);
    r.token = c->tokens;
    c->tokens += indices.size();
    r.pool = id_;
    r.child = c;
  } catch (...) {
    if (held) release(*c);
    r.clear();
    return;
  }
  send_next(*c);
}

void ProcessPool::end_reads() noexcept {
  Range& r = t_range;
  if (r.pool != id_) return;
  if (r.child != nullptr) {
    auto& c = *static_cast<Child*>(r.child);
    cancel_in_flight(c, {});  // their samples are read again elsewhere, or not at all
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      c.stale += static_cast<int>(r.next_send - r.next_read);  // answered, then discarded
      c.busy = false;
    }
    idle_.notify_all();
  }
  r.clear();
}

bool ProcessPool::read_ahead(const PyDataset& dataset, std::size_t index, SampleRef out) {
  Range& r = t_range;
  if (r.pool != id_) return false;
  const std::size_t at = r.next_read;
  bool announced = at < r.indices.size() && r.indices[at] == index && r.seeds[at] == out.seed();
  for (std::size_t f = 0; announced && f < field_count_; ++f) {
    announced = r.nbytes[at * field_count_ + f] == out.nbytes(f);
  }
  for (std::size_t f = 0; announced && r.region != 0 && f < field_count_; ++f) {
    // and the places announced
    announced = out.nbytes(f) == 0 || reinterpret_cast<std::uintptr_t>(out.data(f)) ==
                                          r.region_base + r.offsets[at * field_count_ + f];
  }
  if (!announced) {
    end_reads();  // not the order announced: one by one from here
    return false;
  }
  if (at >= r.next_send) {  // a task that could not be sent: one by one from here
    end_reads();
    return false;
  }
  auto& c = *static_cast<Child*>(r.child);
  const std::size_t state_at = r.state_at(at);
  const bool direct = r.region != 0;
  const std::vector<std::byte>* answer = nullptr;
  try {
    answer = &receive(c, index, /*answer=*/true, static_cast<int>(r.next_send - at - 1),
                      {state_at, r.token + at});
  } catch (...) {
    // It ended (died, or overran the timeout: lost() retired and released it), or the read was
    // abandoned or the pool stops (its tasks cancelled, c released, its answers counted stale).
    // The tasks queued behind this one had not started: their reads go one by one, to another
    // process.
    r.clear();
    throw;
  }
  ++r.next_read;
  const bool last = r.next_read == r.indices.size();
  try {
    deliver(dataset, c, index, *answer, state_at + kAlign, direct, out);
  } catch (...) {
    send_next(c);
    if (last) end_reads();
    throw;
  }
  send_next(c);
  if (last) end_reads();
  return true;
}

void ProcessPool::send_next(Child& c) noexcept {
  Range& r = t_range;
  // Tasks go when half the window is free, together: one write (and, on the other side, one
  // read) for several samples.
  if (r.next_send >= r.indices.size() || r.next_send - r.next_read > r.window / 2) return;
  t_out.clear();
  send_discards(c, t_out);  // before the tasks: the process gives the pages back first
  std::size_t n = r.next_send;
  try {
    for (; n < r.indices.size() && n - r.next_read < r.window; ++n) {
      const std::size_t state_at = r.state_at(n);
      const std::span<const std::size_t> places =
          r.region != 0 ? std::span<const std::size_t>(r.offsets.data() + n * r.fields, r.fields)
                        : scratch_places(state_at + kAlign, r.bytes_of(n));
      TaskState(c.map + state_at, r.token + n).open();
      append_task(t_out, r.indices[n], r.seeds[n], c.map_size, state_at, r.group, r.token + n,
                  r.region, r.bytes_of(n), places);
    }
  } catch (...) {  // no memory for the message: the reads go one by one from here
    return;
  }
  if (send_all(c.fd, t_out.data(), t_out.size())) r.next_send = n;
}

void ProcessPool::read(const PyDataset& dataset, std::size_t index, SampleRef out) {
  const std::size_t fields = dataset.layout().fields().size();
  if (abandoned_.load()) {
    end_reads();
    throw Error("Python dataset: the read of sample " + std::to_string(index) +
                " was abandoned (its epoch was left)");
  }
  if (read_ahead(dataset, index, out)) return;
  Child& c = acquire();
  std::vector<std::size_t>& nbytes = t_nbytes;
  nbytes.clear();
  for (std::size_t f = 0; f < fields; ++f) nbytes.push_back(out.nbytes(f));
  const std::size_t total = kAlign + total_of(nbytes);
  SharedRegion region;
  bool direct = false;
  try {
    t_offsets.clear();
    std::uintptr_t base = 0;
    direct = direct_places(out, fields, region, base, t_offsets) && map_region(c, region);
    if (!direct && total > c.map_size) grow(c, std::max(total, 2 * c.map_size));
  } catch (...) {
    release(c);
    throw;
  }
  if (!c.ready) {
    // Its first task waits until it has started: the imports and unpickling without a limit
    // (they take what they take on a busy machine), its worker_init_fn within the timeout.
    static_cast<void>(receive(c, index, /*answer=*/false, 0));
    c.ready = true;
  }
  const std::uint64_t token = c.tokens++;
  TaskState(c.map, token).open();
  t_out.clear();
  send_discards(c, t_out);
  append_task(t_out, index, out.seed(), c.map_size, 0, /*group=*/1, token, direct ? region.id : 0,
              nbytes,
              direct ? std::span<const std::size_t>(t_offsets) : scratch_places(kAlign, nbytes));
  if (!send_all(c.fd, t_out.data(), t_out.size())) lost(c, index, ending(c));
  const std::vector<std::byte>& answer = receive(c, index, /*answer=*/true, 0, {0, token});
  try {
    deliver(dataset, c, index, answer, kAlign, direct, out);  // from c's memfd: c held
  } catch (...) {
    release(c);
    throw;
  }
  release(c);
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
