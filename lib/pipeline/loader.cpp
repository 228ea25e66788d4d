// The loader's public façade: options checked, the loader's state built (engine, layout, ring,
// arena), and the Loader class (Epoch and Batch: epoch.cpp). The stages live beside it (see
// loader_impl.hpp for the map).

#include "ferry/loader.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "copy/cuda_engines.hpp"
#include "copy/host/host_copy_engine.hpp"
#include "core/checked.hpp"
#include "core/memory_need.hpp"
#include "core/tensor_access.hpp"
#include "pipeline/epoch_run.hpp"
#include "pipeline/field_ops.hpp"
#include "pipeline/loader_impl.hpp"
#include "pipeline/memory_limit.hpp"
#include "pipeline/testing.hpp"
#include "pipeline/validate.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry {

namespace {

// Samples one slot holds: batch_size, or all this rank's epoch has when that is fewer.
std::size_t staging_capacity(std::size_t dataset_size, const LoaderOptions& o) {
  const auto w = static_cast<std::size_t>(o.world_size);
  const std::size_t per_rank =
      o.drop_last ? dataset_size / w : dataset_size / w + (dataset_size % w != 0);
  return std::max<std::size_t>(1, std::min(o.batch_size, per_rank));
}

int core_count() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// Workers to start with: the option, else one per core (autotune: half the cores).
int worker_count(const LoaderOptions& o) {
  if (o.workers > 0) return o.workers;
  return o.autotune ? std::max(1, core_count() / 2) : core_count();
}

// Slots autotune may make at most (the budget may allow fewer): enough to keep every core's
// batch in flight twice over, and at least 16.
int autotune_slot_cap(const LoaderOptions& o, int max_workers) {
  return std::min(detail::kMaxBuffers, std::max({o.prefetch, 16, 2 * max_workers}));
}

// "N bytes (one staging slot of S, D device buffers of B, one worker's scratch of C)".
std::string budget_parts(std::uint64_t total, int slots, std::uint64_t slot_bytes, int devices,
                         std::uint64_t device_bytes, int workers, std::uint64_t scratch,
                         std::uint64_t reader) {
  std::string s = std::to_string(total) + " bytes (" + std::to_string(slots) + " staging slot" +
                  (slots == 1 ? "" : "s") + " of " + std::to_string(slot_bytes);
  if (devices > 0) {
    s += ", " + std::to_string(devices) + " device buffers of " + std::to_string(device_bytes);
  }
  s += ", " + std::to_string(workers) + " worker" + (workers == 1 ? "" : "s") + "' scratch of " +
       std::to_string(scratch) + " each";
  if (reader > 0) s += ", " + std::to_string(reader) + " held by the dataset's reads";
  return s + ")";
}

detail::Sampler::Options sampler_options(const LoaderOptions& o) {
  return {o.batch_size,
          o.shuffle,
          o.seed,
          o.drop_last,
          static_cast<std::size_t>(o.rank),
          static_cast<std::size_t>(o.world_size)};
}

// LoaderOptions::shuffle_window over the dataset's shards.
detail::SamplerWindows shard_windows(const Dataset& d, const LoaderOptions& o) {
  if (o.shuffle_window == 0) return {};
  const std::span<const std::size_t> starts = d.shard_starts();
  if (o.max_tokens > 0 || o.bucket_window > 0) {
    throw ConfigError("Loader: shuffle_window does not combine with max_tokens or bucket_window");
  }
  if (starts.size() < 2 || starts.front() != 0 || starts.back() != d.size() ||
      !std::is_sorted(starts.begin(), starts.end())) {
    throw ConfigError(
        std::string("Loader: shuffle_window needs a dataset stored in shards (") +
        (starts.empty() ? "this one has none" : "its shard_starts() do not run from 0 to size()") +
        ")");
  }
  return {o.shuffle_window, {starts.begin(), starts.end()}};
}

// Each field's operations after the copy: rows gathered where they live on the device, a
// ragged field that travelled packed padded there, then normalization (FieldSpec::normalize).
std::vector<std::vector<std::unique_ptr<detail::FieldOp>>> field_ops(
    const std::vector<FieldSpec>& fields, const std::vector<const std::byte*>& rows,
    const detail::RaggedFields& ragged) {
  std::vector<std::vector<std::unique_ptr<detail::FieldOp>>> ops(fields.size());
  int ragged_index = 0;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!rows.empty()) ops[f].push_back(detail::gather_rows(fields[f], rows[f]));
    if (fields[f].is_ragged()) {
      if (ragged.mode == RaggedBatch::pad && ragged.slot_mode == RaggedBatch::pack) {
        ops[f].push_back(
            detail::pad_ragged(fields[f], ragged_index, ragged.padded_rows[f], ragged.pad_bits[f]));
      }
      ++ragged_index;
    }
    if (fields[f].normalize) ops[f].push_back(detail::normalize_image(fields[f]));
  }
  return ops;
}

}  // namespace

