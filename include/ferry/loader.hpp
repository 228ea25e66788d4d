#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/device.hpp"
#include "ferry/export.hpp"
#include "ferry/stream.hpp"
#include "ferry/tensor.hpp"

namespace ferry {

/// What the loader does with a sample whose read() throws.
enum class ErrorPolicy {
  raise,  ///< the epoch stops: next() rethrows it as DataError naming the sample index
  skip,   ///< the sample is left out of its batch, counted and its reason kept (stats())
};

/// How samples of a ragged field (FieldSpec::shape[0] == ragged) form a batch.
enum class RaggedBatch {
  pad,   ///< [N, Lmax, ...]: each sample's rows, then pad_value up to the batch's longest
  pack,  ///< [sum L, ...]: the samples' rows one after another; Batch::offsets gives the starts
};

struct FERRY_API LoaderOptions {
  std::size_t batch_size = 32;
  bool shuffle = false;
  std::uint64_t seed = 0;
  bool drop_last = false;  ///< drop the last partial batch (and the shard remainder)
  int workers = 0;         ///< oneTBB worker threads; 0: one per core
  int prefetch = 4;        ///< pinned staging slots (batches in flight), >= 1
  int device_buffers = 2;  ///< device buffers (double buffering), >= 2
  Device device = Device::best();
  bool pin_memory = true;  ///< page-locked staging when copying to a GPU
  int rank = 0, world_size = 1;
  ErrorPolicy on_error = ErrorPolicy::raise;
  RaggedBatch ragged = RaggedBatch::pad;  ///< ragged fields: padded or packed
  double pad_value = 0;                   ///< pad: the value of padding rows (as the field's dtype)
  std::int64_t pad_multiple = 1;          ///< pad: Lmax rounded up to a multiple of this, >= 1
  /// > 0: dynamic batches. Consecutive samples of the epoch's order form a batch while its
  /// tokens stay <= max_tokens (pack: the sum of the lengths of the first ragged field; pad:
  /// N x Lmax after pad_multiple), at most batch_size of them; a sample over the budget alone is
  /// a batch of one. A batch never crosses the end of a planning window of the order (65,536
  /// samples, or bucket_window), so an epoch is planned a window at a time, whatever its size.
  /// Batches are then dealt to the ranks in turn (wrapping, or dropping the remainder with
  /// drop_last). Deterministic from (seed, epoch); resumable at any batch.
  std::size_t max_tokens = 0;
  /// > 0: length bucketing. Each window of this many samples of the shuffled order is sorted by
  /// the first ragged field's length before it is cut into batches, and the window's batches
  /// are then shuffled (from seed and epoch): similar lengths share a batch, so padding falls.
  std::size_t bucket_window = 0;
  /// > 0, with shuffle, for a dataset stored in shards (Dataset::shard_starts(), e.g.
  /// WebDataset): the shards are permuted, taken this many at a time, and the samples shuffled
  /// within each such window, so that an epoch reads a few shards at a time instead of jumping
  /// across all of them. Deterministic from (seed, epoch); resumable at any batch. Not with
  /// max_tokens or bucket_window (ConfigError), nor for a dataset without shards.
  std::size_t shuffle_window = 0;
  /// The CUDA stream the consumer computes on (a cudaStream_t; nullptr: the default stream).
  /// Each batch's tensors are ordered on it (the stream waits for the copy, on the GPU), so
  /// `to_dlpack(stream)` with this same stream hands a batch over with no wait at all.
  CUstream_st* stream = nullptr;
  /// Choose workers and prefetch while the loader runs, from its own measurements (the
  /// consumer's wait, the workers' busy time), within memory_budget. On by default; false keeps
  /// `workers` and `prefetch` as given. `workers` (0: half the cores) and `prefetch` are where
  /// it starts; it never goes above the machine's cores. The batches are the same, bit for bit,
  /// whatever it chooses. LoaderStats::autotune_decisions says what it did and why.
  bool autotune = true;
  /// Bytes the loader may hold: staging slots, device buffers, an estimate of the workers'
  /// per-thread scratch (one sample's bytes per worker), and what the dataset holds for its
  /// reads (Dataset::reader_memory: a Python dataset's worker processes). Under autotune a hard cap
  /// on the slots and workers it adds; 0 there: default_memory_budget(), or what the options ask
  /// for at the start (`prefetch` slots, the device buffers, `workers`) where that is more, so no
  /// options are refused for the default. Without autotune the options must fit in it; 0: no cap.
  /// \throws ConfigError (at construction) when it cannot hold the minimum pipeline (one slot,
  /// the device buffers, one worker) or, without autotune, what the options ask for.
  std::uint64_t memory_budget = 0;

