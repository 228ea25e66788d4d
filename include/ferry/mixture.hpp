#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"

namespace ferry {

/// One dataset of a Mixture and its weight: > 0 and finite, relative to the other sources'.
struct FERRY_API MixtureSource {
  std::shared_ptr<const Dataset> dataset;
  double weight = 1;
};

struct FERRY_API MixtureOptions {
  /// Samples in an epoch; 0: the sum of the sources' sizes.
  std::size_t epoch_size = 0;
  /// When not empty: an extra field of this name, i64 [] (a scalar), last, holding the number
  /// of the source each sample comes from (for a loss per domain).
  std::string source_field;
  /// > 0: stratified batches of this many samples (a loader's batch_size x world_size). The
  /// epoch is laid out in blocks of this size, block g holding floor or ceil of
  /// size(g) x share_k / epoch_size samples of source k (still exactly share_k over the epoch),
  /// grouped by source, each source's samples shuffled from (seed, epoch); the mixture orders
  /// its epochs itself (Dataset::orders_epoch), whatever LoaderOptions::shuffle. So each batch of
  /// each rank of a run from the epoch's start holds each source's share of the batch to within
  /// one sample. 0: not stratified.
  std::size_t stratified = 0;
};

/// Weighted mixing of datasets with the same fields. Index offset(k) + i is sample i of source
/// k (offsets in the order given); source_of(index) gives k. read(), length() and prefetch()
/// forward to the source.
///
/// A loader over it plays epochs of epoch_size() samples in which source k gives exactly
/// shares()[k] = round(epoch_size x w_k / sum w) samples, by largest remainders (the floors,
/// then one more for the sources with the largest fractional parts, ties to the earlier
/// source), so the shares sum to epoch_size. Within source k of n samples and share
/// s = q x n + r: every sample is given q times, plus r more samples, taken from an endless
/// stream of passes over the source: epoch e takes the stream's positions [e x r, (e + 1) x r).
/// The epochs come in cycles of n / gcd(n, r) epochs, which take exactly r / gcd(n, r) passes;
/// every pass of a cycle is the same permutation of the source, from (seed, k, cycle), so the r
/// positions of an epoch are r consecutive places of that permutation taken round, all different
/// even where the epoch spans two passes. So every sample is given floor(s / n) or ceil(s / n)
/// times in each epoch (and floor or ceil of E x s / n times in any E consecutive epochs from
/// epoch 0), and a down-sampled source (s < n) gives a different subset each epoch, no sample
/// twice in an epoch, and no sample again until all of its samples have been given. A source
/// that itself chooses its epochs' samples (a Mixture) is sampled over its own epochs instead of
/// its indices: its passes are its epochs (from a seed of (seed, k)), each permuted; such a
/// source's positions are asked one by one where it gives them by position (so a nest of
/// mixtures costs the same at every epoch), else its lists are kept for the next epoch. Every
/// index such a source gives is checked (ConfigError naming the source, the position and its
/// size).
///
/// Which samples an epoch holds and their order come from (LoaderOptions::seed, epoch) only: the
/// loader asks epoch_indices() and shuffles, deals to ranks, plans max_tokens batches and
/// resumes over their positions as for any dataset. selection_key() (a key of the sources'
/// sizes and keys, the epoch size and the shares) goes into the LoaderState, so a state taken
/// under weights that give other shares, or another epoch size, is refused.
class FERRY_API Mixture final : public Dataset {
 public:
  /// \throws ConfigError for no sources, a null dataset, a weight that is not positive and
  /// finite, a source whose fields differ from the first's (naming the source and the field),
  /// a source without samples that has a share, a source_field that names a field already
  /// there, or a stratified epoch_size whose lists (24 bytes a sample) would not fit in the
  /// machine's memory. epoch_indices() too throws ConfigError, naming epoch_size, for a list that
  /// would not fit (a loader asks such an epoch by position instead, unless it is stratified).
  static std::shared_ptr<Mixture> open(std::vector<MixtureSource> sources,
                                       MixtureOptions options = {});