std::uint64_t default_memory_budget() noexcept {
  constexpr std::uint64_t kUnknown = std::uint64_t{8} << 30;  // a machine that says nothing
  const std::uint64_t memory = detail::process_memory_limit();
  return (memory == 0 ? kUnknown : memory) / 8;
}

detail::LoaderImpl::LoaderImpl(std::shared_ptr<const Dataset> d, const LoaderOptions& o,
                               const SimulatedCopy& sim)
    : dataset((detail::validate_options(d.get(), o, sim), std::move(d))),
      options(o),
      simulated(sim),
      fields(dataset->fields()),
      epoch_samples(epoch_length(*dataset)),
      capacity(options.max_tokens > 0 || options.bucket_window > 0
                   ? std::max<std::size_t>(1, std::min(options.batch_size, epoch_samples))
                   : staging_capacity(epoch_samples, options)),
      sampler(epoch_samples, sampler_options(options), shard_windows(*dataset, options), 0,
              dataset->selection_key() != 0 ? dataset.get() : nullptr),
      workers(worker_count(options)),
      device_path(options.device.is_cuda() || simulated.enabled),
      arena(workers, /*reserved_for_masters=*/0) {
  check_usable(options.device);
  sources = dataset->num_sources();
  if (sources > 0) source_samples = std::make_unique<std::atomic<std::uint64_t>[]>(sources);
  network_wait_base = dataset->network_wait_seconds();
  auto n = std::make_shared<std::vector<std::string>>();
  for (const auto& f : fields) n->push_back(f.name);
  names = std::move(n);
  tuning.enabled = options.autotune;
  tuning.max_workers = options.autotune ? std::max(workers, core_count()) : workers;
  // The arena's threads come from oneTBB's pool, which by default has one fewer than the cores:
  // ask for enough that `workers` can all fill slots.
  parallelism.emplace(static_cast<std::size_t>(tuning.max_workers) + 1);
  if (options.device.is_cuda()) {
    engine = cuda::make_engine(options.device.index());
  } else if (simulated.enabled) {
    engine = std::make_unique<HostCopyEngine>(HostCopyEngine::Options{simulated.bytes_per_second});
    host_engine = true;
  }
  // Rows that live where the copy stage writes are gathered there: nothing crosses the bus.
  // Rows in page-locked host memory that the GPU reads directly are gathered there too: the
  // kernel pulls them over the bus, and no worker copies them into staging first.
  std::vector<const std::byte*> rows;
  const std::span<const Tensor> in_memory = dataset->rows_in_memory();
  const auto gathered_on_device = [&](const Tensor& t) {
    if (simulated.dataset_on_device) return true;
    if (t.device() == options.device) return true;
    return options.device.is_cuda() && t.device().is_cpu() && t.is_pinned() &&
           cuda::device_reads_host(options.device.index(), TensorAccess::address(t));
  };
  if (!in_memory.empty() && device_path &&
      std::all_of(in_memory.begin(), in_memory.end(), gathered_on_device)) {
    for (const Tensor& t : in_memory) {
      engine->wait(t.ready_event());  // tensors still being copied there
      rows.push_back(static_cast<const std::byte*>(TensorAccess::address(t)));
    }
  }
  ragged = std::make_unique<RaggedFields>(*dataset, fields, options, capacity, device_path);
  planned = options.max_tokens > 0 || options.bucket_window > 0;
  if (planned) {
    const auto first = std::find_if(fields.begin(), fields.end(),
                                    [](const FieldSpec& f) { return f.is_ragged(); });
    if (first == fields.end()) {
      throw ConfigError(
          "Loader: max_tokens and bucket_window count the tokens of a ragged field; the dataset "
          "has none");
    }
    budget_field = static_cast<std::size_t>(first - fields.begin());
    // The count is planned when first asked (batches_per_epoch) or when an epoch starts, not
    // here: a plan walks the epoch's lengths.
  }
  layout = std::make_unique<BatchLayout>(fields, capacity, field_ops(fields, rows, *ragged),
                                         ragged->region_rows);
  // Without a copy stage the slot is the delivered buffer, operations' results included; with
  // one, the slot holds what crosses the bus (the batch's indices when rows are gathered).
  BufferRing::Sizes sizes;
  sizes.slots = options.prefetch;
  sizes.capacity = capacity;
  sizes.staging_bytes = !device_path     ? layout->bytes
                        : layout->gather ? layout->index_bytes
                                         : layout->written.bytes;
  sizes.pinned = options.pin_memory && options.device.is_cuda();
  sizes.shared = dataset->shares_staging();
  sizes.device_buffers = device_path ? options.device_buffers : 0;
  sizes.device_bytes = layout->bytes;
  sizes.ragged_fields = layout->written.ragged_count();
  plan_memory(sizes);
  // Each slot holds a batch of `capacity` samples (batch_size, at most the epoch): checked
  // against the machine's memory first, so that a batch_size too large is a ConfigError. (The
  // device buffers are the GPU's, whose allocator answers with a DeviceError.)
  const std::string need = "Loader: batch_size " + std::to_string(options.batch_size) + " (" +
                           std::to_string(capacity) + " samples a batch, " +
                           std::to_string(sizes.slots) + " staging slots)";
  detail::allocating(need, static_cast<std::uint64_t>(sizes.slots), sizes.staging_bytes,
                     "of staging",
                     [&] { ring = std::make_unique<BufferRing>(sizes, engine.get()); });
  ring->set_limit(start_slots);
  tells_staging = sizes.shared && !device_path && !layout->gather && !ragged->any;
  if (tells_staging) {
    const Dataset* reader = dataset.get();  // the loader's: it outlives the ring
    ring->set_let_go([reader, this](std::span<std::byte> slot) {
      if (give_back_slot.load(std::memory_order_relaxed)) reader->staging_released(slot);
    });
  }
  staging_allocations = ring->slot_allocations();
  device_allocations = ring->device_count();
}