  /// Options for this process of a distributed job, from its launcher's environment:
  /// RANK / WORLD_SIZE / LOCAL_RANK (torchrun) or OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK
  /// (mpirun). A variable, when set, is one or more ASCII digits whose value fits int: no
  /// sign, blanks or other text (leading zeros are read as decimal); set but empty is an error.
  /// A launcher's rank and world size come together (its local rank is optional), with
  /// 0 <= rank < world_size and local rank < world_size; where both launchers' variables are
  /// set they must agree. None set: rank 0 of 1. The device is cuda:LOCAL_RANK (cuda:0 without
  /// a local rank); on a machine without any usable GPU it is the CPU, as Device::best().
  /// \throws ConfigError quoting the variable for a value or a layout outside this;
  /// DeviceError naming LOCAL_RANK and the GPU count when GPUs exist but not that one.
  static LoaderOptions from_env();
};

/// The memory budget autotune keeps to when LoaderOptions::memory_budget is 0: an eighth of the
/// memory this process may use (the machine's physical memory, or its cgroup's memory limit
/// where that is lower).
FERRY_API std::uint64_t default_memory_budget() noexcept;

/// Where a run stands, to resume it exactly, on this job or on one of another world size or
/// batch_size:
/// "ferry-state v2 seed=S epoch=E next_batch=K samples=N shuffle=0|1 position=P plan=H".
///
/// The ranks of a job consume in lockstep: after each rank has received k batches of a run, the
/// job has consumed a prefix of the epoch's global order (the dataset's positions, permuted from
/// (seed, epoch) when shuffling), and `position` is its length: k x batch_size x world_size
/// samples, or with dynamic batches the samples of the first k x world_size global batches,
/// capped at the dataset size. So a state taken on any rank between steps is the job's state.
/// Loader::resume continues from `position` with the resuming loader's own world size and
/// batch_size: each sample of the epoch arrives once over the two runs, except the padding that
/// makes the ranks' last batches equal (samples of the epoch's start, again).
struct FERRY_API LoaderState {
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  std::size_t next_batch = 0;  ///< the number (Batch::number) of the rank's next batch
  std::uint64_t samples = 0;   ///< the epoch's samples (positions), which the order permutes
  bool shuffle = false;        ///< whether the order is shuffled
  std::uint64_t position = 0;  ///< samples of the epoch's global order consumed
  /// 0 when any batch_size and max_tokens may resume the position; with bucket_window, a key
  /// of the options that cut the epoch into batches, which the resuming loader must share.
  std::uint64_t plan = 0;
  /// 0 when an epoch holds every sample of the dataset once; for a dataset that chooses its
  /// epochs' samples (a Mixture), its Dataset::selection_key(), which the resuming loader's
  /// dataset must share.
  std::uint64_t selection = 0;

