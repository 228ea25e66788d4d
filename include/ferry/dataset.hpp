#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ferry/dtype.hpp"
#include "ferry/export.hpp"
#include "ferry/ops.hpp"
#include "ferry/tensor.hpp"

namespace ferry {

/// FieldSpec::shape[0] of a variable-length field: each sample has its own number of rows
/// (Dataset::length), and the loader pads or packs them into a batch (LoaderOptions::ragged).
inline constexpr std::int64_t ragged = -1;

/// One field of a sample: its name, element type and per-sample shape ({} for a scalar). A
/// shape whose first dimension is `ragged` is variable-length in that dimension.
struct FERRY_API FieldSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  /// Set for an image field the loader normalizes on its device: the dataset writes u8
  /// [H, W, C] (dtype and shape above), and batches deliver normalize->dtype [N, C, H, W],
  /// converted after the copy (on the CPU, by the worker right after read()).
  std::optional<Normalize> normalize = std::nullopt;

  /// Bytes of one sample of this field, as the dataset writes it (for a ragged field: of one
  /// row, shape[1:]).
  std::size_t sample_bytes() const noexcept;
  /// Whether the first dimension is `ragged`.
  bool is_ragged() const noexcept { return !shape.empty() && shape[0] == ragged; }
  friend bool operator==(const FieldSpec&, const FieldSpec&) = default;
};

namespace detail {
struct SlotLayout;
struct SampleRefs;
struct BatchRows;
}  // namespace detail

/// Where Dataset::read() writes one sample: its place inside the batch being filled, one
/// region per field, in the order of Dataset::fields(). A plain view, valid during read().
class FERRY_API SampleRef {
 public:
  /// The bytes of field `field` for this sample. \pre field < fields().size().
  void* data(std::size_t field) const;
  /// Their size: FieldSpec::sample_bytes() of that field; for a ragged field, exactly
  /// Dataset::length(index, field) rows of it.
  std::size_t nbytes(std::size_t field) const;
  /// Typed data(); the caller knows the field's dtype.
  template <class T>
  T* as(std::size_t field) const {
    return static_cast<T*>(data(field));
  }
  /// A seed for this sample's randomness (augmentation), from (seed, epoch, index) only: the
  /// same whatever the worker count, world size or timing. For a dataset that selects its
  /// epochs' samples (a Mixture), the sample's position in the epoch takes the index's place, so
  /// that each copy of a sample the epoch holds twice has a seed of its own.
  std::uint64_t seed() const noexcept { return seed_; }

 private:
  friend struct detail::SampleRefs;  // the loader, and tests, make them
  SampleRef(const detail::SlotLayout* layout, std::byte* batch, std::size_t position,
            std::uint64_t seed, const detail::BatchRows* rows = nullptr) noexcept
      : layout_(layout), batch_(batch), position_(position), seed_(seed), rows_(rows) {}
  const detail::SlotLayout* layout_;
  std::byte* batch_;
  std::size_t position_;
  std::uint64_t seed_;
  const detail::BatchRows* rows_;  // where ragged fields' samples lie in this batch
};

/// Random-access samples. read() is called from many threads at once, for different indices.
class FERRY_API Dataset {
 public:
  Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;
  virtual ~Dataset() = default;

