#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/event.hpp"
#include "ferry/memory.hpp"

namespace ferry::detail {

/// Where each field of a batch lies in a staging slot (and in a device buffer, which has the
/// same layout): field f's samples are contiguous from offsets[f], each sample_bytes[f] long.
/// Fields start at 256-byte boundaries, as CUDA allocations do.
struct SlotLayout {
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> sample_bytes;
  std::size_t capacity = 0;  ///< samples per batch
  std::size_t bytes = 0;     ///< the whole slot

  static constexpr std::size_t kAlignment = 256;
  SlotLayout(const std::vector<FieldSpec>& fields, std::size_t batch_size);
  /// Bytes to copy for a batch of `count` samples: up to the end of the last field's samples.
  std::size_t used_bytes(std::size_t count) const noexcept;
};

/// A counter to wait on without spinning: whoever changes something a waiter may want calls
/// notify(). A waiter reads version(), checks its condition, and only then wait(version), so no
/// wake-up is lost.
class Signal {
 public:
  std::uint32_t version() const noexcept { return value_.load(std::memory_order_acquire); }
  void wait(std::uint32_t seen) const noexcept { value_.wait(seen, std::memory_order_acquire); }
  void notify() noexcept {
    value_.fetch_add(1, std::memory_order_acq_rel);
    value_.notify_all();
  }

 private:
  std::atomic<std::uint32_t> value_{0};
};

/// One staging slot: a batch's bytes in page-locked memory, and what the workers leave there.
struct Slot {
  std::byte* data = nullptr;
  bool pinned = false;                       ///< data's pages are locked
  std::vector<std::uint64_t> indices;        ///< the batch's dataset indices
  std::vector<std::exception_ptr> failures;  ///< per position, set by workers
  std::size_t number = 0;                    ///< the batch's number in its epoch
  std::exception_ptr error;                  ///< the batch failed (ErrorPolicy::raise)
  std::atomic<std::uint64_t> filled{0};      ///< number + 1 once the workers are done
  Event copied;                              ///< the copy out of this slot (device path)
};

/// One device buffer and the batch it holds.
struct DeviceSlot {
  DeviceBuffer buffer;
  std::vector<std::uint64_t> indices;
  std::exception_ptr error;
  Event ready;     ///< the copy into it has finished
  Event released;  ///< the consumer is done with it (recorded on the consumer's stream)
};

}  // namespace ferry::detail
