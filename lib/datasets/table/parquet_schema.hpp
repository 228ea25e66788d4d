#pragma once

// A Parquet file's schema as ParquetDataset reads it: its top-level columns, where each lies
// among the column chunks, and which field each becomes (the type mapping of
// include/ferry/table.hpp).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/table/parquet_format.hpp"
#include "ferry/dtype.hpp"
#include "ferry/table.hpp"

namespace ferry::detail::parquet {

/// A list column's levels (the Parquet specification's "Nested Encoding"): for each level of
/// lists, outermost first, the definition level from which that list is there (below it: a
/// null list) and the one from which it holds an element (below it: an empty list); a value
/// is there at `value_def` (between the last `filled` and it: a null element). The repetition
/// level of list k (from 0) is k + 1.
struct ListLevels {
  std::vector<int> defined;
  std::vector<int> filled;
  int value_def = 0;
};

struct TopColumn {
  std::string name;
  std::size_t leaf = 0;  ///< its first column chunk
  const SchemaElement* element = nullptr;
  bool nested = false;  ///< a group (a list, a map, a struct): not read
  int max_def = 0;
  /// Hugging Face's Image struct {bytes: BYTE_ARRAY, path: BYTE_ARRAY}, neither repeated: its
  /// `bytes` leaf and that leaf's definition level (-1: the column is not such a struct).
  std::ptrdiff_t image_leaf = -1;
  int image_def = 0;
  /// A list (a LIST-annotated group, in the 3-level form or a legacy 2-level one, or a repeated
  /// primitive), lists of lists included: its levels and its values' element; depth 0 for any
  /// other column.
  ListLevels lists;
  const SchemaElement* list_element = nullptr;
  std::size_t depth() const noexcept { return lists.defined.size(); }
};

/// The top-level columns of `schema`. \throws ChunkError for a schema that is not a tree
/// (children past its end, a root with none), saying where.
std::vector<TopColumn> top_columns(const std::vector<SchemaElement>& schema, std::size_t& leaves);

/// A name from a file, in double quotes, for messages: control bytes, '"' and
/// '\\' as \xNN, so that a message stays one line of text whatever the file holds.
std::string in_quotes(std::string_view name);

/// " (its columns: "a", "b")", for a message that names a column the file lacks: the first 32
/// names, then how many more there are.
std::string columns_text(const std::vector<std::string_view>& names);

/// Whether `name` is among `names`.
bool listed(const std::vector<std::string>& names, std::string_view name);

/// Checks audio_options for audio columns (the clip and rate they need). \throws ConfigError
/// naming `who`.
void check_table_audio(const TableOptions& o, const std::string& who);

/// The column lists of TableOptions, as both table datasets check them at open (`who` names the
/// dataset): no column named twice in a list, categorical and image columns among the columns
/// read (when those are listed), none both an image and categorical, and the image options
/// valid. \throws ConfigError naming the column.
void check_column_lists(const TableOptions& o, const std::string& who);

/// The type as a message names it: "INT64 (TIMESTAMP)", "BYTE_ARRAY (STRING)", "group (LIST)".
std::string type_text(const TopColumn& column);

/// The dtype of a column read as numbers, or nothing for a type ferry does not read (byte
/// arrays answer u8: their bytes).
std::optional<DType> scalar_dtype(const TopColumn& column);

/// The dtype of a list column's values: a number that scalar_dtype() reads (not bytes), or
/// nothing.
std::optional<DType> list_dtype(const TopColumn& column);

}  // namespace ferry::detail::parquet