void detail::LoaderImpl::plan_memory(BufferRing::Sizes& sizes) {
  // The estimate of a worker's scratch: one sample's bytes as read (a decoder keeping more per
  // thread, as ImageFolder's, is not counted beyond that).
  Tuning& t = tuning;
  t.slot_bytes = sizes.staging_bytes;
  t.device_bytes = static_cast<std::uint64_t>(sizes.device_buffers) * sizes.device_bytes;
  t.scratch_per_worker = (layout->written.bytes + capacity - 1) / capacity;
  t.reader_bytes = dataset->reader_memory(t.scratch_per_worker);
  t.budget = options.memory_budget;
  if (t.enabled && t.budget == 0) {
    // The default: a share of the memory, and never less than the pipeline the options ask for
    // at the start (so no options are refused for it). What the dataset holds for its reads is
    // not added: a table whose row groups decode to more than the share (gigabytes, of a file of
    // kilobytes) is refused below, as under a budget given.
    t.budget = std::max(
        default_memory_budget(),
        t.bytes(static_cast<std::uint64_t>(options.prefetch), static_cast<std::uint64_t>(workers)) -
            t.reader_bytes);
  }
  if (t.budget > 0) {
    // The dataset's holdings (a table's decoded cache) fit what the budget leaves beside the
    // pipeline the options ask for (or, where that does not fit, the smallest); under autotune,
    // half of it, the rest left for the slots and workers it may add.
    const std::uint64_t asked =
        t.bytes(static_cast<std::uint64_t>(options.prefetch), static_cast<std::uint64_t>(workers)) -
        t.reader_bytes;
    const std::uint64_t smallest = t.bytes(1, 1) - t.reader_bytes;
    const std::uint64_t used = asked <= t.budget ? asked : smallest;
    if (used < t.budget) {
      const std::uint64_t room = t.budget - used;
      dataset->fit_reader_memory(t.enabled ? room / 2 : room);
      t.reader_bytes = dataset->reader_memory(t.scratch_per_worker);
    }
  }
  const int devices = sizes.device_buffers;
  const auto parts = [&](int slots, int w) {
    return budget_parts(t.bytes(static_cast<std::uint64_t>(slots), static_cast<std::uint64_t>(w)),
                        slots, t.slot_bytes, devices, sizes.device_bytes, w, t.scratch_per_worker,
                        t.reader_bytes);
  };
  const std::string budget =
      options.memory_budget == 0
          ? "Loader: the default memory_budget (an eighth of this machine's memory, or what the "
            "options ask for) of " +
                std::to_string(t.budget) + " bytes"
          : "Loader: memory_budget of " + std::to_string(t.budget) + " bytes";
  if (!t.fits(1, 1)) {
    throw ConfigError(budget + " cannot hold the smallest pipeline: it needs " + parts(1, 1));
  }
  if (!t.enabled) {
    t.workers.store(workers);
    t.workers_high.store(workers);
    start_slots = options.prefetch;
    if (!t.fits(static_cast<std::uint64_t>(options.prefetch),
                static_cast<std::uint64_t>(workers))) {
      throw ConfigError(
          budget + " cannot hold what the options ask for: " + parts(options.prefetch, workers) +
          "; raise memory_budget, lower prefetch or workers, or set autotune");
    }
    return;
  }
  // Autotune starts from the options, as far as the budget allows: workers first (one slot
  // made), then the slots in use. One slot is made now, the others when the planner needs them.
  int w = workers;
  while (w > 1 && !t.fits(1, static_cast<std::uint64_t>(w))) --w;
  t.workers.store(w);
  t.workers_high.store(w);
  int cap = autotune_slot_cap(options, t.max_workers);
  while (cap > 1 && !t.fits(static_cast<std::uint64_t>(cap), static_cast<std::uint64_t>(w))) --cap;
  start_slots = std::min(options.prefetch, cap);
  sizes.slots = 1;
  sizes.max_slots = cap;
  t.arenas.resize(static_cast<std::size_t>(t.max_workers) + 1);
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options)
    : impl_(std::make_shared<detail::LoaderImpl>(std::move(dataset), options,
                                                 detail::SimulatedCopy{})) {}

