#include "pipeline/ragged.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "core/checked.hpp"
#include "core/row_ops.hpp"
#include "ferry/dtype.hpp"

namespace ferry::detail {

std::int64_t round_up_rows(std::int64_t n, std::int64_t multiple) {
  const std::int64_t r = n % multiple;
  return r == 0 ? n : checked_add<std::int64_t>(n, multiple - r, "Loader: pad_multiple");
}

RaggedFields::RaggedFields(const Dataset& dataset, const std::vector<FieldSpec>& fields,
                           const LoaderOptions& options, std::size_t capacity, bool device_path)
    : longest(fields.size(), 0),
      declared(fields.size(), false),
      region_rows(fields.size(), 0),
      padded_rows(fields.size(), 0),
      pad_bits(fields.size(), 0),
      pad_element(fields.size(), 1),
      mode(options.ragged),
      slot_mode(device_path ? RaggedBatch::pack : options.ragged),
      pad_multiple(options.pad_multiple),
      skip_bad(options.on_error == ErrorPolicy::skip) {
  if (options.pad_multiple < 1) {
    throw ConfigError("Loader: pad_multiple must be at least 1, got " +
                      std::to_string(options.pad_multiple));
  }
  const std::size_t n = dataset.size();
  bool budgeted = false;
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!fields[f].is_ragged()) continue;
    any = true;
    const std::string what = "Loader: field \"" + fields[f].name + "\"";
    // The dataset's own bound where it knows one; else every sample's length, once.
    std::int64_t most = dataset.max_length(f);
    declared[f] = most >= 0;
    for (std::size_t i = 0; most < 0 && i < n; ++i) {
      std::int64_t l = 0;
      try {
        l = dataset.length(i, f);
      } catch (const ConfigError& e) {
        throw ConfigError(what + " is ragged: " + e.what());
      } catch (const DataError&) {
        // A bad sample: its batch leaves it out (skip) or fails naming it, from next() (raise).
        continue;
      }
      if (l < 0) {
        throw DataError(what + ": sample " + std::to_string(i) + " has " + std::to_string(l) +
                        " rows");
      }
      longest[f] = std::max(longest[f], l);
    }
    if (most >= 0) longest[f] = most;
    most = longest[f];
    // Rows a batch may take, padded and packed; the budget bounds the first ragged field's
    // batch, but for a sample over it alone.
    const auto bound = [&](std::int64_t per_sample) {
      std::uint64_t rows = checked_mul<std::uint64_t>(per_sample, capacity, what);
      if (options.max_tokens > 0 && !budgeted) {
        rows = std::min<std::uint64_t>(
            rows,
            std::max<std::uint64_t>(options.max_tokens, static_cast<std::uint64_t>(per_sample)));
      }
      return rows;
    };
    padded_rows[f] = bound(round_up_rows(most, pad_multiple));
    region_rows[f] = slot_mode == RaggedBatch::pad ? padded_rows[f] : bound(most);
    budgeted = true;
    if (slot_mode == RaggedBatch::pack &&
        region_rows[f] > std::numeric_limits<std::int32_t>::max()) {
      throw ConfigError(what + ": a packed batch may hold " + std::to_string(region_rows[f]) +
                        " rows, beyond the i32 offsets; use a smaller batch_size");
    }
    // pad_value as one element of the field's dtype (ferry::convert's rules).
    pad_element[f] = dtype_size(fields[f].dtype);  // at most 8
    ferry::convert(&options.pad_value, DType::f64, &pad_bits[f], fields[f].dtype, 1);
  }
}

