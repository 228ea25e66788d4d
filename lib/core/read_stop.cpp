#include "core/read_stop.hpp"

namespace ferry::detail {

namespace {
thread_local const std::atomic<bool>* t_read_stop = nullptr;
}  // namespace

const std::atomic<bool>* read_stop() noexcept { return t_read_stop; }

ReadStopScope::ReadStopScope(const std::atomic<bool>* stop) noexcept : before_(t_read_stop) {
  t_read_stop = stop;
}

ReadStopScope::~ReadStopScope() { t_read_stop = before_; }

}  // namespace ferry::detail