Loader::Loader(std::shared_ptr<detail::LoaderImpl> impl) noexcept : impl_(std::move(impl)) {}

Loader::Loader(Loader&&) noexcept = default;
Loader& Loader::operator=(Loader&&) noexcept = default;

Loader detail::make_loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                           const SimulatedCopy& simulated) {
  return Loader(std::make_shared<LoaderImpl>(std::move(dataset), options, simulated));
}

Loader::~Loader() = default;

namespace {

// Epoch e's run from batch `start_batch` of a run from global position `position`: the loader's
// only one. \throws ConfigError while another epoch of the loader is being iterated.
std::unique_ptr<detail::EpochRun> begin_run(const std::shared_ptr<detail::LoaderImpl>& impl,
                                            std::uint64_t e, std::size_t start_batch,
                                            std::uint64_t position) {
  std::lock_guard lock(impl->run_mutex);
  if (impl->active.load() != nullptr) {
    throw ConfigError(
        "Loader: an epoch is still being iterated; finish or destroy it before starting another");
  }
  auto run = std::make_unique<detail::EpochRun>(impl, e, start_batch, position);
  impl->active.store(run.get());
  return run;
}

}  // namespace

Epoch Loader::epoch(std::uint64_t e, std::size_t start_batch) {
  return Epoch(begin_run(impl_, e, start_batch, 0));
}

Epoch Loader::resume(const LoaderState& state) {
  check_state(state);
  return Epoch(begin_run(impl_, state.epoch, 0, state.position));
}

void Loader::check_state(const LoaderState& state) const {
  const LoaderOptions& o = impl_->options;
  const std::uint64_t n = impl_->epoch_samples;
  const auto refuse = [](const std::string& what, const std::string& saved,
                         const std::string& here) {
    throw ConfigError("Loader: the state was saved with " + what + " " + saved +
                      ", this loader has " + here + ": it orders the epoch differently");
  };
  if (state.seed != o.seed) refuse("seed", std::to_string(state.seed), std::to_string(o.seed));
  if (state.samples != n) {
    // A dataset that chooses its epochs' samples: the epoch's length (Mixture::epoch_size).
    const std::string what = impl_->dataset->selection_key() != 0 ? "epochs of" : "a dataset of";
    refuse(what, std::to_string(state.samples) + " samples", what + " " + std::to_string(n));
  }
  const std::uint64_t selection = impl_->dataset->selection_key();
  if (state.selection != selection) {
    const auto key = [](std::uint64_t k) {
      return k == 0 ? std::string("none (every sample once per epoch)") : std::to_string(k);
    };
    throw ConfigError("Loader: the state's selection " + key(state.selection) +
                      " is not this dataset's, " + key(selection) +
                      ": the epochs hold other samples (a Mixture's sources or their sizes differ, "
                      "or its weights and epoch_size give other shares)");
  }
  if (state.shuffle != o.shuffle) {
    refuse("shuffle", state.shuffle ? "on" : "off", o.shuffle ? "shuffle on" : "shuffle off");
  }
  const std::uint64_t plan = detail::EpochPlan::plan_key(o);
  if (state.plan != plan) {
    throw ConfigError(
        "Loader: the state's plan " + std::to_string(state.plan) + " is not this loader's (" +
        std::to_string(plan) +
        "): a bucketed epoch resumes only with the same bucket_window, batch_size, max_tokens, "
        "ragged and pad_multiple, a shard-windowed one with the same shuffle_window");
  }
  if (state.position > n) {
    throw ConfigError("Loader: the state's position " + std::to_string(state.position) +
                      " lies past the epoch's " + std::to_string(n) + " samples");
  }
}