  std::size_t size() const override { return size_; }
  std::vector<FieldSpec> fields() const override { return fields_; }
  void read(std::size_t index, SampleRef out) const override;
  std::int64_t length(std::size_t index, std::size_t field) const override;
  /// The most of the sources' max_length(field); -1 when a source does not know its own.
  std::int64_t max_length(std::size_t field) const override;
  void prefetch(std::size_t index) const noexcept override;
  /// Each source that wants the read order (a WebDataset or TokenDataset of URLs) is told its
  /// own samples among `indices`, in their order, as its own indices.
  void will_read(std::span<const std::size_t> indices) const noexcept override;
  /// Whether any source wants the read order.
  bool wants_read_order() const noexcept override;
  /// The sources' waits for the network, summed.
  double network_wait_seconds() const noexcept override;
  /// Its sources' reader_memory(), summed.
  std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept override;
  /// `bytes` shared among its sources in proportion to their reader_memory().
  void fit_reader_memory(std::uint64_t bytes) const noexcept override;
  /// Whether any source's reads are done by other processes.
  bool shares_staging() const noexcept override;
  /// To each source that shares_staging().
  void staging_released(std::span<std::byte> slot) const noexcept override;
  void staging_reused(std::span<std::byte> slot) const noexcept override;

  std::uint64_t selection_key() const noexcept override { return key_; }
  std::size_t epoch_size() const override { return epoch_size_; }
  /// Source by source, in their order: each sample of the source q times in index order, then
  /// the epoch's r samples in the order of the stream of passes (see the class comment).
  /// Stratified: the same samples in blocks (MixtureOptions::stratified).
  std::vector<std::uint64_t> epoch_indices(std::uint64_t seed, std::uint64_t epoch) const override;
  /// Whether the mixture is stratified: it orders its epochs itself.
  bool orders_epoch() const noexcept override { return stratified_ > 0; }
  /// Not stratified, and every source that chooses its epochs' samples gives them by position
  /// too: then epoch_index() is O(1) (a binary search over the sources, then the copy or the
  /// pass that holds the position: one Feistel permutation, per level of nested mixtures), so
  /// no loader builds an epoch's list. A stratified mixture keeps its list (its blocks are laid
  /// out in one walk over the epoch).
  bool indexes_epoch() const noexcept override { return indexes_; }
  /// epoch_indices(seed, epoch)[position], directly when indexes_epoch().
  std::uint64_t epoch_index(std::uint64_t seed, std::uint64_t epoch,
                            std::uint64_t position) const override;
  std::size_t num_sources() const noexcept override { return sources_.size(); }
  /// \pre index < size().
  std::size_t source_of(std::size_t index) const override;

  /// Samples of each source in every epoch; they sum to epoch_size().
  const std::vector<std::size_t>& shares() const noexcept { return shares_; }
  /// The index of source k's first sample. \pre k < num_sources().
  std::size_t offset(std::size_t k) const noexcept { return offsets_[k]; }
  const MixtureSource& source(std::size_t k) const noexcept { return sources_[k]; }
  /// The options it was opened with (open() with other sources and these makes its twin).
  const MixtureOptions& options() const noexcept { return options_; }

 private:
  Mixture() = default;
  // epoch_indices()' samples (source after source) laid out in stratified blocks.
  std::vector<std::uint64_t> stratify(const std::vector<std::uint64_t>& by_source,
                                      std::uint64_t seed, std::uint64_t epoch) const;

  std::vector<MixtureSource> sources_;
  std::vector<std::size_t> offsets_;  // per source, then size()
  std::vector<std::size_t> sizes_;    // per source: its size(), or its epoch_size() if it selects
  std::vector<std::size_t> shares_;
  std::vector<std::size_t> share_starts_;  // per source, the epoch's position of its first; then
                                           // epoch_size()
  std::vector<FieldSpec> fields_;
  std::size_t size_ = 0;
  std::size_t epoch_size_ = 0;
  std::uint64_t key_ = 1;
  bool source_field_ = false;
  std::size_t stratified_ = 0;
  MixtureOptions options_;
  bool indexes_ = false;  // indexes_epoch()
  // The last epoch lists of the sources that select (and of this mixture, when it does not
  // index its epochs), kept for the next epoch, which often spans the same passes.
  struct ListCache;
  std::shared_ptr<ListCache> lists_;
  // Source k's epoch `pass` (seed `seed`), as a list, checked, and kept in lists_ if `keep`.
  std::shared_ptr<const std::vector<std::uint64_t>> inner_list(std::size_t k, std::uint64_t seed,
                                                               std::uint64_t pass,
                                                               bool keep = true) const;
  // Source k's index at `position` of its epoch `pass`, checked against its size.
  std::uint64_t inner_index(std::size_t k, std::uint64_t seed, std::uint64_t pass,
                            std::uint64_t position) const;
  // Sample `p` (< shares_[k]) of source k's part of an epoch, as an index of the source.
  std::uint64_t source_index(std::size_t k, std::uint64_t seed, std::uint64_t epoch,
                             std::uint64_t p) const;
};

}  // namespace ferry
