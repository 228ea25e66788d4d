#include "pipeline/parallelism.hpp"

#include <oneapi/tbb/global_control.h>

#include <memory>
#include <mutex>

namespace ferry::detail {

namespace {

struct Shared {
  std::mutex mutex;
  std::size_t users = 0;
  std::size_t threads = 0;  // what `control` holds; 0: none
  std::unique_ptr<tbb::global_control> control;
};

Shared& shared() {
  static auto* s = new Shared;  // outlives every loader, static destructors included
  return *s;
}

}  // namespace

ParallelismLease::ParallelismLease(std::size_t threads) {
  Shared& s = shared();
  const std::lock_guard<std::mutex> lock(s.mutex);
  ++s.users;
  const std::size_t now =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  if (threads <= s.threads || (s.threads == 0 && threads <= now)) return;
  try {
    // The new control first, then the old one goes: the bound only ever rises while in use.
    auto raised = std::make_unique<tbb::global_control>(
        tbb::global_control::max_allowed_parallelism, threads);
    s.control = std::move(raised);
    s.threads = threads;
  } catch (...) {
    --s.users;
    throw;
  }
}

ParallelismLease::~ParallelismLease() {
  Shared& s = shared();
  const std::lock_guard<std::mutex> lock(s.mutex);
  if (--s.users == 0) {
    s.control.reset();
    s.threads = 0;
  }
}

}  // namespace ferry::detail
