#include "pipeline/epoch_run.hpp"

#include <pthread.h>

#include <string>
#include <utility>
#include <vector>

#include "core/storage.hpp"
#include "core/tensor_access.hpp"
#include "pipeline/planner.hpp"
#include "runtime/host_sync.hpp"

namespace ferry::detail {

// ---- RunState -----------------------------------------------------------------------------

RunState::RunState(std::shared_ptr<LoaderImpl> i, std::uint64_t e, std::size_t first,
                   std::uint64_t position)
    : impl(std::move(i)),
      epoch(e),
      sampler(impl->sampler.from(position)),
      order(sampler.order(e)),
      plan(impl->planned ? std::make_unique<EpochPlan>(*impl->dataset, impl->budget_field,
                                                       impl->options, e, position)
                         : nullptr),
      start(std::min(first, plan ? plan->batches() : sampler.batches())),
      end(plan ? plan->batches() : sampler.batches()),
      number_offset(plan ? plan->number_offset() : sampler.number_offset()),
      planned(impl->ring->slot_ids()) {
  // The epoch's whole count, where this run knows it (not a resume between its batches).
  if (plan && (position == 0 || number_offset != 0)) {
    impl->planned_batches.store(number_offset + end);
  }
}

void RunState::stop() noexcept {
  stopping.store(true);
  // Wake every waiter so it sees stopping.
  impl->ring->wake();
  filled.notify();
  planned_signal.notify();
  ready_signal.notify();
}

void RunState::fail(std::exception_ptr error) noexcept {
  if (failed.load()) return;
  background_error = std::move(error);
  failed.store(true);
  planned_signal.notify();
  ready_signal.notify();
}

bool RunState::wait_filled(const Slot& slot, std::uint64_t number, Clock::time_point deadline) {
  return wait_until(
      filled, [&] { return slot.filled.load(std::memory_order_acquire) == number + 1; },
      [&] { return stop_requested(); }, deadline);
}

std::string describe(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

// ---- EpochRun -----------------------------------------------------------------------------

EpochRun::EpochRun(std::shared_ptr<LoaderImpl> impl, std::uint64_t epoch, std::size_t start,
                   std::uint64_t position)
    : run_(std::move(impl), epoch, start, position),
      stage_(make_copy_stage(run_)),
      next_(run_.start),
      started_(Clock::now()) {
  run_.impl->state_epoch.store(epoch);
  run_.impl->state_next.store(run_.number_offset + run_.start);
  run_.impl->state_position.store(run_.position_after(run_.start));
  try {
    planner_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "ferry-planner");  // for top, perf and gdb
      const SyncScope syncs(&run_.impl->background_syncs);
      run_planner(run_);
    });
    stage_->start();
  } catch (...) {
    // A thread that did start is stopped and joined; the ring is whole again.
    const std::exception_ptr error = std::current_exception();
    shutdown();
    try {
      std::rethrow_exception(error);
    } catch (const Error&) {
      throw;
    } catch (...) {  // std::system_error from std::thread, std::bad_alloc
      throw Error("Loader: cannot start epoch " + std::to_string(epoch) + ": " + describe(error));
    }
  }
}

EpochRun::~EpochRun() {
  run_.stop();
  release_current();
  shutdown();
}

/// Stops the threads, waits for the fill tasks, returns whatever was planned or copied but not
/// delivered to the ring, and lets the loader start another epoch. Runs once: when the epoch
/// ends, fails, or is destroyed.
void EpochRun::shutdown() noexcept {
  if (shut_down_) return;
  shut_down_ = true;
  run_.stop();
  if (planner_.joinable()) planner_.join();
  tuning_end(*run_.impl);  // after the planner, the only other thread that touches it
  stage_->join();
  // Fill tasks see stopping and finish quickly; no slot may be touched after this.
  for (int n = run_.in_flight->load(); n != 0; n = run_.in_flight->load()) {
    run_.in_flight->wait(n);
  }
  LoaderImpl& impl = *run_.impl;
  // An epoch cut short may leave copies in flight from slots that go back to the ring. One that
  // delivered every batch has none: the consumer's stream is ordered after every copy, and the
  // planner waits for a slot's copy before it refills it. No host wait ends a whole epoch.
  if (impl.engine && next_ < run_.end) {
    try {
      impl.engine->synchronize();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the epoch is over either way
    }
  }
  Planned p;
  while (run_.planned.pop(p)) impl.ring->release_slot(p.slot);
  stage_->drain();
  // Left before its end, where the dataset hears of slots let go: every free slot is idle
  // until the next epoch (its pages given back, as an epoch's last batches' are).
  if (next_ < run_.end && impl.tells_staging) {
    impl.give_back_slot.store(true, std::memory_order_relaxed);
    impl.ring->let_go_free();
  }
  finish_stats();
  EpochRun* self = this;
  impl.active.compare_exchange_strong(self, nullptr);
}