  /// Number of samples.
  virtual std::size_t size() const = 0;
  /// The fields every sample has; fixed for the dataset's life.
  virtual std::vector<FieldSpec> fields() const = 0;
  /// Writes sample `index` into `out`'s fields. Throws (preferably DataError naming the file
  /// and place) when the sample cannot be read; the loader adds the sample index.
  virtual void read(std::size_t index, SampleRef out) const = 0;
  /// Rows (shape[0]) of sample `index`'s ragged field `field`; asked before read() (and of
  /// every sample when a loader is made, if max_length() does not answer), so it must be cheap
  /// and always give the same answer. The default throws ConfigError: a dataset with ragged
  /// fields overrides it.
  virtual std::int64_t length(std::size_t index, std::size_t field) const;
  /// The most rows any sample has in ragged field `field`, when the dataset knows it without
  /// asking every sample (from an index it holds, a header): a loader sizes its staging slots
  /// by it and asks length() only of the samples it plans. -1 (the default): not known, and a
  /// loader asks length() of every sample once, when it is made. A sample found longer when its
  /// batch is planned is a DataError naming it.
  virtual std::int64_t max_length(std::size_t field) const {
    static_cast<void>(field);
    return -1;
  }
  /// A hint that read(index) follows soon on this thread (the loader gives it a few samples
  /// ahead). The default does nothing; a dataset in memory can start loading the sample's cache
  /// lines, so that reads in shuffled order do not wait on each miss in turn.
  virtual void prefetch(std::size_t index) const noexcept { static_cast<void>(index); }
  /// A hint that the samples `indices` will be read, in this order, from now on: the loader
  /// gives it on its planner thread as each epoch (or a resumed run of one) starts, with its
  /// rank's whole share of the epoch in reading order, before any of its reads. A later call
  /// replaces the one before. A dataset whose files come from a server (WebDataset over URLs)
  /// fetches them ahead in this order and lets each go from its hold after its last planned
  /// read; the default does nothing. Never throws: a hint that cannot be taken is dropped.
  virtual void will_read(std::span<const std::size_t> indices) const noexcept {
    static_cast<void>(indices);
  }
  /// Reads of this thread's next samples, in this order, into these places (one worker's share
  /// of a batch): read() follows for each of `indices` in turn, unless the batch stops first,
  /// and end_reads() always follows, on the same thread. Lets a dataset that reads elsewhere (a
  /// Python dataset's worker processes) start the reads ahead. The default does nothing. Never
  /// throws: a hint that cannot be taken is dropped.
  virtual void begin_reads(std::span<const std::size_t> indices,
                           std::span<const SampleRef> out) const noexcept {
    static_cast<void>(indices);
    static_cast<void>(out);
  }
  /// The reads that begin_reads() announced are over (all made, or the batch stopped).
  virtual void end_reads() const noexcept {}
  /// How many samples a worker's share of a batch (begin_reads) should hold, for a dataset whose
  /// shares cost a hand-over (a Python dataset's worker processes: between two shares its
  /// process waits for the thread to wake, take the next share and send it). The loader's own
  /// shares are a quarter of a worker's part of a batch; it makes them larger, up to the whole
  /// batch, for a dataset that asks for more. The default, 0, asks for none.
  virtual std::size_t read_share() const noexcept { return 0; }
  /// Whether will_read() uses its hint: the loader builds an epoch's order for it (8 bytes a
  /// sample) only then. The default, false, goes with the default will_read().
  virtual bool wants_read_order() const noexcept { return false; }
  /// Seconds read() has waited for the network (a file not yet fetched) since the dataset was
  /// opened, summed over the threads that read. The loader reports what its own epochs added
  /// as LoaderStats::network_wait_seconds. The default (a dataset that never waits on a
  /// transfer while it is read) is 0.
  virtual double network_wait_seconds() const noexcept { return 0; }
  /// The most bytes of memory the dataset holds for a loader's reads beside the loader's own
  /// (a Python dataset's worker processes: each one's shared window of samples), given the
  /// bytes of one sample as the loader lays it out (a ragged field at its longest).
  /// LoaderStats::memory_bytes counts them and LoaderOptions::memory_budget holds them, asked
  /// once, when a loader is made. The default: 0.
  virtual std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept {
    static_cast<void>(sample_bytes);
    return 0;
  }
  /// A loader with a memory budget leaves `bytes` of it for what the dataset holds for its reads
  /// (told when the loader is made, before it asks reader_memory() again): a dataset whose
  /// holdings can shrink (a table's cache of decoded row groups) keeps them within `bytes` where
  /// it can, and reader_memory() says what it holds then, which the loader checks against its
  /// budget. The default does nothing.
  virtual void fit_reader_memory(std::uint64_t bytes) const noexcept { static_cast<void>(bytes); }
  /// Whether other processes do the dataset's reads and write the samples straight into the
  /// places read() is given (a Python dataset's worker processes): the loader then makes its
  /// staging slots of shared memory (SharedBuffer) that they map. The default: false.
  virtual bool shares_staging() const noexcept { return false; }
  /// A staging slot whose batch was let go, on the CPU path of a loader whose dataset
  /// shares_staging(): its bytes are not needed until the slot is written again, which
  /// staging_reused() precedes. A dataset whose processes map the slot may have one of them give
  /// its memory pages back meanwhile (a slot then holds memory only while it holds a batch). The
  /// default does nothing. Never throws; called on the thread that let the batch go.
  virtual void staging_released(std::span<std::byte> slot) const noexcept {
    static_cast<void>(slot);
  }
  /// Before anything writes into `slot` again (a batch's reads begin): a give-back that
  /// staging_released() started is finished or called off, so that it never takes a byte written
  /// after this. The default does nothing. Never throws.
  virtual void staging_reused(std::span<std::byte> slot) const noexcept { static_cast<void>(slot); }
  /// The samples as rows in memory, when that is what the dataset is: one tensor per field, in
  /// fields() order, whose dimension 0 is the sample, so that field f of sample i is exactly
  /// row i of rows_in_memory()[f]. Empty (the default) otherwise. A loader gathers batches from
  /// these rows itself: on the device when they live there (nothing crosses the bus), and a loader
  /// on another device than the rows' GPU is refused. Any dataset made of tensors declares it.
  virtual std::span<const Tensor> rows_in_memory() const noexcept { return {}; }
  /// Where the samples are stored in units read best one after another (the shards of a
  /// WebDataset): the first sample of each unit, in order, then size(). Empty (the default) for
  /// a dataset without such units. LoaderOptions::shuffle_window orders an epoch by them.
  virtual std::span<const std::size_t> shard_starts() const noexcept { return {}; }

