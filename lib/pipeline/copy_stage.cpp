#include "pipeline/copy_stage.hpp"

#include <pthread.h>

#include <boost/lockfree/spsc_queue.hpp>

#include "pipeline/fault.hpp"
#include "pipeline/field_ops.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail {

namespace {

/// Takes the next planned slot in order, or nothing when the run stops or failed first.
std::optional<Planned> next_planned(RunState& run,
                                    Clock::time_point deadline = Clock::time_point::max()) {
  Planned p;
  bool got = false;
  wait_until(
      run.planned_signal, [&] { return got = run.planned.pop(p); },
      [&] { return run.stop_requested() || run.failed.load(); }, deadline);
  if (!got) return std::nullopt;
  return p;
}

/// No device: the consumer gets the filled slot itself.
class IdentityStage final : public CopyStage {
 public:
  explicit IdentityStage(RunState& run) noexcept : run_(run) {}

  std::optional<ReadyBatch> take(Clock::time_point deadline, bool& timed_out) override {
    timed_out = false;
    if (!waiting_) {
      waiting_ = next_planned(run_, deadline);
      if (!waiting_) {
        timed_out = !run_.stop_requested() && !run_.failed.load();
        return std::nullopt;
      }
    }
    const Planned p = *waiting_;
    Slot& slot = run_.impl->ring->slot(p.slot);
    if (!run_.wait_filled(slot, p.number, deadline)) {
      timed_out = true;  // the batch stays taken: the next call waits for it again
      return std::nullopt;
    }
    waiting_.reset();
    if (run_.stop_requested()) {
      // Stopped (cancelled): fill tasks skip the samples they had not begun, so a slot that
      // reads as filled may not be. The slot goes back in drain(), once they are done with it.
      unfilled_ = p.slot;
      return std::nullopt;
    }
    ReadyBatch b;
    b.id = p.slot;
    b.base = slot.data;
    b.pinned = slot.pinned;
    b.indices = &slot.indices;
    b.rows = &slot.rows;
    b.error = slot.error;
    return b;
  }
  void drain() noexcept override {
    if (waiting_) unfilled_ = waiting_->slot;  // a wait for its fill ended at a deadline
    waiting_.reset();
    if (unfilled_) run_.impl->ring->release_slot(*unfilled_);
    unfilled_.reset();
  }

 private:
  RunState& run_;
  std::optional<Planned> waiting_;         // taken from the planner; its fill not yet seen over
  std::optional<std::uint32_t> unfilled_;  // taken, then stopped before its fill ended
};

/// A copy thread that owns the copy stream: per batch, in order, it waits for the fill, takes a
/// free device buffer, makes the stream wait for the buffer's release, queues one copy of the
/// slot and the fields' operations, and records the ready event. The slot returns to the ring
/// at once: the planner waits for that event before it reuses the slot.
class DeviceStage final : public CopyStage {
 public:
  explicit DeviceStage(RunState& run) : run_(run), ready_(run.impl->ring->device_count()) {}
  ~DeviceStage() override { join(); }