void EpochRun::finish_stats() noexcept {
  if (over_) return;
  over_ = true;
  run_.impl->wall_ns.fetch_add(nanos_since(started_));
}

void EpochRun::fail_epoch(std::exception_ptr error) {
  shutdown();  // the ring is whole again and the loader ready for another epoch
  over_ = true;
  if (!error) throw Error("Loader: the epoch was stopped");
  std::rethrow_exception(std::move(error));
}

void EpochRun::release_current() {
  if (current_.lease_) {
    current_.tensors_.clear();  // their storages hold the lease too
    current_.lengths_.clear();
    current_.offsets_.clear();
    if (current_.lease_.use_count() > 1) current_.lease_->mark_kept();
    current_.lease_.reset();
  }
  current_.indices_.clear();
}

void EpochRun::cancel() noexcept {
  cancelled_.store(true);
  run_.stop();  // wakes the consumer's wait in take()
}

namespace {

// Adds the time from its making to its end to a counter (the consumer's time inside next()).
class InsideNext {
 public:
  explicit InsideNext(std::atomic<std::uint64_t>& total) noexcept
      : total_(total), start_(Clock::now()) {}
  InsideNext(const InsideNext&) = delete;
  InsideNext& operator=(const InsideNext&) = delete;
  ~InsideNext() { total_.fetch_add(nanos_since(start_)); }

 private:
  std::atomic<std::uint64_t>& total_;
  Clock::time_point start_;
};

}  // namespace

const Batch* EpochRun::next() {
  const Batch* batch = nullptr;
  next_until(Clock::time_point::max(), batch);
  return batch;
}

