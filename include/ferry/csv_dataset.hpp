#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/dataset.hpp"
#include "ferry/export.hpp"
#include "ferry/limits.hpp"
#include "ferry/remote.hpp"

namespace ferry {
namespace detail {
struct CsvTable;
}
class CsvDataset;

/// A column of a CSV file: by header name, by 0-based position, the last one, or none.
class FERRY_API Column {
 public:
  enum class Kind { name, index, last, none };
  static Column name(std::string header) { return Column(Kind::name, std::move(header), 0); }
  static Column index(std::size_t i) { return Column(Kind::index, {}, i); }
  static Column last() { return Column(Kind::last, {}, 0); }
  static Column none() { return Column(Kind::none, {}, 0); }

  Kind kind() const noexcept { return kind_; }
  const std::string& header() const noexcept { return header_; }
  std::size_t position() const noexcept { return index_; }
  /// "label", "#3", "last" or "none", for messages.
  std::string str() const;
  friend bool operator==(const Column&, const Column&) = default;

 private:
  Column(Kind k, std::string h, std::size_t i) : kind_(k), header_(std::move(h)), index_(i) {}
  Kind kind_;
  std::string header_;
  std::size_t index_;
};

/// What an empty field among the features (numeric or categorical) means.
enum class Missing {
  error,  ///< DataError naming the line and column
  nan,    ///< a numeric feature is NaN; a categorical one has the code -1
};

/// What a categorical value outside a given vocabulary (CsvOptions::vocabulary) means.
enum class Unknown {
  error,     ///< DataError naming the file, the line, the column and the value
  reserved,  ///< the code V, the vocabulary's size: one past its last category
};

struct CsvOptions {
  bool header = true;
  char delimiter = ',';
  Column label = Column::name("label");  ///< Column::index(i), Column::last(), Column::none()
  /// Numeric feature columns; empty: every column but the label and the categorical ones.
  std::vector<Column> features;
  /// true: labels become i64 class ids. Integer labels keep their value; otherwise the distinct
  /// label texts are sorted and numbered from 0 (classes()). false: the label is an f32 target.
  bool classes = true;
  /// Text columns, each read as category codes into an i64 [] field of its own, named as the
  /// column (see CsvDataset). Not features, nor the label.
  std::vector<Column> categorical;
  /// Given categories of categorical columns, by the column's name (header text, or "column N"
  /// without a header): code i is the list's i-th text, in the order given (distinct, not empty).
  /// A categorical column that is not here numbers the distinct texts of the file in sorted byte
  /// order. categories_from() fills it with another file's categories.
  std::map<std::string, std::vector<std::string>> vocabulary;
  /// A value outside a given vocabulary: DataError, or the code vocabulary[name].size().
  Unknown unknown = Unknown::error;
  Missing missing = Missing::error;
  /// The most bytes a gzipped file may decompress to; 0: default_decompressed_limit() (half
  /// the physical memory). Beyond it, open() raises DataError naming the file and the limit,
  /// having held no more than the limit's bytes.
  std::uint64_t max_decompressed_bytes = 0;
  /// How a file given as a URL is fetched: once, at open, into the cache (see RemoteOptions).
  RemoteOptions remote;

