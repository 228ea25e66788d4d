#pragma once

// CsvDataset's parser, on bytes in memory: CsvDataset::open() maps (or decompresses) the file
// and calls parse_csv(); the tests and the fuzzer call it directly.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/csv_dataset.hpp"

namespace ferry::detail {

/// How parse_csv() divides its work. The result (values or error) does not depend on it.
struct CsvSplit {
  /// Bytes per piece of the rows; 0: chosen from the size and the number of threads.
  std::size_t chunk_bytes = 0;
  /// false: the pieces one after another on the calling thread, not on oneTBB's workers.
  bool parallel = true;
};

/// A categorical column of a parsed CSV file.
struct CsvCategorical {
  std::string name;                     ///< the column's name: its field's
  std::vector<std::string> categories;  ///< code i's text
  std::vector<std::int64_t> codes;      ///< [rows]
};

/// A parsed CSV file: what a CsvDataset holds.
struct CsvTable {
  std::size_t rows = 0;
  std::size_t num_features = 0;
  bool has_label = true;
  bool classes_mode = true;
  std::vector<std::string> feature_names;
  std::vector<std::string> classes;
  std::vector<float> features;  ///< [rows, num_features]
  std::vector<std::int64_t> labels;
  std::vector<float> targets;
  std::vector<CsvCategorical> categorical;  ///< in the order of CsvOptions::categorical
  std::size_t chunks = 0;                   ///< how many pieces the rows were parsed in
};

/// The largest integer label taken as a class id (classes() lists every id up to the largest).
inline constexpr std::int64_t kMaxClassId = (std::int64_t{1} << 20) - 1;

/// Checks what can be checked of `options` without a file. \throws ConfigError.
void check_csv_options(const CsvOptions& options);

/// Parses `text`, a whole CSV file; `name` (the file's) starts every error message.
/// \throws DataError for bad input, ConfigError for options that do not fit the file.
CsvTable parse_csv(std::string_view text, const CsvOptions& options, const std::string& name,
                   const CsvSplit& split = {});

}  // namespace ferry::detail