  /// For a dataset that chooses which of its samples an epoch holds (ferry::Mixture): a key of
  /// everything that decides the choice besides (seed, epoch), never 0; a LoaderState records it,
  /// and only a loader over the same choice resumes that state. 0 (the default): an epoch holds
  /// every sample once, and the loader asks neither epoch_size() nor epoch_indices().
  virtual std::uint64_t selection_key() const noexcept { return 0; }
  /// Samples in an epoch (when selection_key() != 0); the default: size().
  virtual std::size_t epoch_size() const { return size(); }
  /// The indices epoch `epoch` holds: epoch_size() of them, each below size(), repeats allowed,
  /// from (seed, epoch) only, in an unshuffled order. The loader orders their positions as it
  /// orders any dataset's samples (shuffled or not), deals them to ranks and resumes over them.
  /// Called when an epoch starts, on the caller's thread. The default: 0, 1, ..., size() - 1.
  virtual std::vector<std::uint64_t> epoch_indices(std::uint64_t seed, std::uint64_t epoch) const;
  /// Whether epoch_indices() is already the epoch's order (a dataset that arranges its batches,
  /// a stratified Mixture): the loader then deals it as it is, whatever LoaderOptions::shuffle.
  /// The default: false, the loader orders the positions itself.
  virtual bool orders_epoch() const noexcept { return false; }
  /// Whether epoch_index() gives any position of an epoch directly, in O(1) and without the
  /// epoch's list (a Mixture that is not stratified): the loader then never builds an epoch's
  /// list of indices (8 bytes a sample), it asks each position's index when it plans it. The
  /// default: false.
  virtual bool indexes_epoch() const noexcept { return false; }
  /// epoch_indices(seed, epoch)[position]: the index at `position` of epoch `epoch`, computed
  /// without the list where indexes_epoch() says so. Called from the loader's planner thread and
  /// the caller's, at once. \pre position < epoch_size(). The default builds the list (O(epoch)).
  virtual std::uint64_t epoch_index(std::uint64_t seed, std::uint64_t epoch,
                                    std::uint64_t position) const;
  /// For a dataset made of sources (ferry::Mixture): how many; 0 (the default) otherwise.
  /// LoaderStats::source_samples counts the samples delivered from each.
  virtual std::size_t num_sources() const noexcept { return 0; }
  /// The source sample `index` comes from. \pre num_sources() > 0 and index < size().
  virtual std::size_t source_of(std::size_t index) const {
    static_cast<void>(index);
    return 0;
  }
};

/// A dataset of tensors that share dimension 0 (the sample): {{"x", x}, {"y", y}}. Field i is
/// named as given, with the tensor's dtype and its shape without dimension 0. When the tensors
/// live on a GPU and the loader runs on that GPU, batches are gathered there and nothing
/// crosses the bus.
class FERRY_API TensorDataset final : public Dataset {
 public:
  /// \throws ConfigError when there are no tensors, a name repeats, a tensor is a scalar,
  /// the tensors disagree on dimension 0 or live on different devices.
  explicit TensorDataset(std::vector<std::pair<std::string, Tensor>> tensors);

  std::size_t size() const override { return size_; }
  std::vector<FieldSpec> fields() const override { return fields_; }
  /// Copies row `index` of each tensor. \throws ConfigError for rows on a GPU (a loader on that
  /// GPU gathers them instead of reading).
  void read(std::size_t index, SampleRef out) const override;
  void prefetch(std::size_t index) const noexcept override;
  std::span<const Tensor> rows_in_memory() const noexcept override { return tensors_; }

  /// The tensors, in field order.
  const std::vector<Tensor>& tensors() const noexcept { return tensors_; }
  /// Where the tensors live.
  Device device() const noexcept;
  /// The same samples (fields, names, values) on `device`: put a dataset on the GPU once, and
  /// a loader on that GPU gathers every batch there. Tensors already on `device` keep their
  /// storage (no copy), so to(device()) shares everything with this one; others are copied,
  /// and this dataset is unchanged. Blocking. \throws DeviceError when `device` is not usable.
  std::shared_ptr<TensorDataset> to(Device device) const;

 private:
  std::vector<Tensor> tensors_;
  std::vector<const std::byte*> bases_;  // host tensors' first bytes
  std::vector<FieldSpec> fields_;
  std::size_t size_ = 0;
};

}  // namespace ferry