  /// Sets `vocabulary` to the categories of every categorical column of `train`, so that this
  /// file's codes mean what they mean there (a test file read with the training file's codes).
  FERRY_API CsvOptions& categories_from(const CsvDataset& train);
};

/// A CSV file, parsed once into memory: "features" f32 [F] and, unless the label is
/// Column::none(), "label" (i64 [] class ids, or f32 [] with classes = false), then one i64 []
/// field per categorical column (CsvOptions::categorical), in the order listed, named as the
/// column.
///
/// Categorical columns (columns of text: a city, a make of car):
/// - A value's text is the field without the blanks around it and without its quotes (doubled
///   quotes made single); any text is a category, numbers included ("10" and "9" are texts).
/// - Codes number the column's distinct texts in sorted byte order (std::string's operator<)
///   from 0, whatever the number of threads or pieces; categories(name)[code] is the text.
/// - An empty value (nothing, blanks, or "") is CsvOptions::missing's: a DataError, or, with
///   Missing::nan, the code -1 (not a category).
/// - With a vocabulary for the column (CsvOptions::vocabulary, categories_from()), codes are the
///   positions in it and categories(name) is it; a value outside it is a DataError naming the
///   file, the line, the column and the value, or with Unknown::reserved the code V, the
///   vocabulary's size (an embedding table of V + 1 rows holds every code but -1).
/// - The numeric features stay in "features". A file whose features are all categorical has no
///   "features" field at all (num_features() is 0 and features() is empty), not an empty one.
/// - The parse stays parallel and determinate: each piece of the rows keeps, per categorical
///   column, a dictionary of the distinct texts it met (views of the file's bytes, not copies)
///   and a 4-byte local id per row; the pieces' dictionaries are then merged, sorted, and the
///   codes written in a second pass. Memory for a categorical column, however many distinct
///   texts it has (millions): 4 bytes per row while parsing and 8 per row for the codes, plus
///   at most about 110 bytes per distinct text per piece (a piece meets at most one per row)
///   and as much again per distinct text of the column while merging, plus the copies of the
///   texts that categories() keeps.
///
/// The file is mapped and its rows indexed and parsed in parallel; RFC 4180 quotes, CRLF, a
/// UTF-8 BOM and blank lines at the end are accepted, and a ".gz" file is decompressed once
/// (a gzip file is known by its first bytes, whatever its name; at most
/// CsvOptions::max_decompressed_bytes of it). The values are held as a TensorDataset (read()
/// copies a row); to(Device::cuda()) puts them on the GPU, where a loader on that GPU gathers its
/// batches. open() takes memory for the text (when decompressed), the parsed values, and a small
/// multiple of the parsed values while parsing, whatever the first rows look like.
///
/// What the parser accepts, precisely:
/// - Fields are separated by the delimiter; records end with "\n", "\r\n" or the end of the
///   file. Blank lines ("" or "\r") are skipped wherever they are, as pandas does (so a file of
///   one column writes a missing value as "", not as an empty line).
/// - A field may be quoted ("1.5", "a, b", "two\nlines", "say ""hi"""); a quote inside an
///   unquoted field, text after a closing quote, or a quote never closed is a DataError.
/// - Spaces and tabs around a field (outside its quotes; not the delimiter itself) are ignored.
/// - Numbers are what std::from_chars reads, with an optional leading '+': "1", "-2.5e-3",
///   ".5", "nan", "inf", "-Infinity" (any case; numpy writes "nan" and "inf"). Other text
///   ("NA", "?", "1,5") is a DataError. A value beyond f32's range becomes +-inf (or 0, or a
///   subnormal), as a double converted to float would.
/// - An empty feature (nothing, blanks, or "") is Missing::error or NaN (a categorical one: the
///   code -1); an empty label is an error whatever CsvOptions::missing says.
/// - Integer labels are class ids when every label is one. An integer is written as
///   std::to_string writes it: an optional '-' and decimal digits, no '+' and no leading zero
///   ("3", "-3"; "+3", "03", "-0", "3.0" and "1e3" are texts), with the blanks around the field
///   ignored as for any field. Ids must lie in 0 .. 1,048,575 (classes() lists each id up to the
///   largest), and an integer beyond them, however many digits ("99999999999999999999"), is a
///   DataError naming its line and column. A single label that is not an integer makes all of
///   them texts.
/// - Error messages give lines and columns from 1, as an editor and a spreadsheet show them
///   (a quoted field over several lines counts them all); Column::index() counts from 0.
class FERRY_API CsvDataset final : public Dataset {
 public:
  /// Reads the file (a URL, see RemoteOptions, is fetched once into the cache first:
  /// CsvOptions::remote; messages name the URL).
  /// \throws DataError naming the file, the line (1-based, as an editor shows it), the column
  /// and what was expected: a missing or empty file (or one that is not a regular file), a
  /// header and no rows, a ragged row, a non-numeric field, a label, feature or categorical
  /// column that does not exist, a broken quote, a corrupt gzip stream, one that decompresses to
  /// more than CsvOptions::max_decompressed_bytes, an integer label outside the class ids, a
  /// categorical value outside a given vocabulary (with Unknown::error; the first in the file).
  /// ConfigError for options that do not fit (a delimiter that is '"', a line break or part of
  /// numbers, a feature or categorical column listed twice, the label among the features or the
  /// categorical columns, a column both a feature and categorical, a named column without a
  /// header, a categorical column named as another field, a vocabulary for a column that is not
  /// categorical or with a category twice or empty); those not about the file come first.
  static std::shared_ptr<CsvDataset> open(const std::filesystem::path& path,
                                          const CsvOptions& options = {});

