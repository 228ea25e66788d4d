// ParquetDataset's list columns, against files it did not write: tests/table/write_lists.js
// writes them with apache-arrow and parquet-wasm (the Rust Parquet writer, which stores the
// Arrow schema in ARROW:schema). Row r of every file holds values computed from r, which the
// expected() function below computes the same way. The levels' decoder is also run on pages
// built here by hand, for what that writer never writes (a row that spans two pages v1, levels
// that make no rows).

#include <gtest/gtest.h>
#include <lz4.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "datasets/table/parquet_chunk.hpp"
#include "datasets/table/parquet_format.hpp"
#include "datasets/table/parquet_lists.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "source_dir.hpp"
#include "table_writer.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::DType;
using ferry::ParquetDataset;
using ferry::TableOptions;
using ferry::testing::expect_error;
using ferry::testing::rows_kept;

constexpr std::size_t kRows = 60;

/// Row r's values of a column of the lists_* files, flattened, and its length (ragged columns:
/// the outer list's).
struct Expected {
  std::vector<double> values;
  std::int64_t length = 0;
};
Expected expected(const std::string& column, std::size_t r) {
  Expected e;
  const auto rd = static_cast<double>(r);
  const auto d = [](std::size_t x) { return static_cast<double>(x); };
  if (column == "li") {
    e.length = static_cast<std::int64_t>(r % 5);
    for (std::size_t k = 0; k < r % 5; ++k) e.values.push_back(rd * 10 + d(k) - 100.0);
  } else if (column == "lf") {
    e.length = static_cast<std::int64_t>((r * 3) % 4);
    for (std::size_t k = 0; k < (r * 3) % 4; ++k) e.values.push_back(rd + d(k) * 0.25);
  } else if (column == "ll") {
    e.length = static_cast<std::int64_t>(r % 3);
    for (std::size_t k = 0; k < r % 3; ++k) e.values.push_back(rd * 1e12 + d(k) - 7.0);
  } else if (column == "l8") {
    e.length = static_cast<std::int64_t>(r % 2 + 1);
    for (std::size_t k = 0; k < r % 2 + 1; ++k) {
      e.values.push_back(static_cast<double>(static_cast<int>((r + k * 50) % 256) - 128));
    }
  } else if (column == "f4") {
    for (std::size_t k = 0; k < 4; ++k) e.values.push_back(rd + d(k) * 0.5);
  } else if (column == "a2") {
    for (std::size_t i = 0; i < 2; ++i) {
      for (std::size_t j = 0; j < 3; ++j) e.values.push_back(rd * 10 + d(i) * 3.0 + d(j));
    }
  } else if (column == "lr") {
    e.length = static_cast<std::int64_t>(r % 3);
    for (std::size_t i = 0; i < r % 3; ++i) {
      for (std::size_t j = 0; j < 3; ++j) e.values.push_back(rd - d(i) * 3.0 - d(j));
    }
  } else if (column == "id") {
    e.values.push_back(rd);
  }
  return e;
}

double as_double(const ferry::Tensor& t, std::size_t i) {
  switch (t.dtype()) {
    case DType::i8:
      return t.data<std::int8_t>()[i];
    case DType::i32:
      return t.data<std::int32_t>()[i];
    case DType::i64:
      return static_cast<double>(t.data<std::int64_t>()[i]);
    case DType::f32:
      return t.data<float>()[i];
    case DType::f64:
      return t.data<double>()[i];
    default:
      ADD_FAILURE() << "a dtype not in these files";
      return 0;
  }
}

/// Sample j's values of field `name` in batch b: a ragged field's rows (padded or packed),
/// or a fixed field's whole slot.
std::vector<double> values_of(const ferry::Batch& b, const std::string& name, std::size_t j,
                              bool ragged, bool packed) {
  const ferry::Tensor& t = b[name];
  std::size_t inner = 1;  // values per row of the first dimension
  for (std::size_t d = ragged ? (packed ? 1 : 2) : 1; d < t.shape().size(); ++d) {
    inner *= static_cast<std::size_t>(t.shape()[d]);
  }
  std::size_t first = 0;
  std::size_t count = inner;
  if (ragged && packed) {
    const ferry::Tensor& off = b.offsets(name);
    first = static_cast<std::size_t>(off.data<std::int32_t>()[j]) * inner;
    count = static_cast<std::size_t>(off.data<std::int32_t>()[j + 1]) * inner - first;
    EXPECT_EQ(static_cast<std::int64_t>(count / inner), b.lengths(name).data<std::int64_t>()[j]);
  } else if (ragged) {
    first = j * static_cast<std::size_t>(t.shape()[1]) * inner;
    count = static_cast<std::size_t>(b.lengths(name).data<std::int64_t>()[j]) * inner;
  } else {
    first = j * inner;
  }
  std::vector<double> v;
  for (std::size_t i = 0; i < count; ++i) v.push_back(as_double(t, first + i));
  return v;
}

class ParquetLists : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry_parquet_lists_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    skip_ = ferry::testing::run_table_writer(FERRY_SOURCE_DIR, "write_lists.js",
                                             {"parquet-wasm", "apache-arrow"}, {dir_.string()});
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static fs::path file(const std::string& name) { return dir_ / name; }

  static ferry::LoaderOptions loader_options(std::size_t batch, bool shuffle, int workers) {
    return ferry::testing::table_loader_options(batch, shuffle, workers, 11);
  }

  static std::string skip_;
  static fs::path dir_;
};
std::string ParquetLists::skip_;
fs::path ParquetLists::dir_;

const std::vector<std::string> kColumns = {"id", "li", "lf", "ll", "l8", "f4", "a2", "lr"};
bool is_ragged(const std::string& c) { return c != "id" && c != "f4" && c != "a2"; }

/// Every value of every sample of epochs 0 and 1, each sample once an epoch.
void expect_all_rows(const std::shared_ptr<ParquetDataset>& ds, const ferry::LoaderOptions& lo,
                     const std::string& what) {
  const bool packed = lo.ragged == ferry::RaggedBatch::pack;
  ferry::Loader loader(ds, lo);
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<std::uint64_t> seen;
    std::vector<std::uint64_t> order;
    for (const ferry::Batch& b : loader.epoch(epoch)) {
      for (std::size_t j = 0; j < b.size(); ++j) {
        const std::uint64_t r = b.indices()[j];
        order.push_back(r);
        ASSERT_TRUE(seen.insert(r).second) << what << ": row " << r << " twice";
        for (const std::string& c : kColumns) {
          const Expected e = expected(c, r);
          ASSERT_EQ(values_of(b, c, j, is_ragged(c), packed), e.values)
              << what << ", epoch " << epoch << ", row " << r << ", column " << c;
          if (is_ragged(c)) {
            EXPECT_EQ(b.lengths(c).data<std::int64_t>()[j], e.length) << what << " " << c;
          }
        }
      }
    }
    EXPECT_EQ(seen.size(), kRows) << what;
    if (!lo.shuffle) {
      for (std::size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], i) << what;
    } else {
      EXPECT_FALSE(std::is_sorted(order.begin(), order.end())) << what << ": not shuffled";
    }
  }
}