void RaggedFields::plan(const Dataset& dataset, const SlotLayout& layout,
                        std::span<const std::uint64_t> indices, BatchRows& rows, std::byte* slot,
                        std::span<std::exception_ptr> failures) const {
  const std::size_t count = indices.size();
  for (std::size_t f = 0; f < layout.ragged.size(); ++f) {
    const int r = layout.ragged[f];
    if (r < 0) continue;
    const auto base = static_cast<std::size_t>(r) * rows.capacity;
    std::int64_t most = 0;
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::int64_t l = 0;
      if (!failures[i]) {
        try {
          l = dataset.length(indices[i], f);
        } catch (const DataError&) {
          // No rows; the fill leaves it out (skip) or fails the batch naming it (raise).
          failures[i] = std::current_exception();
        }
      }
      if (l < 0 || l > longest[f]) {
        throw DataError("Loader: sample " + std::to_string(indices[i]) + " has " +
                        std::to_string(l) + " rows of field " + std::to_string(f) +
                        (declared[f] ? "; the dataset's max_length() said at most "
                                     : "; when the loader was made its samples had 0 to ") +
                        std::to_string(longest[f]));
      }
      rows.lengths[base + i] = l;
      rows.starts[base + i] = at;  // pack; pad is set below
      at += static_cast<std::uint64_t>(l);
      most = std::max(most, l);
    }
    const auto ri = static_cast<std::size_t>(r);
    const std::int64_t lmax = round_up_rows(most, pad_multiple);
    // Every sample is within the longest, but the batch as a whole must fit the slot's region
    // too: a token budget sized it below batch_size x longest, and a dataset whose lengths
    // changed since the epoch was planned may give a batch over it. Packed: its rows; padded
    // (in the slot, or after the copy stage pads it): N x Lmax.
    check_fits(indices, f, layout.region_rows[f], padded_rows[f], rows, base);
    rows.padded[ri] = lmax;  // the delivered Lmax under pad, wherever the padding happens
    if (slot_mode == RaggedBatch::pad) {
      for (std::size_t i = 0; i < count; ++i) {
        rows.starts[base + i] = i * static_cast<std::uint64_t>(lmax);
      }
      rows.rows[ri] = count * static_cast<std::uint64_t>(lmax);
    } else {
      rows.rows[ri] = at;
    }
  }
  write_tables(layout, rows, count, slot);
}

void RaggedFields::check_fits(std::span<const std::uint64_t> indices, std::size_t field,
                              std::uint64_t region, std::uint64_t padded_limit,
                              const BatchRows& rows, std::size_t base) const {
  const std::size_t count = indices.size();
  // The rows a batch of `count` samples takes when its samples' rows sum to `sum` and the longest
  // has `most` (each within the longest, so no rounding here overflows): the limit they pass,
  // if any.
  const auto passes = [&](std::uint64_t sum, std::int64_t most) -> std::optional<std::uint64_t> {
    const std::optional<std::uint64_t> padded = try_mul<std::uint64_t>(
        count, static_cast<std::uint64_t>(round_up_rows(most, pad_multiple)));
    const bool pad_over = !padded || *padded > padded_limit;
    if (slot_mode == RaggedBatch::pad ? !padded || *padded > region : sum > region) {
      return region;
    }
    if (mode == RaggedBatch::pad && pad_over) return padded_limit;
    return std::nullopt;
  };
  std::uint64_t sum = 0;
  std::int64_t most = 0;
  for (std::size_t i = 0; i < count; ++i) {
    sum += static_cast<std::uint64_t>(rows.lengths[base + i]);
    most = std::max(most, rows.lengths[base + i]);
  }
  if (!passes(sum, most)) [[likely]] {
    return;
  }
  // The sample that takes the batch past it: the first whose rows (packed) or whose length
  // raising Lmax (padded) make the batch's rows more than the region holds.
  sum = 0;
  most = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::int64_t l = rows.lengths[base + i];
    sum += static_cast<std::uint64_t>(l);
    most = std::max(most, l);
    const std::optional<std::uint64_t> limit = passes(sum, most);
    if (!limit) continue;
    throw DataError("Loader: sample " + std::to_string(indices[i]) + " has " + std::to_string(l) +
                    " rows of field " + std::to_string(field) + ", which take its batch of " +
                    std::to_string(count) + " samples past the " + std::to_string(*limit) +
                    " rows a batch of the field holds (" +
                    (mode == RaggedBatch::pad ? "padded: N x Lmax" : "packed: the sum of lengths") +
                    "); the dataset's lengths changed since the epoch's batches were planned");
  }
}

