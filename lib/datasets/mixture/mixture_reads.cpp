// Mixture's reads, sizes and hints: each forwarded to the source that holds the sample, or
// gathered over the sources (mixture.cpp works out the epochs).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/mixture.hpp"

namespace ferry {

namespace {
[[noreturn]] void refuse_index(std::size_t index, std::size_t size) {
  throw ConfigError("Mixture: index " + std::to_string(index) + " is past its " +
                    std::to_string(size) + " samples");
}
}  // namespace

void Mixture::read(std::size_t index, SampleRef out) const {
  if (index >= size_) refuse_index(index, size_);
  const std::size_t k = source_of(index);
  sources_[k].dataset->read(index - offsets_[k], out);
  if (source_field_) *out.as<std::int64_t>(fields_.size() - 1) = static_cast<std::int64_t>(k);
}

std::int64_t Mixture::length(std::size_t index, std::size_t field) const {
  if (index >= size_) refuse_index(index, size_);
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

bool Mixture::shares_staging() const noexcept {
  return std::any_of(sources_.begin(), sources_.end(),
                     [](const MixtureSource& s) { return s.dataset->shares_staging(); });
}

void Mixture::staging_released(std::span<std::byte> slot) const noexcept {
  for (const MixtureSource& s : sources_) {
    if (s.dataset->shares_staging()) s.dataset->staging_released(slot);
  }
}

void Mixture::staging_reused(std::span<std::byte> slot) const noexcept {
  for (const MixtureSource& s : sources_) {
    if (s.dataset->shares_staging()) s.dataset->staging_reused(slot);
  }
}

double Mixture::network_wait_seconds() const noexcept {
  double total = 0;
  for (const MixtureSource& s : sources_) total += s.dataset->network_wait_seconds();
  return total;
}

std::uint64_t Mixture::reader_memory(std::uint64_t sample_bytes) const noexcept {
  std::uint64_t total = 0;
  for (const MixtureSource& s : sources_) total += s.dataset->reader_memory(sample_bytes);
  return total;
}

void Mixture::fit_reader_memory(std::uint64_t bytes) const noexcept {
  const std::uint64_t total = reader_memory(0);
  if (total == 0) return;
  for (const MixtureSource& s : sources_) {
    const std::uint64_t own = s.dataset->reader_memory(0);
    s.dataset->fit_reader_memory(
        static_cast<std::uint64_t>(static_cast<long double>(bytes) * static_cast<long double>(own) /
                                   static_cast<long double>(total)));
  }
}

}  // namespace ferry