TEST_F(ParquetLists, ListsAreRaggedAndFixedSizeListsTakeTheirShape) {
  const auto ds = ParquetDataset::open({file("lists_dict_v1.parquet")});
  ASSERT_EQ(ds->size(), kRows);
  EXPECT_EQ(ds->num_row_groups(), 4U);  // 16 rows a group
  const auto fields = ds->fields();
  ASSERT_EQ(fields.size(), kColumns.size());
  using Shape = std::vector<std::int64_t>;
  const DType dtypes[] = {DType::i64, DType::i32, DType::f32, DType::i64,
                          DType::i8,  DType::f32, DType::f32, DType::f64};
  const Shape shapes[] = {{},  {ferry::ragged}, {ferry::ragged},   {ferry::ragged}, {ferry::ragged},
                          {4}, {2, 3},          {ferry::ragged, 3}};
  for (std::size_t f = 0; f < fields.size(); ++f) {
    EXPECT_EQ(fields[f].name, kColumns[f]);
    EXPECT_EQ(fields[f].dtype, dtypes[f]) << kColumns[f];
    EXPECT_EQ(fields[f].shape, shapes[f]) << kColumns[f];
  }
  // Lengths, known at open: a ragged column's outer list, row by row.
  for (const std::size_t f : {1U, 2U, 3U, 4U, 7U}) {
    std::int64_t most = 0;
    for (std::size_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(ds->length(r, f), expected(kColumns[f], r).length) << kColumns[f] << " row " << r;
      most = std::max(most, expected(kColumns[f], r).length);
    }
    EXPECT_EQ(ds->max_length(f), most) << kColumns[f];
  }
  EXPECT_EQ(ds->max_length(5), -1);  // a fixed shape
  EXPECT_THROW(static_cast<void>(ds->length(0, 6)), ConfigError);
}

std::vector<char> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// What the pages of every list column's chunks are: data pages of one type (0: v1, 3: v2),
/// how many there are at least in a chunk, and whether a dictionary page comes first.
struct Pages {
  std::int32_t type = -1;
  std::size_t fewest = 1 << 30;
  bool dictionary = true;
};
/// A file's footer, as ferry decodes it.
ferry::detail::parquet::FileMetaData footer_of(const fs::path& path) {
  const std::vector<char> file = read_file(path);
  const auto bytes = std::as_bytes(std::span<const char>(file));
  std::uint32_t footer = 0;
  std::memcpy(&footer, file.data() + file.size() - 8, 4);
  return ferry::detail::parquet::parse_file_metadata(
      bytes.subspan(file.size() - 8 - footer, footer));
}

Pages pages_of(const fs::path& path) {
  namespace pq = ferry::detail::parquet;
  const std::vector<char> file = read_file(path);
  const auto bytes = std::as_bytes(std::span<const char>(file));
  const pq::FileMetaData meta = footer_of(path);
  Pages p;
  for (const pq::RowGroup& g : meta.row_groups) {
    for (std::size_t c = 1; c < g.columns.size(); ++c) {  // all but "id"
      const pq::ColumnChunk& ch = g.columns[c];
      std::size_t at =
          static_cast<std::size_t>(ch.dictionary_page_offset.value_or(ch.data_page_offset));
      const std::size_t end = at + static_cast<std::size_t>(ch.total_compressed_size);
      std::size_t data = 0;
      bool first = true;
      while (at < end) {
        std::size_t header = 0;
        const pq::PageHeader h = pq::parse_page_header(bytes.subspan(at), header);
        if (first) p.dictionary = p.dictionary && h.type == 2;
        first = false;
        if (h.type == 0 || h.type == 3) {
          ++data;
          if (p.type >= 0 && p.type != h.type) p.type = 99;  // both: not what a name says
          if (p.type < 0) p.type = h.type;
        }
        at += header + static_cast<std::size_t>(h.compressed_size);
      }
      p.fewest = std::min(p.fewest, data);
    }
  }
  return p;
}

TEST_F(ParquetLists, EveryValueInPagesV1AndV2WithAndWithoutADictionaryPaddedOrPacked) {
  for (const std::string name :
       {"lists_dict_v1.parquet", "lists_dict_v2.parquet", "lists_plain_v1.parquet",
        "lists_plain_v2.parquet", "lists_delta_v2.parquet"}) {
    // The files hold what their names say: every list column's chunks in several data pages
    // of the version named, after a dictionary page or without one.
    const Pages pages = pages_of(file(name));
    EXPECT_EQ(pages.type, name.find("v1") != std::string::npos ? 0 : 3) << name;
    // (The delta encoder reports no size before its page ends: one page a chunk.)
    EXPECT_GE(pages.fewest, name.find("delta") != std::string::npos ? 1U : 2U) << name;
    EXPECT_EQ(pages.dictionary, name.find("dict") != std::string::npos) << name;
    // (write_lists.js checks lists_delta_v2's encodings: DELTA_BINARY_PACKED integers)
    const auto ds = ParquetDataset::open({file(name)});
    ASSERT_EQ(ds->size(), kRows) << name;
    expect_all_rows(ds, loader_options(16, false, 1), name + " in order");
    expect_all_rows(ds, loader_options(7, true, 2), name + " shuffled, padded");
    ferry::LoaderOptions lo = loader_options(5, true, 3);
    lo.ragged = ferry::RaggedBatch::pack;
    expect_all_rows(ds, lo, name + " shuffled, packed");
  }
}

