#pragma once

// The copy stage: turns filled slots, in batch order, into batches ready for the consumer.
// Without a device to copy to it is the identity (the consumer gets the slot itself, zero
// copy); with one, a copy thread moves each slot into a device buffer and runs the fields'
// operations there. Either way the consumer has one path: take().

#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "pipeline/loader_impl.hpp"

namespace ferry::detail {

/// A batch ready for the consumer, in the buffer it is delivered from.
struct ReadyBatch {
  std::uint32_t id = 0;  ///< its slot, or its device buffer (device == true)
  bool device = false;
  std::byte* base = nullptr;
  Device where = Device::cpu();
  bool pinned = false;
  Event ready;  ///< the work that writes the buffer (copy stage)
  const std::vector<std::uint64_t>* indices = nullptr;
  const BatchRows* rows = nullptr;  ///< where ragged fields' samples lie
  std::exception_ptr error;         ///< the batch failed
};

class CopyStage {
 public:
  CopyStage() = default;
  CopyStage(const CopyStage&) = delete;
  CopyStage& operator=(const CopyStage&) = delete;
  virtual ~CopyStage() = default;
  /// Starts the stage's thread, if it has one. \throws std::system_error when it cannot.
  virtual void start() {}
  /// Joins the stage's thread after the run was asked to stop.
  virtual void join() noexcept {}
  /// The next batch in order, waiting for it until `deadline` (time_point::max(): as long as it
  /// takes); nothing when the run stops or failed first, or, with `timed_out` set, when the
  /// deadline passed first (nothing is lost: call again).
  virtual std::optional<ReadyBatch> take(Clock::time_point deadline, bool& timed_out) = 0;
  /// Returns every batch not taken to the ring (after join()).
  virtual void drain() noexcept = 0;
};

/// The stage that fits the loader: identity without a copy engine, else the copy thread.
std::unique_ptr<CopyStage> make_copy_stage(RunState& run);

}  // namespace ferry::detail
