// Ctrl-C while a loop waits for data. Python runs its signal handlers on the main thread between
// bytecodes, and the main thread is then inside ferry's next(), with the GIL released. So while
// next() runs, a small C handler sits in front of Python's own for SIGINT: it posts a semaphore
// (async-signal-safe) and calls Python's handler, which marks the signal for later. A watcher
// thread wakes on the semaphore and cancels the epoch being waited on; next() returns, and the
// module runs Python's handler, which raises KeyboardInterrupt.

#include <pthread.h>
#include <semaphore.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

#include "binding.hpp"

namespace ferry::python {

namespace {

sem_t g_wake;
std::once_flag g_started;
std::mutex g_mutex;
Epoch* g_waiting = nullptr;  // guarded by g_mutex
std::atomic<bool> g_interrupted{false};
struct sigaction g_python_handler {};  // Python's, restored when the scope ends
unsigned long g_main_thread = 0;       // Python's main thread (threading.main_thread().ident)

void on_sigint(int signal, siginfo_t* info, void* context) {
  sem_post(&g_wake);
  if ((g_python_handler.sa_flags & SA_SIGINFO) != 0) {
    g_python_handler.sa_sigaction(signal, info, context);
  } else if (g_python_handler.sa_handler != SIG_DFL && g_python_handler.sa_handler != SIG_IGN) {
    g_python_handler.sa_handler(signal);
  }
}

void watch() {
  pthread_setname_np(pthread_self(), "ferry-sigint");
  for (;;) {
    while (sem_wait(&g_wake) != 0) {
    }
    const std::lock_guard<std::mutex> lock(g_mutex);
    if (g_waiting != nullptr) {
      g_interrupted.store(true);
      g_waiting->cancel();
    }
  }
}

}  // namespace

InterruptScope::InterruptScope(Epoch* epoch) {
  if (g_main_thread == 0) {
    g_main_thread =
        py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  }
  if (PyThread_get_thread_ident() != g_main_thread) return;
  std::call_once(g_started, [] {
    sem_init(&g_wake, 0, 0);
    std::thread(watch).detach();
  });
  struct sigaction current {};
  if (sigaction(SIGINT, nullptr, &current) != 0) return;
  const bool handled = (current.sa_flags & SA_SIGINFO) != 0 ||
                       (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
  if (!handled) return;  // Ctrl-C ignored, or left to the system: nothing to chain
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    g_waiting = epoch;
    g_interrupted.store(false);
  }
  active_ = true;
  g_python_handler = current;
  struct sigaction ours {};
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&ours.sa_mask);
  installed_ = sigaction(SIGINT, &ours, nullptr) == 0;
}

InterruptScope::~InterruptScope() {
  if (!active_) return;
  if (installed_) sigaction(SIGINT, &g_python_handler, nullptr);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_waiting = nullptr;
}

bool InterruptScope::interrupted() const noexcept { return active_ && g_interrupted.load(); }

}  // namespace ferry::python