TEST_F(ParquetLists, HuggingFaceArraysTakeTheShapeOfTheirExtensionMetadata) {
  TableOptions o;
  o.columns = {"h2", "h3"};
  const auto ds = ParquetDataset::open({file("lists_hf.parquet")}, o);
  const auto fields = ds->fields();
  ASSERT_EQ(fields.size(), 2U);
  EXPECT_EQ(fields[0].dtype, DType::f32);
  EXPECT_EQ(fields[0].shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(fields[1].dtype, DType::i32);
  EXPECT_EQ(fields[1].shape, (std::vector<std::int64_t>{ferry::ragged, 2, 2}));
  ferry::Loader loader(ds, loader_options(6, true, 2));
  std::size_t rows = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j, ++rows) {
      const auto r = static_cast<double>(b.indices()[j]);
      EXPECT_EQ(values_of(b, "h2", j, false, false),
                (std::vector<double>{r, r + 1, r + 2, -r, -r - 1, -r - 2}))
          << "row " << r;
      std::vector<double> h3;
      for (std::uint64_t k = 0; k < b.indices()[j] % 3; ++k) {
        const auto kd = static_cast<double>(k);
        h3.insert(h3.end(), {r, kd, r + kd, -r});
      }
      EXPECT_EQ(values_of(b, "h3", j, true, false), h3) << "row " << r;
    }
  }
  EXPECT_EQ(rows, kRows);
}

TEST_F(ParquetLists, SeveralFilesAreOneSequenceOfRowsTheirListsOfOneShape) {
  TableOptions o;
  o.columns = {"li", "a2"};
  const auto ds =
      ParquetDataset::open({file("lists_dict_v1.parquet"), file("lists_plain_v2.parquet")}, o);
  ASSERT_EQ(ds->size(), 2 * kRows);
  EXPECT_EQ(ds->length(kRows + 4, 0), 4);
  ferry::LoaderOptions lo = loader_options(9, true, 2);
  lo.ragged = ferry::RaggedBatch::pack;
  ferry::Loader loader(ds, lo);
  std::set<std::uint64_t> seen;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::uint64_t r = b.indices()[j];
      seen.insert(r);
      EXPECT_EQ(values_of(b, "li", j, true, true), expected("li", r % kRows).values) << r;
      EXPECT_EQ(values_of(b, "a2", j, false, true), expected("a2", r % kRows).values) << r;
    }
  }
  EXPECT_EQ(seen.size(), 2 * kRows);
  // A later file whose column is a list of lists that vary: a ConfigError naming it.
  o.columns = {"id", "ll"};
  expect_error<ConfigError>(
      [&] {
        static_cast<void>(
            ParquetDataset::open({file("lists_dict_v1.parquet"), file("lists_other.parquet")}, o));
      },
      {"lists_other.parquet", "\"ll\"", "list<list<INT32"});
  // One whose column is a list where the first file's is a fixed_size_list: not as in it.
  o.columns = {"f4"};
  expect_error<ConfigError>(
      [&] {
        static_cast<void>(
            ParquetDataset::open({file("lists_dict_v1.parquet"), file("lists_other.parquet")}, o));
      },
      {"lists_other.parquet", "\"f4\"", "list<FLOAT>", "not as in"});
}

TEST_F(ParquetLists, ARequiredListOfRequiredValues) {
  TableOptions o;
  o.columns = {"lq"};
  const auto ds = ParquetDataset::open({file("lists_hf.parquet")}, o);
  EXPECT_EQ(ds->fields()[0].shape, std::vector<std::int64_t>{ferry::ragged});
  // The file's schema is what the test is about: no null list, no null element.
  const auto meta = footer_of(file("lists_hf.parquet"));
  std::size_t leaves = 0;
  const auto top = ferry::detail::parquet::top_columns(meta.schema, leaves);
  ASSERT_EQ(top[0].name, "lq");
  EXPECT_EQ(top[0].lists.defined, std::vector<int>{0});
  EXPECT_EQ(top[0].lists.value_def, 1);
  ferry::Loader loader(ds, loader_options(8, true, 2));
  std::size_t rows = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j, ++rows) {
      EXPECT_EQ(values_of(b, "lq", j, true, false), expected("li", b.indices()[j]).values);
    }
  }
  EXPECT_EQ(rows, kRows);
}

/// A schema of one column from its elements (the root's added), as top_columns() reads it.
std::vector<ferry::detail::parquet::TopColumn> one_column(
    std::vector<ferry::detail::parquet::SchemaElement>& s) {
  namespace pq = ferry::detail::parquet;
  pq::SchemaElement root;
  root.name = "schema";
  root.num_children = 1;
  s.insert(s.begin(), root);
  std::size_t leaves = 0;
  return pq::top_columns(s, leaves);
}

ferry::detail::parquet::SchemaElement element(const std::string& name, int repetition, int children,
                                              bool list = false) {
  namespace pq = ferry::detail::parquet;
  pq::SchemaElement e;
  e.name = name;
  e.repetition = repetition;
  e.num_children = children;
  if (children == 0) e.type = pq::Physical::int32;
  if (list) e.converted = 3;  // LIST
  return e;
}

