#include "pipeline/fault.hpp"

#include <atomic>

namespace ferry::detail {

namespace {
std::atomic<FaultHook> fault_hook{nullptr};
}  // namespace

FaultHook set_fault_hook(FaultHook hook) noexcept { return fault_hook.exchange(hook); }

void fault(FaultPoint point, std::uint64_t batch) {
  if (const FaultHook hook = fault_hook.load(std::memory_order_relaxed)) hook(point, batch);
}

}  // namespace ferry::detail
