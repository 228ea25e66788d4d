#pragma once

// Ragged fields (FieldSpec::shape[0] == ragged): each sample has its own number of rows
// (Dataset::length). A slot's region for such a field is sized once, from the longest sample:
// the dataset's Dataset::max_length() where it knows it, else every sample's length asked when
// the loader is made; per batch the planner places the samples (padded: sample i at
// i x Lmax; packed: one after another), the workers write their rows there and pad the rest,
// and the lengths (i64 [N]) and starts (i32 [N + 1]) travel with the batch.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/loader.hpp"
#include "pipeline/staging.hpp"

namespace ferry::detail {

/// `n` rounded up to a multiple of `multiple` (>= 1): a padded batch's Lmax.
/// \throws ConfigError when that overflows.
std::int64_t round_up_rows(std::int64_t n, std::int64_t multiple);

/// What the loader knows of its ragged fields, from the dataset at construction.
struct RaggedFields {
  /// Takes each ragged field's longest sample from Dataset::max_length(), or, where the dataset
  /// does not know it, asks every sample's length (under ErrorPolicy::skip, one whose length()
  /// throws DataError counts for none: its batch leaves it out).
  /// \throws ConfigError for options that do not fit (pad_multiple < 1, packed rows beyond i32),
  /// DataError for a negative length naming the sample.
  /// With a copy stage (`device_path`), padded fields travel packed and are padded on the
  /// device after the copy (pad_ragged), so only the samples' rows cross the bus.
  RaggedFields(const Dataset& dataset, const std::vector<FieldSpec>& fields,
               const LoaderOptions& options, std::size_t capacity, bool device_path);

  std::vector<std::int64_t> longest;         ///< per field: the longest sample (0: fixed)
  std::vector<bool> declared;                ///< per field: longest is the dataset's max_length()
  std::vector<std::uint64_t> region_rows;    ///< per field: rows a slot's region holds
  std::vector<std::uint64_t> padded_rows;    ///< per field: rows a padded batch may take
  std::vector<std::uint64_t> pad_bits;       ///< per field: pad_value as one element, low bytes
  std::vector<std::size_t> pad_element;      ///< per field: that element's bytes
  RaggedBatch mode = RaggedBatch::pad;       ///< what the consumer gets
  RaggedBatch slot_mode = RaggedBatch::pad;  ///< how a slot holds it (pack with a copy stage)
  std::int64_t pad_multiple = 1;
  bool any = false;
  /// ErrorPolicy::skip: a sample whose length() throws DataError is left out, not the loader.
  bool skip_bad = false;

  /// Places batch `indices`' samples: asks their lengths, fills `rows`, and writes the lengths
  /// and starts tables into the slot. Under ErrorPolicy::skip a sample whose length() throws
  /// DataError gets 0 rows and its error in `failures` (cleared by the caller; the fill leaves
  /// it out, unread). \throws DataError for a length beyond what the
  /// loader was made for, or (under raise) length()'s.
  void plan(const Dataset& dataset, const SlotLayout& layout,
            std::span<const std::uint64_t> indices, BatchRows& rows, std::byte* slot,
            std::span<std::exception_ptr> failures) const;
  /// Writes pad_value over sample `position`'s rows after its own (pad only).
  void pad_sample(const SlotLayout& layout, const BatchRows& rows, std::size_t position,
                  std::byte* slot) const noexcept;
  /// After samples were left out (skip): `keep[i]` says which of the `count` stay. Moves the
  /// kept samples' rows down, in order, and rewrites rows and the tables for `kept` samples.
  void compact(const SlotLayout& layout, BatchRows& rows, const std::vector<bool>& keep,
               std::size_t count, std::byte* slot) const noexcept;

 private:
  /// \throws DataError naming the sample that takes batch `indices` past field `field`'s
  /// region (`region` rows in the slot; `padded_limit` rows when delivered padded).
  void check_fits(std::span<const std::uint64_t> indices, std::size_t field, std::uint64_t region,
                  std::uint64_t padded_limit, const BatchRows& rows, std::size_t base) const;
  void write_tables(const SlotLayout& layout, const BatchRows& rows, std::size_t count,
                    std::byte* slot) const noexcept;
};

}  // namespace ferry::detail
