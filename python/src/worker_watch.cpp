// A worker process's watch of the training process (ferry/_worker.py's _watch): a thread of its
// own that never takes the GIL waits on a pidfd of the training process and ends the worker when
// it ends, however it ends and whatever the worker is doing (a __getitem__ in C code holding the
// GIL too). The thread gives up its share of the process's descriptor table first
// (unshare(CLONE_FILES)) and keeps only the pidfd in its own: a table shared by two threads makes
// each file syscall of a __getitem__ take the shared-table paths (a file's reference counted, its
// position locked), and a PNG opened with PIL took 1 us more of its 20. A dataset that closes
// every descriptor does not close the pidfd either. Not a child process: a __getitem__ that
// reaps children (os.waitpid(-1)) would wait for it, and one re-parented to a trainer that is
// PID 1 would be left a zombie.

#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <future>
#include <system_error>
#include <thread>

#include "binding.hpp"

namespace ferry::python {

namespace {

/// Closes every descriptor of this thread's table but `keep` (-1: all).
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

/// The watch: once the training process `trainer` has ended (its pidfd `fd` readable; where
/// there is none, asking twice a second), ends this process.
[[noreturn]] void watch_trainer(pid_t trainer, int fd) {
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    for (;;) {
      p.revents = 0;
      const int n = ::poll(&p, 1, -1);
      if (n > 0 && (p.revents & POLLIN) != 0) ::_exit(1);
      if ((n > 0 && (p.revents & POLLNVAL) != 0) || (n < 0 && errno != EINTR)) break;
    }
  }
  while (::kill(trainer, 0) == 0 || errno != ESRCH) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ::_exit(1);
}

}  // namespace

void bind_worker_watch(py::module_& m) {
  m.def("_watch_trainer", [](long pid, long parent) {
    // And where `parent` (the forkserver) is given: killed when it exits, stopped or not (the
    // forkserver exits with the training process).
    if (parent > 0) {
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        throw std::system_error(errno, std::generic_category(), "prctl");
      if (::getppid() != static_cast<pid_t>(parent)) return false;  // it went already
    }
    const auto trainer = static_cast<pid_t>(pid);
    const long fd = ::syscall(SYS_pidfd_open, trainer, 0U);
    if (fd < 0 && errno == ESRCH) return false;  // already gone
    std::promise<void> apart;
    std::future<void> unshared = apart.get_future();
    std::thread([trainer, fd, &apart] {
      // A table of its own, holding the pidfd only; the process's table is its main thread's
      // alone again once this thread has let go of it.
      const bool own = ::unshare(CLONE_FILES) == 0;
      if (own) close_all_but(static_cast<int>(fd));
      apart.set_value();
      watch_trainer(trainer, own || fd < 0 ? static_cast<int>(fd) : -1);
    }).detach();
    unshared.wait();
    return true;
  });
}

}  // namespace ferry::python