  /// "ferry-state v2 seed=S epoch=E next_batch=K samples=N shuffle=0|1 position=P plan=H",
  /// then " selection=X" when selection != 0.
  std::string str() const;
  /// Reads what str() writes, and only that: the line above with single spaces, S, E, K, N, P,
  /// H, X decimal without sign or leading zero ("0" aside) within their types, X not 0, shuffle 0
  /// or 1, nothing before or after (no trailing newline). parse(s.str()) == s, and
  /// parse(t).str() == t for every text t it accepts. (A v1 state, of ferry before elastic
  /// resume, lacks the position and is refused.)
  /// \throws ConfigError quoting the text and naming what was expected at which byte.
  static LoaderState parse(std::string_view text);
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

/// One change autotune made (LoaderOptions::autotune).
struct FERRY_API AutotuneDecision {
  std::uint64_t batch = 0;  ///< batches delivered (since the loader was made) when it was made
  int workers = 0;          ///< workers from then on
  int prefetch = 0;         ///< staging slots in use from then on
  std::string reason;       ///< e.g. "raised workers: the consumer waited 40% while ..."
};

/// Time and volume per stage, summed since the loader was made.
struct FERRY_API LoaderStats {
  std::uint64_t batches = 0;              ///< delivered to the consumer
  std::uint64_t samples = 0;              ///< delivered
  std::uint64_t bytes = 0;                ///< delivered batch bytes (staging layout)
  std::uint64_t skipped = 0;              ///< samples left out under ErrorPolicy::skip
  std::vector<std::string> skip_reasons;  ///< the first 100 reasons
  double read_seconds = 0;                ///< workers inside Dataset::read (summed over threads)
  /// Of read_seconds: reads waiting for a file still being fetched from a server
  /// (Dataset::network_wait_seconds, what it grew by since this loader was made).
  double network_wait_seconds = 0;
  double worker_capacity_seconds = 0;  ///< workers × time batches were being filled
  double slot_wait_seconds = 0;        ///< planning waited for a free staging slot
  double copy_seconds = 0;             ///< the copy stream busy with copies
  double consumer_wait_seconds = 0;    ///< next() waited for data
  double wall_seconds = 0;             ///< epochs' wall time
  double first_batch_seconds = 0;      ///< epoch start to first batch, last epoch
  /// Staging slots ever allocated (prefetch; autotune: as made, again when made after autotune
  /// gave one back).
  std::uint64_t staging_allocations = 0;
  std::uint64_t device_allocations = 0;  ///< device buffers ever allocated
  /// Times the consumer's thread was blocked by the loader until device work finished (inside
  /// next() and when a batch is let go): 0 per batch once an epoch runs (ferry::host_sync_count
  /// says what counts).
  std::uint64_t host_syncs = 0;
  /// Times the loader's own threads blocked on device work: the planner waiting until a staging
  /// slot's copy is done before it refills the slot (back-pressure from a slow consumer).
  std::uint64_t background_syncs = 0;
  int workers = 0;                 ///< workers in use now (autotune's choice, or the option's)
  int prefetch = 0;                ///< staging slots in use now (autotune's choice, or the option)
  std::uint64_t memory_bytes = 0;  ///< the loader's own memory now (see memory_budget)
  /// The cap it keeps to: LoaderOptions::memory_budget, or under autotune the default (see
  /// there) when that is 0; 0: none.
  std::uint64_t memory_budget = 0;
  bool autotune = false;  ///< LoaderOptions::autotune
  /// Autotune's last 64 changes, oldest first.
  std::vector<AutotuneDecision> autotune_decisions;
  /// Samples delivered from each source of a dataset made of sources (Dataset::num_sources(),
  /// a Mixture's, in their order); empty for any other dataset.
  std::vector<std::uint64_t> source_samples;
  /// What a front end adds (the Python module: why a Python dataset runs on threads, not worker
  /// processes); summary() ends with them.
  std::vector<std::string> notes;

