#pragma once

// List columns of Parquet files: their chunks decoded from repetition and definition levels
// (the Parquet specification's "Nested Encoding") into each row's values, and the shape each
// becomes: a ragged [L] for a list, [n, ...] for Arrow's fixed_size_list (and nested ones), as
// the Arrow schema a writer stores in the key-value metadata (ARROW:schema) says.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "datasets/table/arrow_format.hpp"
#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_schema.hpp"

namespace ferry::detail::parquet {

/// Decodes a list column's chunk of `rows` rows and `total` values (its metadata's count: one
/// per value, null and empty list). `shape`: per level of lists, its length, or -1 where it
/// varies (the first level only); a list of another length is recorded in `wrong`, a null in
/// `null_inside` (a null row in `valid`). \throws ChunkError naming the page and the problem
/// (levels that do not make rows: a value that continues no list, more or fewer rows).
RawColumn decode_list_chunk(std::span<const std::byte> bytes, Physical type, Codec codec,
                            const ListLevels& levels, const std::vector<std::int64_t>& shape,
                            std::size_t total, std::size_t rows);

/// The fields of the Arrow schema stored as `base64` (an IPC Schema message), or nothing when
/// there is none or it cannot be read (a file is read from its Parquet schema alone then).
std::optional<std::vector<arrow::Field>> stored_arrow_schema(std::string_view base64);

/// The shape of list column `c` (per level of lists: n, or -1 for a ragged first level): from
/// its field `f` of the stored Arrow schema (fixed_size_list: n; list, large_list: ragged;
/// Hugging Face's Array2D..5D: their shape), or, without one, [-1] for a list of numbers;
/// nothing for lists of lists that vary inside. \throws ConfigError (`what` first) for an
/// Array extension whose metadata is not a shape.
std::optional<std::vector<std::int64_t>> list_shape(const TopColumn& c, const arrow::Field* f,
                                                    const std::string& what);

}  // namespace ferry::detail::parquet
