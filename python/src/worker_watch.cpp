// A worker process's watch of the training process (ferry/_worker.py's _watch): a child process
// of the worker's own, forked before the dataset is unpickled, waits on a pidfd of the training
// process and kills the worker when it ends, however it ends and whatever the worker is doing (a
// __getitem__ in C code holding the GIL, stopped by SIGSTOP). Not a thread: a second thread in
// the worker makes every file syscall of its __getitem__ take the shared-table paths (a file's
// reference counted, its position locked), and a PNG opened with PIL took 1 µs more of its 20.

#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <ctime>
#include <system_error>

#include "binding.hpp"

namespace ferry::python {

namespace {

/// Closes every descriptor but `keep` (-1: all), in the watch: it holds none of the worker's (its
/// socket's end, which the training process reads to its EOF when the worker ends).
void close_all_but(int keep) noexcept {
#if defined(SYS_close_range)
  const auto close_range = [](unsigned first, unsigned last) {
    return ::syscall(SYS_close_range, first, last, 0U) == 0;
  };
  const bool closed = keep < 0 ? close_range(0, ~0U)
                               : (keep == 0 || close_range(0, static_cast<unsigned>(keep) - 1)) &&
                                     close_range(static_cast<unsigned>(keep) + 1, ~0U);
  if (closed) return;
#endif
  const long most = ::sysconf(_SC_OPEN_MAX);
  for (int fd = 0; fd < (most > 0 ? most : 1024); ++fd) {
    if (fd != keep) ::close(fd);
  }
}

/// The watch, in the child of a fork: async-signal-safe calls only. Waits until the training
/// process `trainer` has ended (its pidfd `fd` readable; where there is none, asking twice a
/// second), then kills `worker` and exits. Dies with the worker (PR_SET_PDEATHSIG: the worker's
/// only thread forked it).
[[noreturn]] void watch(pid_t trainer, int fd, pid_t worker) noexcept {
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != worker) ::_exit(0);
  static_cast<void>(::prctl(PR_SET_NAME, "ferry-watch", 0, 0, 0));
  close_all_but(fd);
  bool ended = false;
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
      const int n = ::poll(&p, 1, -1);
      if (n > 0) {
        ended = (p.revents & POLLIN) != 0;
        break;
      }
      if (n < 0 && errno != EINTR) break;
    }
  }
  while (!ended && (::kill(trainer, 0) == 0 || errno != ESRCH)) {
    timespec half{0, 500'000'000};
    while (::nanosleep(&half, &half) != 0 && errno == EINTR) {
    }
  }
  ::kill(worker, SIGKILL);
  ::_exit(0);
}

}  // namespace

void bind_worker_watch(py::module_& m) {
  m.def("_watch_trainer", [](long pid, long parent) {
    // Where `parent` (the forkserver) is given, the worker is also killed when it exits (the
    // forkserver exits with the training process): a stopped watch, or one killed, still
    // leaves nothing behind.
    if (parent > 0) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        throw std::system_error(errno, std::generic_category(), "prctl");
      if (::getppid() != static_cast<pid_t>(parent)) return false;  // it went already
    }
    const auto trainer = static_cast<pid_t>(pid);
    const long fd = ::syscall(SYS_pidfd_open, trainer, 0U);
    if (fd < 0 && errno == ESRCH) return false;  // already gone
    const pid_t worker = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) watch(trainer, static_cast<int>(fd), worker);
    const int error = errno;
    if (fd >= 0) ::close(static_cast<int>(fd));
    if (child < 0) throw std::system_error(error, std::generic_category(), "fork (the watch)");
    return true;
  });
}

}  // namespace ferry::python