  /// Fraction of wall time the consumer waited for data.
  double consumer_wait_fraction() const noexcept;
  /// Fraction of worker capacity spent reading.
  double worker_busy_fraction() const noexcept;
  /// One line that names the bottleneck, e.g. "input-bound: the consumer waited 41% of wall
  /// time; workers were 98% busy", or "network-bound: ..." when the consumer waited and the
  /// reads spent most of their time waiting for files from the server; under autotune followed
  /// by its choice and its last reason, e.g. "; autotune: 2 workers, prefetch 6 (raised prefetch:
  /// the consumer waited 40% while workers were 20% busy)".
  std::string summary() const;
};

class Loader;
namespace detail {
class EpochRun;
class Lease;
struct LoaderImpl;
struct SimulatedCopy;
Loader make_loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options,
                   const SimulatedCopy& simulated);
}  // namespace detail

/// One batch: a tensor per field, [batch, ...field shape], on the loader's device.
///
/// A Batch handed out by the epoch's iterator is valid until the iterator advances. To keep
/// one longer, copy it (or keep any of its tensors): the copy takes its buffer out of the ring
/// until the last copy goes. Keeping as many batches as there are buffers stalls the ring;
/// next() then throws ConfigError instead of waiting for ever.
class FERRY_API Batch {
 public:
  Batch() = default;
  /// The field's tensor. \throws ConfigError for an unknown name.
  const Tensor& operator[](std::string_view field) const;
  /// The field's tensor by position in Dataset::fields(). \throws ConfigError out of range.
  const Tensor& at(std::size_t field) const;
  /// A ragged field's rows per sample: i64 [N], on the batch's device.
  /// \throws ConfigError for an unknown or fixed-shape field.
  const Tensor& lengths(std::string_view field) const;
  /// A packed ragged field's sample starts: i32 [N + 1] (FlashAttention's cu_seqlens), sample i
  /// being rows [offsets[i], offsets[i + 1]), on the batch's device.
  /// \throws ConfigError for an unknown or fixed-shape field, or under RaggedBatch::pad.
  const Tensor& offsets(std::string_view field) const;
  /// Samples in this batch.
  std::size_t size() const noexcept { return indices_.size(); }
  /// Dataset indices, in batch order.
  std::span<const std::uint64_t> indices() const noexcept { return indices_; }
  /// The batch's position in its epoch.
  std::size_t number() const noexcept { return number_; }
  /// Completes when the batch is on its device (the copy stream's event).
  const Event& ready_event() const noexcept { return ready_; }

 private:
  friend class detail::EpochRun;
  std::size_t field_index(std::string_view field) const;
  std::vector<Tensor> tensors_;
  std::vector<Tensor> lengths_;  // per field; undefined for fixed-shape fields
  std::vector<Tensor> offsets_;  // per field; packed ragged fields only
  std::shared_ptr<const std::vector<std::string>> names_;
  std::vector<std::uint64_t> indices_;
  std::size_t number_ = 0;
  Event ready_;
  std::shared_ptr<detail::Lease> lease_;
};

/// One epoch being iterated: `for (const Batch& b : loader.epoch(e))`. Move-only. Destroying
/// it early stops the pipeline promptly and frees everything in flight. Iterate it from one
/// thread.
class FERRY_API Epoch {
 public:
  class iterator {
   public:
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    const Batch& operator*() const noexcept { return *batch_; }
    const Batch* operator->() const noexcept { return batch_; }
    /// Moves to the next batch. \throws DataError, DeviceError, ConfigError (see next()).
    iterator& operator++();
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept {
      return it.batch_ == nullptr;
    }

   private:
    friend class Epoch;
    explicit iterator(Epoch* epoch);
    Epoch* epoch_ = nullptr;
    const Batch* batch_ = nullptr;
  };

  Epoch(Epoch&&) noexcept;
  Epoch& operator=(Epoch&&) noexcept;
  Epoch(const Epoch&) = delete;
  Epoch& operator=(const Epoch&) = delete;
  ~Epoch();

