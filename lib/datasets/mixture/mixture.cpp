#include "ferry/mixture.hpp"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/tsan.hpp"
#include "ferry/error.hpp"

namespace ferry {

namespace {

// Stream positions are epoch x share, which may pass 2^64 before the division by a pass.
__extension__ using u128 = unsigned __int128;

constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// A keyed bijection on [0, n): a Feistel network on the smallest even bit width covering n,
// walking its cycles back into range. One pass of a source over its samples.
class PassOrder {
 public:
  PassOrder(std::uint64_t n, std::uint64_t key) noexcept : n_(n) {
    unsigned bits = n <= 4 ? 2 : static_cast<unsigned>(std::bit_width(n - 1));
    bits += bits & 1u;
    half_ = bits / 2;
    mask_ = (std::uint64_t{1} << half_) - 1;
    std::uint64_t k = mix(key);
    for (auto& r : keys_) {
      k = mix(k + 0x9e3779b97f4a7c15ULL);
      r = k;
    }
  }
  std::uint64_t operator()(std::uint64_t position) const noexcept {
    std::uint64_t x = round_trip(position);
    while (x >= n_) x = round_trip(x);
    return x;
  }

 private:
  std::uint64_t round_trip(std::uint64_t x) const noexcept {
    std::uint64_t left = x >> half_;
    std::uint64_t right = x & mask_;
    for (const std::uint64_t key : keys_) {
      const std::uint64_t next = left ^ (mix(right ^ key) & mask_);
      left = right;
      right = next;
    }
    return (left << half_) | right;
  }
  std::uint64_t n_;
  unsigned half_;
  std::uint64_t mask_;
  std::uint64_t keys_[6];
};

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

}  // namespace

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

  std::uint64_t key = mix(0x6d6978ULL ^ sources.size());
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
  return m;
}

std::size_t Mixture::source_of(std::size_t index) const {
  const auto at = std::upper_bound(offsets_.begin(), offsets_.end(), index);
  return static_cast<std::size_t>(at - offsets_.begin()) - 1;
}

void Mixture::read(std::size_t index, SampleRef out) const {
  const std::size_t k = source_of(index);
  sources_[k].dataset->read(index - offsets_[k], out);
  if (source_field_) *out.as<std::int64_t>(fields_.size() - 1) = static_cast<std::int64_t>(k);
}

std::int64_t Mixture::length(std::size_t index, std::size_t field) const {
  const std::size_t k = source_of(index);
  return sources_[k].dataset->length(index - offsets_[k], field);
}

std::int64_t Mixture::max_length(std::size_t field) const {
  std::int64_t most = 0;
  for (const MixtureSource& source : sources_) {
    const std::int64_t l = source.dataset->max_length(field);
    if (l < 0) return -1;
    most = std::max(most, l);
  }
  return most;
}

void Mixture::prefetch(std::size_t index) const noexcept {
  if (index >= size_) return;
  const std::size_t k = source_of(index);
  sources_[k].dataset->prefetch(index - offsets_[k]);
}

void Mixture::will_read(std::span<const std::size_t> indices) const noexcept {
  try {
    for (std::size_t k = 0; k < sources_.size(); ++k) {
      const Dataset& d = *sources_[k].dataset;
      if (!d.wants_read_order()) continue;
      std::vector<std::size_t> own;
      for (const std::size_t i : indices) {
        if (i < size_ && source_of(i) == k) own.push_back(i - offsets_[k]);
      }
      d.will_read(own);
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): a hint; without it, sources read in order
  }
}

bool Mixture::wants_read_order() const noexcept {
  return std::any_of(sources_.begin(), sources_.end(),
                     [](const MixtureSource& s) { return s.dataset->wants_read_order(); });
}

double Mixture::network_wait_seconds() const noexcept {
  double total = 0;
  for (const MixtureSource& s : sources_) total += s.dataset->network_wait_seconds();
  return total;
}

