#pragma once

// The stop of the loader whose reads a thread runs, for a read that waits on something outside
// it (a remote range stalled on its server, a row group another thread fetches or decodes): the
// loader's fill tasks install their run's stop flag around their reads (ReadStopScope), and such a
// wait ends when the flag is set, with ReadStopped. A dataset is shared by every loader over it,
// so its own cancel cannot serve: one loader that stops must not fail another's reads.
// ReadStopped is no DataError: nothing keeps it as a sample's or a row group's failure, and the
// loader that stopped drops it with the rest of its run.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>

namespace ferry::detail {

/// The stop flag installed on this thread; nullptr outside a loader's read.
const std::atomic<bool>* read_stop() noexcept;

/// True when this thread reads for a loader that stops.
inline bool read_stop_requested() noexcept {
  const std::atomic<bool>* stop = read_stop();
  return stop != nullptr && stop->load(std::memory_order_relaxed);
}

/// Installs `stop` as this thread's read stop while it lives (the one before comes back after).
class ReadStopScope {
 public:
  explicit ReadStopScope(const std::atomic<bool>* stop) noexcept;
  ReadStopScope(const ReadStopScope&) = delete;
  ReadStopScope& operator=(const ReadStopScope&) = delete;
  ~ReadStopScope();

 private:
  const std::atomic<bool>* before_;
};

/// A wait given up because the loader whose read it was stops.
class ReadStopped : public std::exception {
 public:
  const char* what() const noexcept override { return "the loader stopped while this read waited"; }
};

/// cv.wait(lock, done), which a loader's read gives up with ReadStopped when its loader stops
/// (looking every 20 ms: a stop does not notify `cv`).
template <class Done>
void wait_unless_stopped(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                         Done done) {
  const std::atomic<bool>* stop = read_stop();
  if (stop == nullptr) {
    cv.wait(lock, done);
    return;
  }
  while (!done()) {
    if (stop->load(std::memory_order_relaxed)) throw ReadStopped();
    cv.wait_for(lock, std::chrono::milliseconds(20));
  }
}

}  // namespace ferry::detail