  /// The first batch's iterator (fetches it). Call once.
  iterator begin();
  std::default_sentinel_t end() const noexcept { return {}; }
  /// The next batch, or nullptr after the last. The previous batch is released.
  /// \throws DataError for a sample that failed under ErrorPolicy::raise, DeviceError for a
  /// CUDA failure, and whatever failed on the pipeline's own threads (an allocation, say), as
  /// it was; each after the batches before it were delivered. The epoch is over then, its
  /// buffers are back in the ring, and the loader can start another.
  const Batch* next();
  /// next(), waiting at most `timeout` for data: false when none came in time (nothing is lost;
  /// call again), else true with `batch` what next() returns. A caller that must stay
  /// responsive while it waits (to run signal handlers, say) waits in such slices.
  /// \throws as next().
  bool try_next(std::chrono::nanoseconds timeout, const Batch*& batch);
  /// Batches this epoch yields in all (from its start batch).
  std::size_t size() const noexcept;
  /// Stops the epoch from any thread (a watchdog, a signal's helper): a next() waiting for data
  /// on the consumer's thread wakes and throws Error "Loader: the epoch was cancelled", as does
  /// every later next(); the batches already delivered stay valid. The pipeline's threads stop;
  /// they are joined when the Epoch is destroyed (after any read still running returns), and the
  /// loader can then start another epoch. The Epoch must outlive the call.
  void cancel() noexcept;

 private:
  friend class Loader;
  FERRY_HIDDEN explicit Epoch(std::unique_ptr<detail::EpochRun> run) noexcept;
  std::unique_ptr<detail::EpochRun> run_;
};

/// Feeds a training loop: batches of `dataset`, already on `options.device`. One epoch is
/// iterated at a time; call epoch() again for the next. Staging slots and device buffers are
/// made once and reused by every epoch.
class FERRY_API Loader {
 public:
  /// Staging slots hold min(batch_size, samples per rank): a batch size beyond the data costs
  /// only what the data needs.
  /// \throws ConfigError for bad options (batch_size 0, prefetch or device_buffers outside
  /// [1, 1024] or [2, 1024], workers outside [0, 1024], rank outside [0, world_size), a field
  /// whose batch does not fit in memory sizes), DeviceError for an unusable device.
  Loader(std::shared_ptr<const Dataset> dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;
  Loader(Loader&&) noexcept;
  Loader& operator=(Loader&&) noexcept;

  /// Starts epoch `e` at batch `start_batch` (0: from the beginning): the same batches, in
  /// the same order, as an uninterrupted run would give from there. An epoch stops counting as
  /// iterated once next() has returned nullptr or thrown, so `ep = loader.epoch(e + 1)` works.
  /// \throws ConfigError when another epoch of this loader is still being iterated; Error when
  /// the pipeline's threads cannot start.
  Epoch epoch(std::uint64_t e, std::size_t start_batch = 0);
  /// Continues where `state` (from state(), perhaps of another process, or of a job of
  /// another world size or batch_size) left off: the rest of the state's epoch, from its global
  /// position, dealt to this loader's ranks. Where this loader's own batches reach that position
  /// exactly (same world size and batch_size), the epoch is epoch(state.epoch, k), numbers and
  /// padding included; otherwise its batches are numbered from 0 and Epoch::size() counts them.
  /// \throws ConfigError when the state's seed, dataset size, shuffle or plan is not this
  /// loader's, or a bucketed epoch's position falls inside one of this loader's batches.
  Epoch resume(const LoaderState& state);
  /// What resume() checks before it starts anything: whether `state` belongs to this loader's
  /// order (seed, dataset size, selection, shuffle, plan, position). \throws ConfigError as
  /// resume().
  void check_state(const LoaderState& state) const;
  /// Batches per epoch for this rank.
  std::size_t batches_per_epoch() const;
  /// Where the consumer stands: the epoch last started, the next batch it would receive and
  /// the job's global position, assuming every rank has received as many batches (take it
  /// between steps).
  LoaderState state() const;
  LoaderStats stats() const;
  const LoaderOptions& options() const noexcept;

 private:
  friend Loader detail::make_loader(std::shared_ptr<const Dataset>, const LoaderOptions&,
                                    const detail::SimulatedCopy&);
  FERRY_HIDDEN explicit Loader(std::shared_ptr<detail::LoaderImpl> impl) noexcept;
  std::shared_ptr<detail::LoaderImpl> impl_;
};

}  // namespace ferry