TEST(ParquetListSchema, ThreeAndTwoLevelListsByTheBackwardCompatibilityRules) {
  namespace pq = ferry::detail::parquet;
  const auto levels = [](const pq::TopColumn& c) {
    return std::vector<int>{c.lists.defined.at(0), c.lists.filled.at(0), c.lists.value_def};
  };
  {  // 3-level: optional group a (LIST) { repeated group list { optional int32 element } }
    std::vector<pq::SchemaElement> s = {element("a", 1, 1, true), element("list", 2, 1),
                                        element("element", 1, 0)};
    const auto c = one_column(s);
    ASSERT_EQ(c[0].depth(), 1U);
    EXPECT_EQ(levels(c[0]), (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(pq::list_dtype(c[0]), DType::i32);
    EXPECT_EQ(pq::type_text(c[0]), "list<INT32>");
  }
  {  // 2-level: optional group a (LIST) { repeated int32 element }
    std::vector<pq::SchemaElement> s = {element("a", 1, 1, true), element("element", 2, 0)};
    const auto c = one_column(s);
    ASSERT_EQ(c[0].depth(), 1U);
    EXPECT_EQ(levels(c[0]), (std::vector<int>{1, 2, 2}));
  }
  {  // a bare repeated int32: a required list of required values
    std::vector<pq::SchemaElement> s = {element("a", 2, 0)};
    const auto c = one_column(s);
    ASSERT_EQ(c[0].depth(), 1U);
    EXPECT_EQ(levels(c[0]), (std::vector<int>{0, 1, 1}));
  }
  {  // required group a (LIST) { repeated group list { required int32 element } }
    std::vector<pq::SchemaElement> s = {element("a", 0, 1, true), element("list", 2, 1),
                                        element("element", 0, 0)};
    const auto c = one_column(s);
    ASSERT_EQ(c[0].depth(), 1U);
    EXPECT_EQ(levels(c[0]), (std::vector<int>{0, 1, 1}));
  }
  // A repeated group named "array" or "<name>_tuple", or of two fields, is a struct element:
  // not a list ferry reads.
  for (const std::string rep : {"array", "a_tuple"}) {
    std::vector<pq::SchemaElement> s = {element("a", 1, 1, true), element(rep, 2, 1),
                                        element("x", 0, 0)};
    const auto c = one_column(s);
    EXPECT_EQ(c[0].depth(), 0U) << rep;
    EXPECT_TRUE(c[0].nested) << rep;
  }
  {
    std::vector<pq::SchemaElement> s = {element("a", 1, 1, true), element("list", 2, 2),
                                        element("x", 0, 0), element("y", 0, 0)};
    EXPECT_EQ(one_column(s)[0].depth(), 0U);
  }
  {  // list<list<int32>>: two levels, the inner list's defined after the outer's element
    std::vector<pq::SchemaElement> s = {element("a", 1, 1, true), element("list", 2, 1),
                                        element("element", 1, 1, true), element("list", 2, 1),
                                        element("element", 1, 0)};
    const auto c = one_column(s);
    ASSERT_EQ(c[0].depth(), 2U);
    EXPECT_EQ(c[0].lists.defined, (std::vector<int>{1, 3}));
    EXPECT_EQ(c[0].lists.filled, (std::vector<int>{2, 4}));
    EXPECT_EQ(c[0].lists.value_def, 5);
    EXPECT_EQ(c[0].max_def, 5);
    // Without a stored Arrow schema that makes the inner list fixed: not read.
    EXPECT_FALSE(pq::list_shape(c[0], nullptr, "a"));
  }
}

TEST_F(ParquetLists, AListColumnReadByRangesFromAUrl) {
  const std::string url = "file://" + file("lists_plain_v2.parquet").string();
  const auto ds = ParquetDataset::open({url});
  ASSERT_EQ(ds->size(), kRows);
  expect_all_rows(ds, loader_options(6, true, 2), url);
}

std::vector<std::uint64_t> rows_but(const std::function<bool(std::uint64_t)>& out) {
  std::vector<std::uint64_t> rows;
  for (std::uint64_t r = 0; r < kRows; ++r) {
    if (!out(r)) rows.push_back(r);
  }
  return rows;
}

void read_all(const std::shared_ptr<ParquetDataset>& ds) {
  ferry::LoaderOptions lo;
  lo.batch_size = 1;
  lo.workers = 1;
  lo.autotune = false;
  lo.device = ferry::Device::cpu();
  ferry::Loader loader(ds, lo);
  for (const ferry::Batch& b : loader.epoch(0)) (void)b;
}

TEST_F(ParquetLists, NullListsAndNullElementsFollowMissing) {
  const std::string name = "lists_nulls.parquet";
  TableOptions o;
  o.columns = {"lf"};  // no null: every row
  EXPECT_EQ(rows_kept(ParquetDataset::open({file(name)}, o)), rows_but([](auto) { return false; }));
  // A ragged list: a null row, or a null inside, is an error under either Missing.
  o.columns = {"li"};
  for (const auto missing : {ferry::Missing::error, ferry::Missing::nan}) {
    o.missing = missing;
    const auto ds = ParquetDataset::open({file(name)}, o);
    EXPECT_EQ(ds->length(3, 0), 0);  // a null row's length
    expect_error<DataError>([&] { read_all(ds); },
                            {"ParquetDataset", name, "row group 0, row 3", "\"li\"", "a null",
                             "Missing::nan reads nulls only in float"});
    const auto li_null = [](std::uint64_t r) { return r % 7 == 3 || r % 11 == 5; };
    EXPECT_EQ(rows_kept(ds), rows_but(li_null));
  }
  o.columns = {"li"};
  o.missing = ferry::Missing::error;
  {
    const auto ds = ParquetDataset::open({file(name)}, o);
    ferry::Loader loader(ds, loader_options(1, false, 1));
    auto epoch = loader.epoch(0);
    auto it = epoch.begin();
    for (int r = 0; r < 2; ++r) ++it;  // rows 1, 2; row 3 is null
    expect_error<DataError>([&] { ++it; }, {name, "row 3", "\"li\""});
  }
  // A fixed shape of floats under Missing::nan: the whole slot NaN for a null row or a null
  // inside; under Missing::error, those rows are errors.
  o.columns = {"f4"};
  o.missing = ferry::Missing::nan;
  const auto f4_null = [](std::uint64_t r) { return r % 5 == 2 || r % 6 == 1; };
  {
    const auto ds = ParquetDataset::open({file(name)}, o);
    ferry::Loader loader(ds, loader_options(5, true, 2));
    std::size_t rows = 0;
    for (const ferry::Batch& b : loader.epoch(0)) {
      for (std::size_t j = 0; j < b.size(); ++j, ++rows) {
        const std::uint64_t r = b.indices()[j];
        const auto v = values_of(b, "f4", j, false, false);
        ASSERT_EQ(v.size(), 4U);
        if (f4_null(r)) {
          for (const double x : v) EXPECT_TRUE(std::isnan(x)) << "row " << r;
        } else {
          EXPECT_EQ(v, expected("f4", r).values) << "row " << r;
        }
      }
    }
    EXPECT_EQ(rows, kRows);
  }
  o.missing = ferry::Missing::error;
  {
    const auto ds = ParquetDataset::open({file(name)}, o);
    expect_error<DataError>([&] { read_all(ds); }, {name, "row group 0, row 1", "\"f4\"",
                                                    "a null inside", "Missing::error"});
    EXPECT_EQ(rows_kept(ds), rows_but(f4_null));
  }
  // Integers have no NaN: a null row is an error under Missing::nan too.
  o.columns = {"i2"};
  o.missing = ferry::Missing::nan;
  {
    const auto ds = ParquetDataset::open({file(name)}, o);
    EXPECT_EQ(ds->fields()[0].shape, std::vector<std::int64_t>{2});
    expect_error<DataError>([&] { read_all(ds); },
                            {name, "row group 0, row 4", "\"i2\"", "a null", "only in float"});
    EXPECT_EQ(rows_kept(ds), rows_but([](std::uint64_t r) { return r % 9 == 4; }));
  }
}

TEST_F(ParquetLists, ARowOfAFixedSizeListWithAnotherLengthIsADataErrorNamingIt) {
  // wrong_list.parquet's stored Arrow schema says fixed_size_list<float>[4]; row 13 holds 3.
  const std::string name = "wrong_list.parquet";
  const auto ds = ParquetDataset::open({file(name)});
  ASSERT_EQ(ds->fields()[0].shape, std::vector<std::int64_t>{4});
  expect_error<DataError>([&] { read_all(ds); },
                          {"ParquetDataset", name, "row group 0, row 13, column \"v\"",
                           "a list of 3 at dimension 0", "shape (4) has 4"});
  EXPECT_EQ(rows_kept(ds), rows_but([](std::uint64_t r) { return r == 13; }));
}

TEST_F(ParquetLists, AFixedShapeLargerThanTheChunkIsADataErrorAtOpen) {
  // forged_fixed.parquet: one row of fixed_size_list<int32>[4951], its stored Arrow schema's size
  // forged to 2^31 - 1: open() took it (a field of 8 GiB a sample; a read ended in bad_alloc, a
  // loader's ConfigError blamed the batch size). One row's values must be among the chunk's.
  const std::string name = "forged_fixed.parquet";
  expect_error<DataError>([&] { static_cast<void>(ParquetDataset::open({file(name)})); },
                          {"ParquetDataset", name, "row group 0: column \"v\"",
                           "its fixed shape needs 2147483647 values a row, the chunk holds 4951"});
}

TEST_F(ParquetLists, CorruptRepetitionLevelsAreADataErrorNamingThePage) {
  // lists_one.parquet: one column, uncompressed PLAIN pages v1, no dictionary: its first page
  // header starts at byte 4, its body with the repetition levels' length, then their runs:
  // made one RLE run of the page's count of 1s, the chunk's first value continues a row.
  const std::string name = "lists_one.parquet";
  std::vector<char> bytes = read_file(file(name));
  std::size_t header = 0;
  const auto h = ferry::detail::parquet::parse_page_header(
      std::as_bytes(std::span<const char>(bytes).subspan(4)), header);
  ASSERT_EQ(h.type, 0);  // a data page v1
  const std::size_t body = 4 + header;
  std::uint32_t rep_length = 0;
  std::memcpy(&rep_length, bytes.data() + body, 4);
  ASSERT_GE(rep_length, 2U);
  ASSERT_LT(h.num_values, 64);
  bytes[body + 4] = static_cast<char>(h.num_values << 1);  // an RLE run of every level
  bytes[body + 5] = 0x01;                                  // of repetition level 1
  const fs::path bad = dir_ / "lists_one_bad.parquet";
  std::ofstream(bad, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  expect_error<DataError>([&] { static_cast<void>(ParquetDataset::open({bad})); },
                          {"ParquetDataset", "lists_one_bad.parquet", "row group 0", "\"li\"",
                           "page 0", "the first value continues a row"});
  // A repetition level above the column's one (1): a run of 3s.
  bytes[body + 5] = 0x03;
  std::ofstream(bad, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  expect_error<DataError>([&] { static_cast<void>(ParquetDataset::open({bad})); },
                          {"lists_one_bad.parquet", "\"li\"", "page 0", "level"});
}

TEST_F(ParquetLists, MapsStructsListsOfVaryingListsAndListsOfTextAreConfigErrors) {
  const std::string name = "lists_other.parquet";
  TableOptions o;
  o.columns = {"id", "ll"};
  expect_error<ConfigError>([&] { static_cast<void>(ParquetDataset::open({file(name)}, o)); },
                            {"\"ll\"", "list<list<INT32", "lists inside lists"});
  o.columns = {"ls"};
  expect_error<ConfigError>([&] { static_cast<void>(ParquetDataset::open({file(name)}, o)); },
                            {"\"ls\"", "list<BYTE_ARRAY (STRING)>", "does not read"});
  o.columns = {"st"};
  expect_error<ConfigError>([&] { static_cast<void>(ParquetDataset::open({file(name)}, o)); },
                            {"\"st\"", "group", "does not read"});
  o.columns = {"li"};
  o.categorical = {"li"};
  expect_error<ConfigError>(
      [&] { static_cast<void>(ParquetDataset::open({file("lists_dict_v1.parquet")}, o)); },
      {"\"li\"", "only text columns are categorical"});
  o.columns = {"id"};
  o.categorical = {};
  EXPECT_EQ(ParquetDataset::open({file(name)}, o)->size(), kRows);
}

// Pages built here: the Thrift compact protocol's page header, and RLE runs of one level each.
struct PageWriter {
  std::vector<std::byte> out;
  void byte(unsigned b) { out.push_back(static_cast<std::byte>(b)); }
  void varint(std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) byte(static_cast<unsigned>((v & 0x7f) | 0x80));
    byte(static_cast<unsigned>(v));
  }
  void i32(int delta, std::int32_t v) {  // a field `delta` ids after the last, i32
    byte(static_cast<unsigned>((delta << 4) | 5));
    varint(static_cast<std::uint64_t>((static_cast<std::uint32_t>(v) << 1) ^
                                      static_cast<std::uint32_t>(v >> 31)));
  }
  static std::vector<std::byte> runs(const std::vector<unsigned>& levels) {
    std::vector<std::byte> r;
    for (const unsigned l : levels) {
      r.push_back(std::byte{0x02});
      r.push_back(static_cast<std::byte>(l));
    }
    return r;
  }
  /// A data page v1's header: `size` bytes of `values` values in `encoding`, RLE levels.
  void data_page_header(std::int32_t size, std::int32_t values, std::int32_t encoding) {
    i32(1, 0);  // DATA_PAGE
    i32(1, size);
    i32(1, size);
    byte(0x2c);  // field 5, a struct: DataPageHeader
    i32(1, values);
    i32(1, encoding);
    i32(1, 3);  // RLE definition levels
    i32(1, 3);  // RLE repetition levels
    byte(0);    // its end
    byte(0);    // the header's end
  }
  /// A data page v1 of PLAIN int32 values.
  void page(const std::vector<unsigned>& rep, const std::vector<unsigned>& def,
            const std::vector<std::int32_t>& values) {
    std::vector<std::byte> body;
    for (const auto* levels : {&rep, &def}) {
      const auto r = runs(*levels);
      const auto n = static_cast<std::uint32_t>(r.size());
      for (int i = 0; i < 4; ++i) body.push_back(static_cast<std::byte>((n >> (8 * i)) & 0xff));
      body.insert(body.end(), r.begin(), r.end());
    }
    for (const std::int32_t v : values) {
      const auto* p = reinterpret_cast<const std::byte*>(&v);
      body.insert(body.end(), p, p + 4);
    }
    const auto size = static_cast<std::int32_t>(body.size());
    i32(1, 0);  // type: DATA_PAGE
    i32(1, size);
    i32(1, size);
    byte(0x2c);  // field 5, a struct: DataPageHeader
    i32(1, static_cast<std::int32_t>(rep.size()));
    i32(1, 0);  // PLAIN
    i32(1, 3);  // RLE definition levels
    i32(1, 3);  // RLE repetition levels
    byte(0);    // its end
    byte(0);    // the header's end
    out.insert(out.end(), body.begin(), body.end());
  }
};

TEST(ParquetListLevels, ARowSpanningTwoPagesV1NullsAndEmptyListsBecomeTheirRows) {
  // optional group (LIST) { repeated group list { optional int32 element } }: definition 0 a
  // null list, 1 an empty one, 2 a null element, 3 a value; repetition 1 continues a list.
  namespace pq = ferry::detail::parquet;
  const pq::ListLevels levels{{1}, {2}, 3};
  PageWriter w;
  w.page({0, 1}, {3, 3}, {1, 2});                    // row 0: [1, 2, ...
  w.page({1, 0, 0, 0, 1}, {3, 1, 0, 3, 2}, {3, 4});  // ... 3], [], null, [4, null]
  const auto col = pq::decode_list_chunk(w.out, pq::Physical::int32, pq::Codec::uncompressed,
                                         levels, {-1}, 7, 4);
  EXPECT_EQ(col.rows, 4U);
  EXPECT_EQ(col.offsets, (std::vector<std::uint64_t>{0, 3, 3, 3, 5}));
  EXPECT_EQ(col.lengths, (std::vector<std::uint32_t>{3, 0, 0, 2}));
  EXPECT_EQ(col.valid, (std::vector<std::uint8_t>{1, 1, 0, 1}));
  EXPECT_EQ(col.null_inside, (std::vector<std::uint8_t>{0, 0, 0, 1}));
  std::vector<std::int32_t> values(col.fixed.size() / 4);
  std::memcpy(values.data(), col.fixed.data(), col.fixed.size());
  EXPECT_EQ(values, (std::vector<std::int32_t>{1, 2, 3, 4, 0}));
  EXPECT_TRUE(col.wrong.empty());
  // As a fixed shape [2]: rows 0 (3 values) and 1 (none) have another length; row 2 is null.
  const auto fixed =
      pq::decode_list_chunk(w.out, pq::Physical::int32, pq::Codec::uncompressed, levels, {2}, 7, 4);
  ASSERT_EQ(fixed.wrong.size(), 2U);
  EXPECT_EQ(fixed.wrong[0].row, 0U);
  EXPECT_EQ(fixed.wrong[0].length, 3U);
  EXPECT_EQ(fixed.wrong[1].row, 1U);
  EXPECT_EQ(fixed.wrong[1].length, 0U);
  // Levels that make another count of rows than the row group's.
  expect_error<pq::ChunkError>(
      [&] {
        static_cast<void>(pq::decode_list_chunk(w.out, pq::Physical::int32, pq::Codec::uncompressed,
                                                levels, {-1}, 7, 5));
      },
      {"make 4 rows where the row group has 5"});
}

TEST(ParquetListLevels, LevelsThatMakeNoRowsAreChunkErrorsNamingThePage) {
  namespace pq = ferry::detail::parquet;
  const pq::ListLevels levels{{1}, {2}, 3};
  const auto decode = [&](const PageWriter& w, std::size_t values) {
    static_cast<void>(pq::decode_list_chunk(w.out, pq::Physical::int32, pq::Codec::uncompressed,
                                            levels, {-1}, values, 1));
  };
  PageWriter first;  // the chunk's first value continues a row
  first.page({1}, {3}, {1});
  expect_error<pq::ChunkError>([&] { decode(first, 1); }, {"page 0", "continues a row"});
  PageWriter empty;  // an empty list that gets an element
  empty.page({0, 1}, {1, 3}, {1});
  expect_error<pq::ChunkError>([&] { decode(empty, 2); }, {"page 0", "empty or null"});
  PageWriter high;  // a repetition level of 2 in a column of one level of lists
  high.page({0, 2}, {3, 3}, {1, 2});
  expect_error<pq::ChunkError>([&] { decode(high, 2); }, {"page 0", "repetition level too high"});
  PageWriter few;  // values missing: the page's count of values says more than its runs hold
  few.page({0, 1}, {3, 3}, {1});
  expect_error<pq::ChunkError>([&] { decode(few, 2); }, {"page 0", "PLAIN values end early"});
  PageWriter more;  // more pages than the chunk's count of values
  more.page({0}, {3}, {1});
  expect_error<pq::ChunkError>([&] { decode(more, 2); }, {"page 1", "the chunk ends"});
}

/// A page header of `type` (0 DATA_PAGE, 2 DICTIONARY_PAGE, 3 DATA_PAGE_V2, compressed, with
/// no level bytes) that claims `values` values and `claimed` bytes decompressed, followed by
/// `body` zero bytes.
std::vector<std::byte> forged_page(int type, std::int32_t values, std::int32_t claimed, int body) {
  PageWriter w;
  w.i32(1, type);
  w.i32(1, claimed);
  w.i32(1, body);
  // Field 5, DataPageHeader; 7, DictionaryPageHeader; 8, DataPageHeaderV2.
  w.byte(type == 0 ? 0x2c : type == 2 ? 0x4c : 0x5c);
  w.i32(1, values);
  if (type == 3) {
    w.i32(1, 0);       // nulls
    w.i32(1, values);  // rows
  }
  w.i32(1, 0);  // PLAIN
  if (type == 0) {
    w.i32(1, 3);  // RLE levels
    w.i32(1, 3);
  } else if (type == 3) {
    w.i32(1, 0);  // definition and repetition levels' bytes
    w.i32(1, 0);
  }
  w.byte(0);
  w.byte(0);
  w.out.resize(w.out.size() + static_cast<std::size_t>(body), std::byte{0});
  return w.out;
}

TEST(ParquetForgedSizes, PagesClaimingMoreThanTheirBytesHoldAreChunkErrorsNotAllocations) {
  // Run in a child under an address space of 2 GiB: before the bound, each of these asked for
  // gigabytes (levels for 2^31 - 1 values, or offsets for as many byte arrays) and ended in
  // std::bad_alloc.
  namespace pq = ferry::detail::parquet;
  const auto decode = [](std::vector<std::byte> page, pq::Physical type, pq::Codec codec,
                         std::size_t rows) {
    return ferry::testing::in_child(
        [&]() -> std::string {
          try {
            static_cast<void>(pq::decode_chunk(page, type, codec, 1, rows));
            return "no error";
          } catch (const pq::ChunkError& e) {
            return e.what();
          }
        },
        std::uint64_t{2} << 30, 60);
  };
  const std::size_t rows = 0x7fffffff;
  // 16 bytes of a data page that claims 2^31 - 1 values in 2^28 bytes, uncompressed or snappy.
  for (const auto codec : {pq::Codec::uncompressed, pq::Codec::snappy}) {
    const std::string said =
        decode(forged_page(0, 0x7fffffff, 1 << 28, 16), pq::Physical::int32, codec, rows);
    EXPECT_NE(said.find("page 0"), std::string::npos) << said;
    EXPECT_NE(said.find("claims 268435456 decompressed"), std::string::npos) << said;
  }
  // A dictionary page of 16 bytes that claims 2^31 - 1 byte arrays.
  const std::string said = decode(forged_page(2, 0x7fffffff, 16, 16), pq::Physical::byte_array,
                                  pq::Codec::uncompressed, 1);
  EXPECT_NE(said.find("page 0"), std::string::npos) << said;
  EXPECT_NE(said.find("PLAIN byte arrays end early"), std::string::npos) << said;
  // A zstd page of 64 bytes that claims 1 GiB: zstd makes at most 32768 bytes of a byte.
  const std::string zstd =
      decode(forged_page(0, 1000, 1 << 30, 64), pq::Physical::int32, pq::Codec::zstd, 1000);
  EXPECT_NE(zstd.find("more than ZSTD makes"), std::string::npos) << zstd;
  // A v2 page of 8 KiB of zstd that claims 2^31 - 1 values in 2^28 bytes (zstd could make them
  // of 8 KiB): its levels (8 GiB) were made before its bytes were found not to decompress.
  const std::string v2 =
      decode(forged_page(3, 0x7fffffff, 1 << 28, 8192), pq::Physical::int32, pq::Codec::zstd, rows);
  EXPECT_NE(v2.find("page 0"), std::string::npos) << v2;
  EXPECT_NE(v2.find("a corrupt zstd page"), std::string::npos) << v2;
  // 32 KiB of a zstd page that claims 1 GiB, as zstd could make of them: the page's buffer grows
  // as its bytes decompress, so the claim costs nothing (before, the read made 1 GiB at once:
  // under an address space of 1 GiB, std::bad_alloc).
  const auto gib = forged_page(0, 1000, 1 << 30, 32768);
  const std::string grown = ferry::testing::in_child(
      [&]() -> std::string {
        try {
          static_cast<void>(pq::decode_chunk(gib, pq::Physical::int32, pq::Codec::zstd, 1, 1000));
          return "no error";
        } catch (const pq::ChunkError& e) {
          return e.what();
        }
      },
      std::uint64_t{1} << 30, 60);
  EXPECT_NE(grown.find("page 0"), std::string::npos) << grown;
  EXPECT_NE(grown.find("a corrupt zstd page"), std::string::npos) << grown;
  // The same for gzip (1 MiB claiming 1 GiB - 1, as deflate could make of it) and LZ4_RAW (4 MiB):
  // before, each made the claimed size at once.
  for (const auto& [codec, body, what] :
       {std::tuple{pq::Codec::gzip, 1 << 20, "a corrupt gzip page"},
        std::tuple{pq::Codec::lz4_raw, 4 << 20, "a corrupt LZ4_RAW page"}}) {
    const auto big = forged_page(0, 1000, (1 << 30) - 1, body);
    const std::string told = ferry::testing::in_child(
        [&]() -> std::string {
          try {
            static_cast<void>(pq::decode_chunk(big, pq::Physical::int32, codec, 1, 1000));
            return "no error";
          } catch (const pq::ChunkError& e) {
            return e.what();
          }
        },
        std::uint64_t{1} << 30, 60);
    EXPECT_NE(told.find(what), std::string::npos) << told;
  }
}

TEST(ParquetForgedSizes, ADictionaryValueRepeatedByEveryRowIsSizedNotMade) {
  // A dictionary page of one 64 KiB byte array, then 2^14 rows of index 0 in 5 bytes: 1 GiB of
  // values. open() scans a byte-array column for its sizes alone (it made every row's bytes:
  // a file of 1 MiB so asked for a terabyte), and a read that makes the bytes stops at its
  // limit with a ChunkError naming the row.
  namespace pq = ferry::detail::parquet;
  constexpr std::size_t kValue = 65536;
  constexpr std::size_t kRepeats = 16384;
  PageWriter w;
  const auto dictionary_bytes = static_cast<std::int32_t>(4 + kValue);
  w.i32(1, 2);  // DICTIONARY_PAGE
  w.i32(1, dictionary_bytes);
  w.i32(1, dictionary_bytes);
  w.byte(0x4c);  // field 7: DictionaryPageHeader
  w.i32(1, 1);   // one value
  w.i32(1, 0);   // PLAIN
  w.byte(0);
  w.byte(0);
  const auto length = static_cast<std::uint32_t>(kValue);
  for (int i = 0; i < 4; ++i) w.byte((length >> (8 * i)) & 0xff);
  w.out.resize(w.out.size() + kValue, std::byte{'v'});
  std::vector<std::byte> indices = {std::byte{1}};  // bit width 1, then a run of kRepeats zeros
  for (std::uint64_t v = kRepeats << 1; v != 0; v >>= 7) {
    indices.push_back(static_cast<std::byte>((v & 0x7f) | (v >= 0x80 ? 0x80 : 0)));
  }
  indices.push_back(std::byte{0});
  w.data_page_header(static_cast<std::int32_t>(indices.size()), static_cast<std::int32_t>(kRepeats),
                     8);  // RLE_DICTIONARY
  w.out.insert(w.out.end(), indices.begin(), indices.end());
  pq::RawColumn sizes;
  sizes.sizes_only = true;
  const pq::RawColumn sized = pq::decode_chunk(w.out, pq::Physical::byte_array,
                                               pq::Codec::uncompressed, 0, kRepeats, sizes);
  EXPECT_TRUE(sized.bytes.empty());
  ASSERT_EQ(sized.offsets.size(), kRepeats + 1);
  for (std::size_t r = 0; r < kRepeats; ++r) ASSERT_EQ(sized.size(r), kValue) << r;
  pq::RawColumn limited;
  limited.max_bytes = std::size_t{1} << 20;
  expect_error<pq::ChunkError>(
      [&] {
        static_cast<void>(pq::decode_chunk(w.out, pq::Physical::byte_array, pq::Codec::uncompressed,
                                           0, kRepeats, limited));
      },
      {"page 1", "byte arrays of more than 1048576 bytes in one chunk (row 16)"});
}

TEST(ParquetForgedSizes, DeltaByteArrayPrefixesClaimingTerabytesAreRefusedBeforeAnythingIsMade) {
  // One DELTA_BYTE_ARRAY page of 2^20 values in about 1.1 MB: prefix lengths 0, 1, 2, ... and
  // suffixes of one byte, so that each value is the one before and a byte (half a terabyte in
  // all). The values' lengths are summed before any value is made: refused at the page's limit
  // (1 GiB) with nothing allocated. Before, the decode made the values up to that limit (about
  // 1.8 GB at its peak, 25 s; open() scans it too): under an address space of 1 GiB here,
  // std::bad_alloc.
  namespace pq = ferry::detail::parquet;
  constexpr std::uint64_t kValues = std::uint64_t{1} << 20;
  PageWriter body;
  // DELTA_BINARY_PACKED: blocks of 128 values in 4 miniblocks, `first`, then every delta `step`
  // (each block: its minimum delta, then four bit widths of 0 and no packed bits).
  const auto deltas = [&](std::uint64_t first, std::uint64_t step) {
    body.varint(128);
    body.varint(4);
    body.varint(kValues);
    body.varint(first << 1);  // zigzag, non-negative
    for (std::uint64_t b = 0; b < (kValues - 1 + 127) / 128; ++b) {
      body.varint(step << 1);
      for (int m = 0; m < 4; ++m) body.byte(0);
    }
  };
  deltas(0, 1);  // prefix lengths 0, 1, 2, ...
  deltas(1, 0);  // suffix lengths 1, 1, 1, ...
  body.out.resize(body.out.size() + kValues, std::byte{'x'});
  PageWriter w;
  w.data_page_header(static_cast<std::int32_t>(body.out.size()), static_cast<std::int32_t>(kValues),
                     7);  // DELTA_BYTE_ARRAY
  w.out.insert(w.out.end(), body.out.begin(), body.out.end());
  for (const bool sizes_only : {true, false}) {  // open()'s scan, and a read
    const std::string said = ferry::testing::in_child(
        [&]() -> std::string {
          try {
            pq::RawColumn shape;
            shape.sizes_only = sizes_only;
            static_cast<void>(pq::decode_chunk(w.out, pq::Physical::byte_array,
                                               pq::Codec::uncompressed, 0, kValues, shape));
            return "no error";
          } catch (const pq::ChunkError& e) {
            return e.what();
          }
        },
        std::uint64_t{1} << 30, 60);
    EXPECT_NE(said.find("page 0"), std::string::npos) << said;
    EXPECT_NE(said.find("DELTA_BYTE_ARRAY values of more than 1 GiB in one page (value 46340)"),
              std::string::npos)
        << said;
  }
}

/// `values` compressed with `codec` (zstd, gzip or LZ4_RAW) as a Parquet page's body would be.
std::vector<std::byte> compressed(const std::vector<std::int32_t>& values,
                                  ferry::detail::parquet::Codec codec) {
  namespace pq = ferry::detail::parquet;
  const std::size_t bytes = values.size() * 4;
  std::vector<std::byte> out;
  if (codec == pq::Codec::zstd) {
    out.resize(ZSTD_compressBound(bytes));
    const std::size_t n = ZSTD_compress(out.data(), out.size(), values.data(), bytes, 3);
    out.resize(ZSTD_isError(n) != 0 ? 0 : n);
  } else if (codec == pq::Codec::gzip) {
    z_stream z{};
    if (deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) return out;
    out.resize(deflateBound(&z, static_cast<uLong>(bytes)));
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::int32_t*>(values.data()));
    z.avail_in = static_cast<uInt>(bytes);
    z.next_out = reinterpret_cast<Bytef*>(out.data());
    z.avail_out = static_cast<uInt>(out.size());
    const int r = deflate(&z, Z_FINISH);
    out.resize(r == Z_STREAM_END ? z.total_out : 0);
    deflateEnd(&z);
  } else {
    out.resize(static_cast<std::size_t>(LZ4_compressBound(static_cast<int>(bytes))));
    const int n = LZ4_compress_default(reinterpret_cast<const char*>(values.data()),
                                       reinterpret_cast<char*>(out.data()), static_cast<int>(bytes),
                                       static_cast<int>(out.size()));
    out.resize(static_cast<std::size_t>(std::max(n, 0)));
  }
  return out;
}

TEST(ParquetForgedSizes, PagesOfAHighRatioDecodeAsTheirBytesMakeThem) {
  // 4 MiB of int32 values in a repeating pattern, compressed past 64 to 1: zstd's and gzip's
  // pages grow as they decompress, an LZ4 block's size is read from its sequences first; each
  // gives the very values written, and a claim one byte off is a ChunkError.
  namespace pq = ferry::detail::parquet;
  constexpr std::size_t kValues = std::size_t{1} << 20;
  std::vector<std::int32_t> values(kValues);
  for (std::size_t i = 0; i < kValues; ++i) values[i] = static_cast<std::int32_t>(i % 7) - 3;
  for (const auto codec : {pq::Codec::zstd, pq::Codec::gzip, pq::Codec::lz4_raw}) {
    SCOPED_TRACE(pq::codec_name(codec));
    const std::vector<std::byte> packed = compressed(values, codec);
    ASSERT_FALSE(packed.empty());
    ASSERT_LT(packed.size() * 64 + (std::size_t{1} << 20), kValues * 4);  // the checked path
    const auto page = [&](std::size_t claim) {
      PageWriter w;
      w.i32(1, 0);
      w.i32(1, static_cast<std::int32_t>(claim));
      w.i32(1, static_cast<std::int32_t>(packed.size()));
      w.byte(0x2c);
      w.i32(1, static_cast<std::int32_t>(kValues));
      w.i32(1, 0);  // PLAIN
      w.i32(1, 3);
      w.i32(1, 3);
      w.byte(0);
      w.byte(0);
      w.out.insert(w.out.end(), packed.begin(), packed.end());
      return w.out;
    };
    const pq::RawColumn col =
        pq::decode_chunk(page(kValues * 4), pq::Physical::int32, codec, 0, kValues);
    ASSERT_EQ(col.fixed.size(), kValues * 4);
    EXPECT_EQ(std::memcmp(col.fixed.data(), values.data(), kValues * 4), 0);
    for (const std::size_t claim : {kValues * 4 - 1, kValues * 4 + 1}) {
      const std::string why =
          codec == pq::Codec::lz4_raw
              ? "a corrupt LZ4_RAW page"
              : (claim < kValues * 4 ? "more bytes than it claims" : "the wrong size");
      expect_error<pq::ChunkError>(
          [&] {
            static_cast<void>(
                pq::decode_chunk(page(claim), pq::Physical::int32, codec, 0, kValues));
          },
          {"page 0", why});
    }
  }
}

}  // namespace