std::vector<std::uint64_t> Mixture::epoch_indices(std::uint64_t seed, std::uint64_t epoch) const {
  std::vector<std::uint64_t> out;
  out.reserve(epoch_size_);
  for (std::size_t k = 0; k < sources_.size(); ++k) {
    const std::size_t n = sizes_[k];
    const std::size_t s = shares_[k];
    if (s == 0) continue;
    const Dataset& d = *sources_[k].dataset;
    const bool selects = d.selection_key() != 0;
    const std::uint64_t base = offsets_[k];
    // A pass of a source that selects is one of its epochs, from a seed of its own.
    const auto pass_list = [&](std::uint64_t pass_seed, std::uint64_t pass) {
      return d.epoch_indices(pass_seed, pass);
    };
    const std::size_t q = s / n;
    const std::size_t r = s % n;
    for (std::size_t t = 0; t < q; ++t) {
      if (selects) {
        const auto list = pass_list(full_seed(seed, k), epoch * q + t);
        for (const std::uint64_t i : list) out.push_back(base + i);
      } else {
        for (std::size_t i = 0; i < n; ++i) out.push_back(base + i);
      }
    }
    if (r == 0) continue;
    // Positions [epoch x r, (epoch + 1) x r) of the stream of passes: pass c, place j, in the
    // stream's order (so that epoch_index() finds any of them directly). Each place is a
    // permutation's value, worked out on the idle workers in pieces (the loader asks for an
    // epoch's indices as it starts), but for a source that selects, whose pass is one list.
    const u128 first = static_cast<u128>(epoch) * r;
    const std::size_t at_out = out.size();
    out.resize(at_out + r);
    const auto places = [&, base, n, k](std::size_t begin, std::size_t end) {
      // Pass c, place j of the piece's first position (one 128-bit division), then counted on.
      const u128 p = first + begin;
      auto c = static_cast<std::uint64_t>(p / n);
      auto j = static_cast<std::uint64_t>(p % n);
      const std::uint64_t ks = stream_seed(seed, k);
      std::vector<std::uint64_t> list;
      std::optional<PassOrder> order;
      for (std::size_t i = begin; i < end; ++i, ++j) {
        if (j == n) {
          j = 0;
          ++c;
          order.reset();
        }
        if (!order) {
          order.emplace(n, mix(ks ^ mix(c + 1)));
          if (selects) list = pass_list(ks, c);
        }
        const std::uint64_t at = (*order)(j);
        out[at_out + i] = base + (selects ? list[at] : at);
      }
    };
    constexpr std::size_t kPiece = 8192;
    if (selects || r < 2 * kPiece) {
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
  // As epoch_indices(): q copies of the source, then the stream of passes from epoch x r.
  const std::uint64_t n = sizes_[k];
  const std::uint64_t s = shares_[k];
  const std::uint64_t q = s / n;
  const std::uint64_t r = s % n;
  const Dataset& d = *sources_[k].dataset;
  const bool selects = d.selection_key() != 0;
  if (p < q * n) {
    const std::uint64_t i = p % n;
    return selects ? d.epoch_index(full_seed(seed, k), epoch * q + p / n, i) : i;
  }
  const u128 at = static_cast<u128>(epoch) * r + (p - q * n);
  const auto c = static_cast<std::uint64_t>(at / n);
  const auto j = static_cast<std::uint64_t>(at % n);
  const std::uint64_t ks = stream_seed(seed, k);
  const std::uint64_t placed = PassOrder(n, mix(ks ^ mix(c + 1)))(j);
  return selects ? d.epoch_index(ks, c, placed) : placed;
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

std::vector<std::uint64_t> Mixture::stratify(const std::vector<std::uint64_t>& by_source,
                                             std::uint64_t seed, std::uint64_t epoch) const {
  const std::size_t m = sources_.size();
  const std::size_t e = epoch_size_;
  if (e == 0) return {};
  // Each source's samples of the epoch (by_source holds them source after source), shuffled.
  std::vector<std::size_t> first(m + 1, 0);
  for (std::size_t k = 0; k < m; ++k) first[k + 1] = first[k] + shares_[k];
  std::vector<std::uint64_t> shuffled(e);
  for (std::size_t k = 0; k < m; ++k) {
    const std::size_t s = shares_[k];
    if (s == 0) continue;
    const PassOrder order(s, mix(mix(seed ^ 0x7368756666ULL) ^ mix(epoch + 1) ^ mix(k + 1)));
    for (std::size_t j = 0; j < s; ++j) shuffled[first[k] + j] = by_source[first[k] + order(j)];
  }
  // Blocks of `stratified_` positions (the last one shorter): block g of size b holds
  // floor(b x share_k / e) of source k, and the samples those floors leave over go one per block
  // to the sources with the most left, block by block (which always fits: a source has fewer left
  // than blocks remain, and taking the largest keeps it so), so each block holds floor or ceil.
  const std::size_t bsize = stratified_;
  const std::size_t blocks = e / bsize + static_cast<std::size_t>(e % bsize != 0);
  const auto block_size = [&](std::size_t g) { return std::min(bsize, e - g * bsize); };
  const auto floor_of = [&](std::size_t b, std::size_t k) {
    return static_cast<std::size_t>(static_cast<u128>(b) * shares_[k] / e);
  };
  std::vector<std::size_t> left(m);
  for (std::size_t k = 0; k < m; ++k) {
    std::size_t floors = 0;
    // All blocks but the last are full.
    if (blocks > 1) floors = (blocks - 1) * floor_of(bsize, k);
    floors += floor_of(block_size(blocks - 1), k);
    left[k] = shares_[k] - floors;
  }
  std::vector<std::uint64_t> out;
  out.reserve(e);
  std::vector<std::size_t> cursor(first.begin(), first.end() - 1);
  std::vector<std::size_t> count(m);
  std::vector<std::size_t> most(m);
  for (std::size_t g = 0; g < blocks; ++g) {
    const std::size_t b = block_size(g);
    std::size_t taken = 0;
    for (std::size_t k = 0; k < m; ++k) {
      count[k] = floor_of(b, k);
      taken += count[k];
    }
    std::iota(most.begin(), most.end(), std::size_t{0});
    std::stable_sort(most.begin(), most.end(),
                     [&](std::size_t a, std::size_t c) { return left[a] > left[c]; });
    for (std::size_t i = 0; taken < b; ++i) {
      const std::size_t k = most[i];  // i < m: fewer than m are left over in a block
      if (left[k] == 0) throw std::logic_error("Mixture: a stratified block cannot be filled");
      ++count[k];
      --left[k];
      ++taken;
    }
    for (std::size_t k = 0; k < m; ++k) {
      for (std::size_t j = 0; j < count[k]; ++j) out.push_back(shuffled[cursor[k]++]);
    }
  }
  return out;
}

}  // namespace ferry
