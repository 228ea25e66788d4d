// Interpreter exit with threads still in ferry (issue #46, fault 8): daemon threads iterating
// loaders or dropping them, ferry's own threads letting go of Python objects. A thread other
// than the main one that takes the GIL while the interpreter finalizes is ended by Python
// (pthread_exit), whose unwinding through a noexcept frame (a destructor) aborts the process.
// So once the exit hook (ferry's atexit, _stop_all) has begun, such a thread takes the GIL only
// inside a PythonRegion it entered before: the hook waits, the GIL released, until every region
// has ended, and a region refused (exit begun) leaves its Python objects to the interpreter.

#include <chrono>
#include <thread>

#include "binding.hpp"

namespace ferry::python {

namespace {
std::atomic<bool> g_exit_begun{false};
std::atomic<int> g_regions{0};  // PythonRegions entered on any thread, not yet ended
thread_local int t_depth = 0;   // PythonRegions this thread is inside

bool interpreter_running() noexcept {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() != 0 && Py_IsFinalizing() == 0;
#else
  return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0;
#endif
}
}  // namespace

bool exit_begun_here() noexcept { return g_exit_begun.load() && t_depth == 0 && !is_main_thread(); }

PythonRegion::PythonRegion() noexcept {
  // Counted before the flag is read (both sequentially consistent): either begin_exit() sees
  // this region and waits for it, or this sees the flag and stays out.
  g_regions.fetch_add(1);
  entered_ = interpreter_running() && (t_depth > 0 || !g_exit_begun.load() || is_main_thread());
  if (!entered_) {
    g_regions.fetch_sub(1);
    return;
  }
  ++t_depth;
}

PythonRegion::~PythonRegion() {
  if (!entered_) return;
  --t_depth;
  g_regions.fetch_sub(1);
}

GilIfUsable::GilIfUsable() noexcept : held_(region_.entered()) {
  if (held_) state_ = PyGILState_Ensure();
}

GilIfUsable::~GilIfUsable() {
  if (held_) PyGILState_Release(state_);
}

void begin_exit() {
  g_exit_begun.store(true);
  // This thread's own region (the hook's caller may be inside one) is not waited for.
  if (g_regions.load() <= t_depth) return;
  const ReleaseGil release;  // the threads in a region take the GIL, and finish
  while (g_regions.load() > t_depth) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void exit_forgotten() noexcept {
  g_exit_begun.store(false);
  // In a child of fork() only the forking thread exists: the regions the parent's other threads
  // were inside will never end here, and begin_exit() must not wait for them.
  g_regions.store(t_depth);
}

}  // namespace ferry::python