  std::size_t size() const override { return table_->size(); }
  std::vector<FieldSpec> fields() const override { return table_->fields(); }
  /// Copies a row. \throws ConfigError when the rows are on a GPU (see TensorDataset::read()).
  void read(std::size_t index, SampleRef out) const override { table_->read(index, out); }
  void prefetch(std::size_t index) const noexcept override { table_->prefetch(index); }
  std::span<const Tensor> rows_in_memory() const noexcept override {
    return table_->rows_in_memory();
  }

  /// The same samples on `device`, with the same feature names and classes: the tensors' storage
  /// is shared when they are there already, copied otherwise (this one is unchanged). Blocking.
  /// \throws DeviceError when `device` is not usable.
  std::shared_ptr<CsvDataset> to(Device device) const;
  /// Where the samples live.
  Device device() const noexcept { return table_->device(); }

  /// Features per row.
  std::size_t num_features() const noexcept { return num_features_; }
  /// The feature columns' names (header text, or "column N" without a header).
  const std::vector<std::string>& feature_names() const noexcept { return *feature_names_; }
  /// With classes = true: class id i's label text ("0", "1", … for integer labels that are
  /// their own ids; the sorted texts otherwise). Empty for a regression target or no label.
  const std::vector<std::string>& classes() const noexcept { return *classes_; }
  /// The categorical columns' names (their fields' names), in the order of
  /// CsvOptions::categorical.
  const std::vector<std::string>& categorical_names() const noexcept;
  /// The categories of categorical column `name`: code i's text (sorted, or the vocabulary
  /// given). \throws ConfigError when `name` is not a categorical column.
  const std::vector<std::string>& categories(std::string_view name) const;
  /// Every categorical column's categories, by name: what categories_from() gives a test file.
  std::map<std::string, std::vector<std::string>> vocabulary() const;
  /// Categorical column `name`'s codes, one per row: its field's values (-1 for a missing value
  /// with Missing::nan, the vocabulary's size for an unknown one with Unknown::reserved).
  /// \throws ConfigError when `name` is not a categorical column, or the rows are not in host
  /// memory.
  const std::vector<std::int64_t>& codes(std::string_view name) const;
  /// All features, [rows, num_features()] row-major: the "features" tensor's values.
  /// \throws ConfigError, as labels() and targets() do, when the rows are not in host memory
  /// (device() is a GPU).
  const std::vector<float>& features() const;
  /// Class ids (classes = true), else empty.
  const std::vector<std::int64_t>& labels() const;
  /// Regression targets (classes = false), else empty.
  const std::vector<float>& targets() const;

 private:
  CsvDataset() = default;
  FERRY_HIDDEN static std::shared_ptr<CsvDataset> from_table(detail::CsvTable table);
  std::shared_ptr<const TensorDataset> table_;
  std::size_t num_features_ = 0;
  std::shared_ptr<const std::vector<std::string>> feature_names_;
  std::shared_ptr<const std::vector<std::string>> classes_;
  struct Categorical {
    std::string name;
    std::shared_ptr<const std::vector<std::string>> categories;
    std::shared_ptr<const std::vector<std::int64_t>> codes;  // null when on a GPU
  };
  FERRY_HIDDEN const Categorical& categorical(std::string_view name) const;
  std::shared_ptr<const std::vector<std::string>> categorical_names_;
  std::vector<Categorical> categorical_;
  // What table_ views, in host memory (labels and targets empty where they are not the label);
  // null when the rows are on a GPU.
  std::shared_ptr<const std::vector<float>> features_;
  std::shared_ptr<const std::vector<std::int64_t>> labels_;
  std::shared_ptr<const std::vector<float>> targets_;
};

}  // namespace ferry