  void start() override {
    fault(FaultPoint::thread_start, run_.start);
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ferry-copy");
      const SyncScope syncs(&run_.impl->background_syncs);
      loop();
    });
  }
  void join() noexcept override {
    if (thread_.joinable()) thread_.join();
  }

  std::optional<ReadyBatch> take(Clock::time_point deadline, bool& timed_out) override {
    std::uint32_t d = 0;
    bool got = false;
    timed_out = !wait_until(
        run_.ready_signal, [&] { return got = ready_.pop(d); },
        [&] { return run_.stop_requested() || run_.failed.load(); }, deadline);
    if (!got) return std::nullopt;
    LoaderImpl& impl = *run_.impl;
    DeviceSlot& dev = impl.ring->device(d);
    ReadyBatch b;
    b.id = d;
    b.device = true;
    b.base = static_cast<std::byte*>(dev.buffer.data());
    b.where = impl.engine->device();
    b.ready = dev.ready;
    b.indices = &dev.indices;
    b.rows = &dev.rows;
    b.error = dev.error;
    return b;
  }

  void drain() noexcept override {
    std::uint32_t d = 0;
    while (ready_.pop(d)) {
      run_.impl->ring->device(d).released = Event();
      run_.impl->ring->release_device(d);
    }
  }

 private:
  void loop() {
    for (std::size_t k = run_.start; k < run_.end; ++k) {
      const std::optional<Planned> p = next_planned(run_);
      if (!p) return;  // stopping
      try {
        if (!copy(*p)) return;  // stopping
      } catch (...) {
        // The stage itself failed (a batch's own failure travels in its device buffer): the
        // consumer gets the batches copied before, then this error. The slot goes back to the
        // ring only once its fill is over: the planner, which goes on, would refill it under
        // the workers still reading its indices.
        run_.wait_filled(run_.impl->ring->slot(p->slot), p->number);
        run_.impl->ring->release_slot(p->slot);
        run_.fail(std::current_exception());
        return;
      }
    }
  }

  bool copy(const Planned& p) {
    LoaderImpl& impl = *run_.impl;
    CopyEngine& engine = *impl.engine;
    BufferRing& ring = *impl.ring;
    const BatchLayout& layout = *impl.layout;
    fault(FaultPoint::copy, p.number);
    Slot& slot = ring.slot(p.slot);
    run_.wait_filled(slot, p.number);
    std::optional<std::uint32_t> d;
    if (!run_.stop_requested()) d = ring.acquire_device([&] { return run_.stop_requested(); });
    if (run_.stop_requested()) {
      if (d) ring.release_device(*d);
      ring.release_slot(p.slot);
      return false;
    }
    DeviceSlot& dev = ring.device(*d);
    dev.indices.assign(slot.indices.begin(), slot.indices.end());
    dev.rows.copy_from(slot.rows);
    dev.error = slot.error;
    if (!dev.error) {
      try {
        engine.wait(dev.released);  // on the stream: the consumer's work on it is done
        engine.mark_busy_start();
        auto* target = static_cast<std::byte*>(dev.buffer.data());
        const std::size_t count = slot.indices.size();
        const std::uint64_t* indices = nullptr;
        if (layout.gather) {
          auto* at = reinterpret_cast<std::uint64_t*>(target + layout.index_offset);
          engine.copy_async(at, slot.data, count * sizeof(std::uint64_t), CopyKind::host_to_device);
          indices = at;
        }
        // What the dataset wrote crosses the bus (fields not gathered from rows there).
        if (!layout.gather) {
          layout.written.for_each_used(count, slot.rows, [&](std::size_t at, std::size_t n) {
            engine.copy_async(target + at, slot.data + at, n, CopyKind::host_to_device);
          });
        }
        EngineOps ops(engine);
        for (const FieldPlan& plan : layout.plans) {
          plan.run(ops, OpSpan{target, indices, 0, count, &layout.written, &dev.rows});
        }
        engine.mark_busy_end();
        dev.ready = engine.record();
        slot.copied = dev.ready;
      } catch (...) {
        dev.error = std::current_exception();
        dev.ready = Event();
        // Copies queued before the failure may still read the slot: it is refilled only once
        // the copy stream is past them (if even that fails, the stream is broken and the next
        // copy reports it).
        try {
          engine.synchronize();
        } catch (...) {  // NOLINT(bugprone-empty-catch): the batch's error is reported
        }
        slot.copied = Event();
      }
    }
    dev.released = Event();
    ring.release_slot(p.slot);  // reused once slot.copied is ready
    ready_.push(*d);
    run_.ready_signal.notify();
    return true;
  }

  RunState& run_;
  boost::lockfree::spsc_queue<std::uint32_t> ready_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<CopyStage> make_copy_stage(RunState& run) {
  if (run.impl->device_path) return std::make_unique<DeviceStage>(run);
  return std::make_unique<IdentityStage>(run);
}

}  // namespace ferry::detail