std::size_t Loader::batches_per_epoch() const {
  if (!impl_->planned) return impl_->sampler.batches();
  std::size_t known = impl_->planned_batches.load();
  if (known != detail::LoaderImpl::kUnplanned) return known;
  // No epoch started yet: epoch 0's count, unless an epoch's start recorded its own meanwhile.
  const std::size_t count =
      detail::EpochPlan(*impl_->dataset, impl_->budget_field, impl_->options, 0).batches();
  return impl_->planned_batches.compare_exchange_strong(known, count) ? count : known;
}

LoaderState Loader::state() const {
  const LoaderOptions& o = impl_->options;
  LoaderState s;
  s.seed = o.seed;
  s.epoch = impl_->state_epoch.load();
  s.next_batch = impl_->state_next.load();
  s.samples = impl_->epoch_samples;
  s.shuffle = o.shuffle;
  s.position = impl_->state_position.load();
  s.plan = detail::EpochPlan::plan_key(o);
  s.selection = impl_->dataset->selection_key();
  return s;
}

const LoaderOptions& Loader::options() const noexcept { return impl_->options; }

detail::LoaderImpl::~LoaderImpl() {
  if (!engine || !ring) return;
  // The device buffers go back to the cache behind the consumer's last work on them; the
  // staging slots are freed once no copy reads them.
  try {
    for (std::size_t d = 0; d < ring->device_count(); ++d) {
      engine->wait(ring->device(static_cast<std::uint32_t>(d)).released);
    }
    engine->synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor has no one to tell
  }
}

LoaderStats Loader::stats() const {
  const detail::LoaderImpl& i = *impl_;
  auto seconds = [](const std::atomic<std::uint64_t>& ns) {
    return static_cast<double>(ns.load()) * 1e-9;
  };
  LoaderStats s;
  s.batches = i.batches.load();
  s.samples = i.samples.load();
  s.bytes = i.bytes.load();
  s.skipped = i.skipped.load();
  {
    std::lock_guard lock(impl_->reasons_mutex);
    s.skip_reasons = i.skip_reasons;
  }
  s.read_seconds = seconds(i.read_ns);
  s.network_wait_seconds = std::max(0.0, i.dataset->network_wait_seconds() - i.network_wait_base);
  s.slot_wait_seconds = seconds(i.slot_wait_ns);
  s.copy_seconds = i.engine ? i.engine->busy_seconds() : 0.0;
  s.consumer_wait_seconds = seconds(i.consumer_wait_ns);
  s.wall_seconds = seconds(i.wall_ns);
  s.worker_capacity_seconds = s.wall_seconds * i.workers;
  s.first_batch_seconds = seconds(i.first_batch_ns);
  s.device_allocations = i.device_allocations;
  s.host_syncs = i.host_syncs.load();
  s.background_syncs = i.background_syncs.load();
  s.staging_allocations = i.ring->slot_allocations();
  s.workers = i.tuning.workers.load();
  s.prefetch = i.ring->limit();
  s.memory_bytes = detail::memory_now(i);
  s.memory_budget = i.tuning.budget;
  s.autotune = i.tuning.enabled;
  if (i.tuning.enabled) {
    // Worker time of the windows closed so far (the workers changed between them).
    s.worker_capacity_seconds = static_cast<double>(i.tuning.capacity_ns.load()) * 1e-9;
    std::lock_guard lock(i.tuning.decisions_mutex);
    s.autotune_decisions.assign(i.tuning.decisions.begin(), i.tuning.decisions.end());
  }
  s.source_samples.resize(i.sources);
  for (std::size_t k = 0; k < i.sources; ++k) s.source_samples[k] = i.source_samples[k].load();
  return s;
}

}  // namespace ferry
