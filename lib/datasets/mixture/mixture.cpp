#include "ferry/mixture.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/memory_need.hpp"
#include "core/tsan.hpp"
#include "datasets/mixture/mixture_detail.hpp"
#include "datasets/mixture/pass_order.hpp"
#include "ferry/error.hpp"

namespace ferry {

namespace {

using mixture_detail::mix;
using mixture_detail::PassOrder;
using mixture_detail::u128;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// What differs between two fields of the same place, or empty.
std::string field_difference(const FieldSpec& a, const FieldSpec& b) {
  if (a.name != b.name) return "name \"" + b.name + "\" (not \"" + a.name + "\")";
  if (a.dtype != b.dtype) {
    return "dtype " + std::string(dtype_name(b.dtype)) + " (not " +
           std::string(dtype_name(a.dtype)) + ")";
  }
  if (a.shape != b.shape)
    return "shape " + shape_text(b.shape) + " (not " + shape_text(a.shape) + ")";
  if (a.normalize != b.normalize) return "normalize";
  return {};
}

// The address that marks for ThreadSanitizer how oneTBB hands out and joins the pieces of an
// epoch's list (core/tsan.hpp): at namespace scope, so that a piece names it without first
// reading its closure.
constexpr char pieces_edge = 0;

// Seeds of source k's streams: the extra samples' passes, and the full passes.
std::uint64_t stream_seed(std::uint64_t seed, std::size_t k) noexcept {
  return mix(mix(seed ^ 0x6d69787475726531ULL) + k);
}
std::uint64_t full_seed(std::uint64_t seed, std::size_t k) noexcept {
  return mix(mix(seed ^ 0x66756c6c70617373ULL) + k);
}

// Where position p (< r) of epoch e's r extra samples of a source of n (0 < r < n) lies in the
// stream of passes. The epochs come in cycles of n / g epochs (g = gcd(n, r)), which take
// exactly r / g passes; every pass of a cycle is the same permutation (cycle_order()), so an
// epoch's r positions are r consecutive places of it, taken round: all different.
struct StreamAt {
  std::uint64_t cycle;  // the cycle, which keys its passes' permutation
  std::uint64_t pass;   // the pass, counted from the stream's start
  std::uint64_t place;  // the place within the pass, before the permutation
};
StreamAt stream_at(std::uint64_t n, std::uint64_t r, std::uint64_t epoch, std::uint64_t p) {
  const std::uint64_t g = std::gcd(n, r);
  const std::uint64_t epochs = n / g;
  const std::uint64_t cycle = epoch / epochs;
  const u128 x = static_cast<u128>(epoch % epochs) * r + p;  // < n x r / g: within the cycle
  // cycle x (r / g) <= epoch x r / n < epoch: no overflow.
  return {cycle, cycle * (r / g) + static_cast<std::uint64_t>(x / n),
          static_cast<std::uint64_t>(x % n)};
}
PassOrder cycle_order(std::uint64_t n, std::uint64_t stream, std::uint64_t cycle) noexcept {
  return {n, mix(stream ^ mix(cycle + 1))};
}

// Lists kept by inner_list() (at most, in indices: 128 MiB).
constexpr std::size_t kKeptLists = 8;
constexpr std::size_t kKeptIndices = std::size_t{1} << 24;

}  // namespace

struct Mixture::ListCache {
  struct Entry {
    std::size_t k;
    std::uint64_t seed;
    std::uint64_t pass;
    std::shared_ptr<const std::vector<std::uint64_t>> list;
  };
  std::mutex mutex;
  std::vector<Entry> entries;  // the most recent last
};

std::shared_ptr<Mixture> Mixture::open(std::vector<MixtureSource> sources, MixtureOptions options) {
  if (sources.empty()) throw ConfigError("Mixture: no sources");
  std::shared_ptr<Mixture> m(new Mixture());
  double total = 0;
  for (std::size_t k = 0; k < sources.size(); ++k) {
    const MixtureSource& s = sources[k];
    const std::string which = "Mixture: source " + std::to_string(k);
    if (!s.dataset) throw ConfigError(which + " has no dataset");
    if (!(s.weight > 0) || !std::isfinite(s.weight)) {
      throw ConfigError(which + "'s weight must be positive and finite, got " +
                        std::to_string(s.weight));
    }
    total += s.weight;
    const std::vector<FieldSpec> fields = s.dataset->fields();
    if (k == 0) {
      m->fields_ = fields;
      continue;
    }
    if (fields.size() != m->fields_.size()) {
      throw ConfigError(which + " has " + std::to_string(fields.size()) + " fields, source 0 has " +
                        std::to_string(m->fields_.size()));
    }
    for (std::size_t f = 0; f < fields.size(); ++f) {
      const std::string diff = field_difference(m->fields_[f], fields[f]);
      if (!diff.empty()) {
        throw ConfigError(which + "'s field " + std::to_string(f) + " \"" + fields[f].name +
                          "\" differs from source 0's \"" + m->fields_[f].name + "\": " + diff);
      }
    }
  }
  if (!std::isfinite(total)) throw ConfigError("Mixture: the weights' sum is not finite");
  if (!options.source_field.empty()) {
    for (const FieldSpec& f : m->fields_) {
      if (f.name == options.source_field) {
        throw ConfigError("Mixture: source_field \"" + f.name + "\" is already a field");
      }
    }
    m->fields_.push_back(FieldSpec{std::move(options.source_field), DType::i64, {}});
    m->source_field_ = true;
  }

  // (The constant names the stream's layout: a state of another layout is refused.)
  std::uint64_t key = mix(0x6d69780000000002ULL ^ sources.size());
  std::size_t offset = 0;
  std::size_t all = 0;
  for (const MixtureSource& s : sources) {
    const std::size_t n = s.dataset->size();
    const std::uint64_t inner = s.dataset->selection_key();
    const std::size_t per_pass = inner != 0 ? s.dataset->epoch_size() : n;
    m->offsets_.push_back(offset);
    m->sizes_.push_back(per_pass);
    if (n > SIZE_MAX - offset) throw ConfigError("Mixture: the sources' sizes overflow");
    offset += n;
    if (per_pass > SIZE_MAX - all) throw ConfigError("Mixture: the sources' sizes overflow");
    all += per_pass;
    key = mix(key ^ n);
    key = mix(key ^ per_pass);
    key = mix(key ^ inner);
  }
  m->offsets_.push_back(offset);
  m->size_ = offset;
  m->epoch_size_ = options.epoch_size != 0 ? options.epoch_size : all;

  // Largest remainders: each source's floor, then one more for the largest fractional parts.
  const std::size_t e = m->epoch_size_;
  std::vector<long double> remainder(sources.size());
  m->shares_.resize(sources.size());
  std::size_t given = 0;
  for (std::size_t k = 0; k < sources.size(); ++k) {
    // e x w_k = share x total + remainder, the remainder exact (fmod), so that equal fractional
    // parts compare equal and go to the earlier source.
    const long double product = static_cast<long double>(e) * sources[k].weight;
    const long double rest = std::fmod(product, static_cast<long double>(total));
    const long double whole = std::round((product - rest) / total);
    m->shares_[k] = std::min<std::size_t>(static_cast<std::size_t>(whole), e);
    remainder[k] = rest;
    given += m->shares_[k];
  }
  std::vector<std::size_t> by_remainder(sources.size());
  std::iota(by_remainder.begin(), by_remainder.end(), std::size_t{0});
  std::stable_sort(by_remainder.begin(), by_remainder.end(),
                   [&](std::size_t a, std::size_t b) { return remainder[a] > remainder[b]; });
  // Rounding of the floors aside, fewer than sources.size() are missing.
  for (std::size_t i = 0; given < e; i = (i + 1) % sources.size()) {
    ++m->shares_[by_remainder[i]];
    ++given;
  }
  for (std::size_t i = sources.size(); given > e;) {  // floors rounded up past the total
    i = (i + sources.size() - 1) % sources.size();
    if (m->shares_[by_remainder[i]] > 0) {
      --m->shares_[by_remainder[i]];
      --given;
    }
  }
  for (std::size_t k = 0; k < sources.size(); ++k) {
    if (m->shares_[k] > 0 && m->sizes_[k] == 0) {
      throw ConfigError("Mixture: source " + std::to_string(k) + " has no samples but a share of " +
                        std::to_string(m->shares_[k]) + " per epoch");
    }
  }
  // The key: what decides the epochs besides (seed, epoch). The shares, not the weights: weights
  // that give the same shares give the same epochs.
  key = mix(key ^ m->epoch_size_);
  for (const std::size_t share : m->shares_) key = mix(key ^ share);
  m->stratified_ = options.stratified;
  m->options_ = options;
  if (m->stratified_ > 0) {
    // Its epochs are always listed: the list by source, shuffled, and in blocks.
    detail::check_need("Mixture: epoch_size " + std::to_string(e) + " with stratified " +
                           std::to_string(m->stratified_),
                       e, 3 * sizeof(std::uint64_t), "for a stratified epoch's three lists");
  }
  m->share_starts_.assign(1, 0);
  for (const std::size_t share : m->shares_) {
    m->share_starts_.push_back(m->share_starts_.back() + share);
  }
  m->indexes_ = m->stratified_ == 0 &&
                std::all_of(sources.begin(), sources.end(), [](const MixtureSource& s) {
                  return s.dataset->selection_key() == 0 || s.dataset->indexes_epoch();
                });
  if (m->stratified_ > 0) key = mix(key ^ mix(m->stratified_ ^ 0x737472617461ULL));
  m->key_ = key == 0 ? 1 : key;
  m->sources_ = std::move(sources);
  m->lists_ = std::make_shared<ListCache>();
  return m;
}

std::size_t Mixture::source_of(std::size_t index) const {
  // The last source whose first index is at most `index` (the last of equal starts: sources
  // without samples hold none). Of a few sources, by counting the starts at most `index`, with
  // no branch on them: a shuffled epoch goes from source to source at random, and a search
  // would mispredict about once a sample.
  constexpr std::size_t kCounted = 16;
  if (offsets_.size() <= kCounted + 1) {
    std::size_t k = 0;
    for (std::size_t i = 1; i + 1 < offsets_.size(); ++i) {
      k += offsets_[i] <= index ? 1U : 0U;
    }
    return k;
  }
  const auto at = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  return static_cast<std::size_t>(at - offsets_.begin()) - 1;
}

std::shared_ptr<const std::vector<std::uint64_t>> Mixture::inner_list(std::size_t k,
                                                                      std::uint64_t seed,
                                                                      std::uint64_t pass,
                                                                      bool keep) const {
  {
    const std::lock_guard lock(lists_->mutex);
    for (const ListCache::Entry& e : lists_->entries) {
      if (e.k == k && e.seed == seed && e.pass == pass) return e.list;
    }
  }
  const Dataset& d = *sources_[k].dataset;
  auto list = std::make_shared<const std::vector<std::uint64_t>>(d.epoch_indices(seed, pass));
  const std::size_t n = offsets_[k + 1] - offsets_[k];
  if (list->size() != sizes_[k]) {
    throw ConfigError("Mixture: source " + std::to_string(k) + "'s epoch_indices(" +
                      std::to_string(seed) + ", " + std::to_string(pass) + ") gave " +
                      std::to_string(list->size()) + " indices; its epoch_size() is " +
                      std::to_string(sizes_[k]));
  }
  for (std::size_t p = 0; p < list->size(); ++p) {
    if ((*list)[p] >= n) {
      throw ConfigError("Mixture: source " + std::to_string(k) + "'s epoch_indices(" +
                        std::to_string(seed) + ", " + std::to_string(pass) + ") hold index " +
                        std::to_string((*list)[p]) + " at position " + std::to_string(p) +
                        ", past its " + std::to_string(n) + " samples");
    }
  }
  if (keep && list->size() <= kKeptIndices) {
    const std::lock_guard lock(lists_->mutex);
    std::vector<ListCache::Entry>& kept = lists_->entries;
    kept.push_back({k, seed, pass, list});
    std::size_t indices = 0;
    for (const ListCache::Entry& e : kept) indices += e.list->size();
    while (kept.size() > kKeptLists || indices > kKeptIndices) {
      indices -= kept.front().list->size();
      kept.erase(kept.begin());
    }
  }
  return list;
}

std::uint64_t Mixture::inner_index(std::size_t k, std::uint64_t seed, std::uint64_t pass,
                                   std::uint64_t position) const {
  const Dataset& d = *sources_[k].dataset;
  if (!d.indexes_epoch()) return (*inner_list(k, seed, pass))[position];
  const std::uint64_t i = d.epoch_index(seed, pass, position);
  const std::size_t n = offsets_[k + 1] - offsets_[k];
  if (i >= n) {
    throw ConfigError("Mixture: source " + std::to_string(k) + "'s epoch_index(" +
                      std::to_string(seed) + ", " + std::to_string(pass) + ", position " +
                      std::to_string(position) + ") gave index " + std::to_string(i) +
                      ", past its " + std::to_string(n) + " samples");
  }
  return i;
}

std::vector<std::uint64_t> Mixture::epoch_indices(std::uint64_t seed, std::uint64_t epoch) const {
  detail::mixture_lists.fetch_add(1, std::memory_order_relaxed);
  std::vector<std::uint64_t> out;
  detail::allocating("Mixture: epoch_size " + std::to_string(epoch_size_), epoch_size_,
                     sizeof(std::uint64_t), "for an epoch's list",
                     [&] { out.reserve(epoch_size_); });
  for (std::size_t k = 0; k < sources_.size(); ++k) {
    const std::size_t n = sizes_[k];
    const std::size_t s = shares_[k];
    if (s == 0) continue;
    const Dataset& d = *sources_[k].dataset;
    const bool selects = d.selection_key() != 0;
    const std::uint64_t base = offsets_[k];
    const std::size_t q = s / n;
    const std::size_t r = s % n;
    // A pass of a source that selects is one of its epochs, from a seed of its own; a whole
    // pass is read as its list (each of its indices is used).
    for (std::size_t t = 0; t < q; ++t) {
      if (selects) {
        const auto list = inner_list(k, full_seed(seed, k), epoch * q + t, /*keep=*/false);
        for (const std::uint64_t i : *list) out.push_back(base + i);
      } else {
        for (std::size_t i = 0; i < n; ++i) out.push_back(base + i);
      }
    }
    if (r == 0) continue;
    // The epoch's r positions of the stream of passes, in the stream's order (so that
    // epoch_index() finds any of them directly), all in one cycle, so of one permutation. Each
    // place is a permutation's value, worked out on the idle workers in pieces (the loader asks
    // for an epoch's indices as it starts). A source that selects is asked its index at each
    // place where it gives them by position (a nest of mixtures then costs O(depth) a sample,
    // whatever the epoch), else its pass's list (kept for the next epoch, which often reads the
    // same pass).
    const std::uint64_t ks = stream_seed(seed, k);
    const StreamAt first = stream_at(n, r, epoch, 0);
    const PassOrder order = cycle_order(n, ks, first.cycle);
    const bool by_position = !selects || d.indexes_epoch();
    const std::size_t at_out = out.size();
    out.resize(at_out + r);
    const auto places = [&, base, n, r, k](std::size_t begin, std::size_t end) {
      // Pass c, place j of the piece's first position (one 128-bit division), then counted on.
      const StreamAt at = stream_at(n, r, epoch, begin);
      std::uint64_t c = at.pass;
      std::uint64_t j = at.place;
      if (!selects) {
        // The source's own indices: the piece's places in runs up to each pass's end, each
        // run permuted at once (PassOrder::apply).
        std::uint64_t* const to = out.data() + at_out;
        for (std::size_t i = begin; i < end;) {
          if (j == n) j = 0;
          const std::size_t run = static_cast<std::size_t>(std::min<std::uint64_t>(end - i, n - j));
          for (std::size_t t = 0; t < run; ++t) to[i + t] = j + t;
          order.apply(to + i, run);
          for (std::size_t t = 0; t < run; ++t) to[i + t] += base;
          i += run;
          j += run;
        }
        return;
      }
      std::shared_ptr<const std::vector<std::uint64_t>> list;
      for (std::size_t i = begin; i < end; ++i, ++j) {
        if (j == n) {
          j = 0;
          ++c;
          list.reset();
        }
        const std::uint64_t placed = order(j);
        std::uint64_t index = placed;
        if (selects && by_position) {
          index = inner_index(k, ks, c, placed);
        } else if (selects) {
          if (!list) list = inner_list(k, ks, c);
          index = (*list)[placed];
        }
        out[at_out + i] = base + index;
      }
    };
    constexpr std::size_t kPiece = 8192;
    if (!by_position || r < 2 * kPiece) {
      places(0, r);
    } else {
      // Pieces handed out and joined by oneTBB: `pieces_edge` marks that for ThreadSanitizer.
      FERRY_TSAN_RELEASE(&pieces_edge);
      tbb::parallel_for(tbb::blocked_range<std::size_t>(0, r, kPiece),
                        [&](const tbb::blocked_range<std::size_t>& piece) {
                          FERRY_TSAN_ACQUIRE(&pieces_edge);
                          places(piece.begin(), piece.end());
                          FERRY_TSAN_RELEASE(&pieces_edge);
                        });
      FERRY_TSAN_ACQUIRE(&pieces_edge);
    }
  }
  if (stratified_ == 0) return out;
  return stratify(out, seed, epoch);
}

std::uint64_t Mixture::source_index(std::size_t k, std::uint64_t seed, std::uint64_t epoch,
                                    std::uint64_t p) const {
  // As epoch_indices(): q copies of the source, then the epoch's positions of the stream.
  const std::uint64_t n = sizes_[k];
  const std::uint64_t s = shares_[k];
  const std::uint64_t q = s / n;
  const std::uint64_t r = s % n;
  const Dataset& d = *sources_[k].dataset;
  const bool selects = d.selection_key() != 0;
  if (p < q * n) {
    const std::uint64_t i = p % n;
    return selects ? inner_index(k, full_seed(seed, k), epoch * q + p / n, i) : i;
  }
  const std::uint64_t ks = stream_seed(seed, k);
  const StreamAt at = stream_at(n, r, epoch, p - q * n);
  const std::uint64_t placed = cycle_order(n, ks, at.cycle)(at.place);
  return selects ? inner_index(k, ks, at.pass, placed) : placed;
}

std::uint64_t Mixture::epoch_index(std::uint64_t seed, std::uint64_t epoch,
                                   std::uint64_t position) const {
  if (!indexes_) return Dataset::epoch_index(seed, epoch, position);
  // The source whose part of the epoch holds the position (the last of equal starts: sources
  // without a share hold none).
  const auto k = static_cast<std::size_t>(
      std::upper_bound(share_starts_.begin(), share_starts_.end(), position) -
      share_starts_.begin() - 1);
  return offsets_[k] + source_index(k, seed, epoch, position - share_starts_[k]);
}

}  // namespace ferry