bool EpochRun::next_until(Clock::time_point deadline, const Batch*& batch) {
  batch = nullptr;
  LoaderImpl& impl = *run_.impl;
  const SyncScope syncs(&impl.host_syncs);  // what blocks the training loop
  const InsideNext inside(impl.consumer_inside_ns);
  release_current();
  // Cancelled: the threads were asked to stop; they are joined when the epoch is destroyed, so
  // that a read still running (a Python dataset's, a stalled file) does not hold up the caller.
  if (cancelled_.load()) throw Error("Loader: the epoch was cancelled");
  if (over_) return true;
  if (next_ >= run_.end) {
    shutdown();  // the loader may start the next epoch while this object lives on
    return true;
  }
  if (impl.ring->stalled(tuning_may_make_slot(impl))) {
    // Kept batches get new slots while memory_budget holds them: name it where it is the bound.
    const std::uint64_t budget = impl.tuning.budget;
    const std::string raise =
        impl.device_path ? "device_buffers"
        : budget > 0     ? "memory_budget (" + std::to_string(budget) +
                           " bytes, which the slots of kept batches have reached) or prefetch"
                     : "prefetch";
    throw ConfigError("Loader: all " +
                      std::to_string(impl.device_path
                                         ? impl.ring->device_count()
                                         : static_cast<std::size_t>(impl.ring->slot_count())) +
                      (impl.device_path ? " device buffers" : " staging slots") +
                      " are held by batches (or their tensors) kept past their iteration; release "
                      "some, or raise " +
                      raise);
  }
  const auto wait_start = Clock::now();
  bool timed_out = false;
  const std::optional<ReadyBatch> got = stage_->take(deadline, timed_out);
  if (timed_out) {
    impl.consumer_wait_ns.fetch_add(nanos_since(wait_start));
    slice_timed_out_ = true;
    return false;
  }
  if (!got) {
    if (cancelled_.load() && !run_.failed.load()) throw Error("Loader: the epoch was cancelled");
    fail_epoch(run_.background_error);
  }
  const ReadyBatch& b = *got;
  std::shared_ptr<Lease> lease;
  try {
    lease = std::make_shared<Lease>(run_.impl, *impl.ring, impl.engine.get(), impl.options.stream,
                                    b.id, b.device);
  } catch (...) {
    if (b.device) {
      impl.ring->release_device(b.id);
    } else {
      impl.ring->release_slot(b.id);
    }
    fail_epoch(std::current_exception());
  }
  if (b.error) fail_epoch(b.error);
  if (b.device) impl.engine->stream_wait(impl.options.stream, b.ready);
  const std::uint64_t waited = nanos_since(wait_start);
  impl.consumer_wait_ns.fetch_add(waited);
  const bool epoch_tail = next_ + static_cast<std::size_t>(impl.ring->limit()) >= run_.end;
  impl.give_back_slot.store(slice_timed_out_ || epoch_tail, std::memory_order_relaxed);
  slice_timed_out_ = false;

  current_.indices_.assign(b.indices->begin(), b.indices->end());
  const std::size_t count = current_.indices_.size();
  current_.names_ = impl.names;
  current_.number_ = run_.number_offset + next_;
  current_.ready_ = b.ready;
  current_.lease_ = lease;
  const BatchLayout& layout = *impl.layout;
  const SlotLayout& written = layout.written;
  const auto wrap = [&](std::size_t at, std::vector<int64_t> shape, DType dtype) {
    Tensor t = Tensor::wrap(b.base + at, std::move(shape), dtype, b.where, b.pinned, lease);
    if (b.device) {
      // Ordered on the consumer's stream, which waits for the copy already: handing the batch
      // over on that stream (to_dlpack(stream)) waits for nothing.
      Storage& storage = *TensorAccess::storage(t);
      storage.set_stream(impl.options.stream);
      storage.set_pending(b.ready, {}, impl.options.stream);
    }
    return t;
  };
  const auto n = static_cast<int64_t>(count);
  for (std::size_t f = 0; f < layout.plans.size(); ++f) {
    const FieldSpec& spec = layout.plans[f].delivered;
    std::vector<int64_t> shape{n};
    const int r = written.ragged[f];
    if (r < 0) {
      shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
      current_.tensors_.push_back(wrap(layout.delivered_offset(f), std::move(shape), spec.dtype));
      current_.lengths_.emplace_back();
      current_.offsets_.emplace_back();
      continue;
    }
    // pad: [N, Lmax, ...]; pack: [sum L, ...]; with the lengths, and the starts when packed.
    const auto ri = static_cast<std::size_t>(r);
    if (impl.options.ragged == RaggedBatch::pad) {
      shape.push_back(b.rows->padded[ri]);
    } else {
      shape[0] = static_cast<int64_t>(b.rows->rows[ri]);
    }
    shape.insert(shape.end(), spec.shape.begin() + 1, spec.shape.end());
    current_.tensors_.push_back(wrap(layout.delivered_offset(f), std::move(shape), spec.dtype));
    current_.lengths_.push_back(wrap(written.lengths_offsets[ri], {n}, DType::i64));
    current_.offsets_.push_back(impl.options.ragged == RaggedBatch::pack
                                    ? wrap(written.starts_offsets[ri], {n + 1}, DType::i32)
                                    : Tensor());
  }
  ++next_;
  impl.state_next.store(run_.number_offset + next_);
  impl.state_position.store(run_.position_after(next_));
  impl.batches.fetch_add(1);
  impl.samples.fetch_add(count);
  if (impl.sources > 0) {
    // Counted here, then one atomic add a source, not one a sample.
    source_counts_.assign(impl.sources, 0);
    for (const std::uint64_t index : current_.indices_) {
      const std::size_t k = impl.dataset->source_of(static_cast<std::size_t>(index));
      if (k < impl.sources) ++source_counts_[k];
    }
    for (std::size_t k = 0; k < impl.sources; ++k) {
      if (source_counts_[k] > 0) {
        impl.source_samples[k].fetch_add(source_counts_[k], std::memory_order_relaxed);
      }
    }
  }
  std::size_t bytes = 0;
  written.for_each_used(count, *b.rows, [&](std::size_t, std::size_t used) { bytes += used; });
  impl.bytes.fetch_add(bytes);
  if (first_) {
    first_ = false;
    impl.first_batch_ns.store(nanos_since(started_));
  }
  batch = &current_;
  return true;
}

}  // namespace ferry::detail