void RaggedFields::write_tables(const SlotLayout& layout, const BatchRows& rows, std::size_t count,
                                std::byte* slot) const noexcept {
  for (std::size_t r = 0; r < layout.ragged_count(); ++r) {
    const std::size_t base = r * rows.capacity;
    auto* lengths = reinterpret_cast<std::int64_t*>(slot + layout.lengths_offsets[r]);
    auto* starts = reinterpret_cast<std::int32_t*>(slot + layout.starts_offsets[r]);
    std::int64_t at = 0;
    for (std::size_t i = 0; i < count; ++i) {
      lengths[i] = rows.lengths[base + i];
      starts[i] = static_cast<std::int32_t>(at);  // packed starts (the pad tensor has none)
      at += rows.lengths[base + i];
    }
    starts[count] = static_cast<std::int32_t>(at);
  }
}

void RaggedFields::pad_sample(const SlotLayout& layout, const BatchRows& rows, std::size_t position,
                              std::byte* slot) const noexcept {
  if (slot_mode != RaggedBatch::pad) return;
  for (std::size_t f = 0; f < layout.ragged.size(); ++f) {
    const int r = layout.ragged[f];
    if (r < 0) continue;
    const std::size_t k = static_cast<std::size_t>(r) * rows.capacity + position;
    const std::size_t row = layout.sample_bytes[f];
    std::byte* from = slot + layout.offsets[f] +
                      (rows.starts[k] + static_cast<std::uint64_t>(rows.lengths[k])) * row;
    const auto pad_rows =
        static_cast<std::size_t>(rows.padded[static_cast<std::size_t>(r)] - rows.lengths[k]);
    fill_pattern(from, pad_rows * row, pad_bits[f], pad_element[f]);
  }
}

void RaggedFields::compact(const SlotLayout& layout, BatchRows& rows, const std::vector<bool>& keep,
                           std::size_t count, std::byte* slot) const noexcept {
  std::size_t kept = 0;
  for (std::size_t f = 0; f < layout.ragged.size(); ++f) {
    const int r = layout.ragged[f];
    if (r < 0) continue;
    const auto ri = static_cast<std::size_t>(r);
    const std::size_t base = ri * rows.capacity;
    const std::size_t row = layout.sample_bytes[f];
    std::byte* region = slot + layout.offsets[f];
    // pad: Lmax becomes the longest kept sample's, and each kept block moves down to the new
    // stride with its first Lmax rows (its rows, then padding already written); pack: the rows
    // close up, in order. Either way every row moves down, so ascending order is safe.
    std::int64_t lmax = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (keep[i]) lmax = std::max(lmax, rows.lengths[base + i]);
    }
    lmax = round_up_rows(lmax, pad_multiple);
    rows.padded[ri] = lmax;
    std::uint64_t at = 0;
    kept = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (!keep[i]) continue;
      const std::int64_t l = rows.lengths[base + i];
      const std::uint64_t to =
          slot_mode == RaggedBatch::pad ? kept * static_cast<std::uint64_t>(lmax) : at;
      const auto n = static_cast<std::uint64_t>(slot_mode == RaggedBatch::pad ? lmax : l);
      if (to != rows.starts[base + i] && n > 0) {
        std::memmove(region + to * row, region + rows.starts[base + i] * row, n * row);
      }
      rows.starts[base + kept] = to;
      rows.lengths[base + kept] = l;
      at += n;
      ++kept;
    }
    rows.rows[ri] = at;
  }
  write_tables(layout, rows, kept, slot);
}

}  // namespace ferry::detail
