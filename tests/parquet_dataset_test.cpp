// ParquetDataset against files it did not write: tests/table/write_tables.js writes them with
// apache-arrow and parquet-wasm (the Rust Parquet writer), from npm (scripts/setup installs them
// into tests/table/node_modules). Row r of every file holds values computed from r, which the
// expected_* functions below compute the same way. The images of the image tables are encoded
// here (TurboJPEG, libspng) and handed to the writer as files.

#include <gtest/gtest.h>
#include <malloc.h>
#include <spng.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "source_dir.hpp"
#include "table_images.hpp"
#include "table_writer.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::DType;
using ferry::ParquetDataset;
using ferry::TableOptions;
using ferry::testing::expect_error;
using ferry::testing::table_images::Bytes;
using ferry::testing::table_images::encode_jpeg;
using ferry::testing::table_images::encode_png;
using ferry::testing::table_images::pattern;
using ferry::testing::table_images::write_bytes;

constexpr std::size_t kRows = 50;

const char* const kFruit[] = {"pear", "apple", "fig", "banana", "kiwi"};
std::string expected_cat(std::size_t r) { return kFruit[(r * 3) % 5]; }
std::vector<std::uint8_t> expected_bin(std::size_t r) {
  std::vector<std::uint8_t> v;
  for (std::size_t k = 0; k < r % 6; ++k)
    v.push_back(static_cast<std::uint8_t>((r * 31 + k * 7) % 256));
  return v;
}
bool nf_is_null(std::size_t r) { return r % 4 == 1; }
bool ns_is_null(std::size_t r) { return r % 7 == 2; }

std::vector<std::uint8_t> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

constexpr std::size_t kImages = 40;  // images.parquet's rows: 6 row groups of 7 and 1 of 5

class ParquetFiles : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry_parquet_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    // The images: in one folder for the writer, and as ImageFolder's class "a" (JPEG and PNG).
    ferry::testing::table_images::write_image_pair(dir_ / "images", dir_ / "folder/a", kImages);
    skip_ = ferry::testing::run_table_writer(FERRY_SOURCE_DIR, "write_tables.js",
                                             {"parquet-wasm", "apache-arrow"},
                                             {dir_.string(), (dir_ / "images").string()});
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    scratch_ = dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(scratch_);
  }

  static fs::path file(const std::string& name) { return dir_ / name; }

  static ferry::LoaderOptions loader_options(std::size_t batch, bool shuffle, int workers) {
    return ferry::testing::table_loader_options(batch, shuffle, workers, 5);
  }

  static std::string skip_;
  static fs::path dir_;
  fs::path scratch_;
};
std::string ParquetFiles::skip_;
fs::path ParquetFiles::dir_;

TableOptions every_readable_column() {
  TableOptions o;
  o.columns = {"b",   "i8",  "i16", "i32", "i64", "u8", "u16", "u32",
               "u64", "f32", "f64", "s",   "bin", "nf", "ns"};
  o.categorical = {"s", "ns"};
  o.missing = ferry::Missing::nan;
  return o;
}

template <class T>
T at(const ferry::Tensor& t, std::size_t j) {
  return t.data<T>()[j];
}

template <class Code>
void expect_all_rows_of_epoch(ferry::Loader& loader, std::uint64_t epoch, const Code& code,
                              const std::string& what) {
  const ferry::LoaderOptions& lo = loader.options();
  std::set<std::uint64_t> seen;
  std::vector<std::uint64_t> order;
  for (const ferry::Batch& b : loader.epoch(epoch)) {
    const ferry::Tensor& bin = b["bin"];
    const ferry::Tensor& len = b.lengths("bin");
    ASSERT_EQ(bin.dtype(), DType::u8);
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::uint64_t r = b.indices()[j];
      order.push_back(r);
      ASSERT_TRUE(seen.insert(r).second) << what << ": row " << r << " twice";
      SCOPED_TRACE(what + ", row " + std::to_string(r));
      EXPECT_EQ(at<std::uint8_t>(b["b"], j), r % 3 == 0 ? 1 : 0);
      EXPECT_EQ(at<std::int8_t>(b["i8"], j), static_cast<std::int8_t>(((r * 37) % 256) - 128));
      EXPECT_EQ(at<std::int16_t>(b["i16"], j),
                static_cast<std::int16_t>(static_cast<int>(r) * 1000 - 20000));
      EXPECT_EQ(at<std::int32_t>(b["i32"], j), static_cast<std::int32_t>(r) * 100000 - 2000000000);
      EXPECT_EQ(at<std::int64_t>(b["i64"], j),
                static_cast<std::int64_t>(r) * 123456789012LL - 3000000000000LL);
      EXPECT_EQ(at<std::uint8_t>(b["u8"], j), (r * 11) % 256);
      EXPECT_EQ(at<std::uint16_t>(b["u16"], j), 65535 - r * 7);
      EXPECT_EQ(at<std::uint32_t>(b["u32"], j), 4294967295U - r * 1000);
      EXPECT_EQ(at<std::uint64_t>(b["u64"], j), std::numeric_limits<std::uint64_t>::max() - r * 3);
      EXPECT_EQ(at<float>(b["f32"], j), static_cast<float>(r) * 0.5F - 3.0F);
      EXPECT_EQ(at<double>(b["f64"], j), static_cast<double>(r) * 0.25 + 1e10);
      EXPECT_EQ(at<std::int64_t>(b["s"], j), code(r));
      const auto want = expected_bin(r);
      ASSERT_EQ(at<std::int64_t>(len, j), static_cast<std::int64_t>(want.size()));
      const std::size_t width = static_cast<std::size_t>(bin.shape()[1]);
      for (std::size_t k = 0; k < want.size(); ++k) {
        EXPECT_EQ(bin.data<std::uint8_t>()[j * width + k], want[k]) << "byte " << k;
      }
      const double nf = at<double>(b["nf"], j);
      if (nf_is_null(r)) {
        EXPECT_TRUE(std::isnan(nf));
      } else {
        EXPECT_EQ(nf, static_cast<double>(r) * 1.5);
      }
      EXPECT_EQ(at<std::int64_t>(b["ns"], j), ns_is_null(r) ? -1 : code(r));
    }
  }
  EXPECT_EQ(seen.size(), kRows) << what;
  if (!lo.shuffle) {
    for (std::size_t i = 0; i < order.size(); ++i) ASSERT_EQ(order[i], i) << what;
  }
}

/// Checks every value of every sample delivered in epochs 0 and 1 of one loader (in epoch 1
/// every row group is decoded in the cache before its reads begin, so the reads take the row
/// groups their share holds), and that each sample comes once in each.
void expect_all_rows(const std::shared_ptr<ParquetDataset>& ds, const ferry::LoaderOptions& lo,
                     const std::string& what) {
  const std::vector<std::string>& fruit = ds->categories("s");
  ASSERT_EQ(fruit, (std::vector<std::string>{"apple", "banana", "fig", "kiwi", "pear"})) << what;
  ASSERT_EQ(ds->categories("ns"), fruit) << what;
  const auto code = [&](std::size_t r) {
    return std::find(fruit.begin(), fruit.end(), expected_cat(r)) - fruit.begin();
  };
  ferry::Loader loader(ds, lo);
  for (std::uint64_t e = 0; e < 2; ++e) {
    expect_all_rows_of_epoch(loader, e, code, what + ", epoch " + std::to_string(e));
  }
}

TEST_F(ParquetFiles, EveryCodecEncodingAndPageVersionDeliversEveryValue) {
  for (const std::string codec : {"none", "snappy", "gzip", "zstd", "lz4raw", "lz4", "brotli"}) {
    for (const std::string enc : {"dict", "plain"}) {
      for (const std::string v : {"v1", "v2"}) {
        const std::string name = "all_" + codec + "_" + enc + "_" + v + ".parquet";
        const auto ds = ParquetDataset::open({file(name)}, every_readable_column());
        ASSERT_EQ(ds->size(), kRows);
        EXPECT_EQ(ds->num_row_groups(), 4U);  // 16 rows a group
        const auto fields = ds->fields();
        ASSERT_EQ(fields.size(), 15U);
        const DType want[] = {DType::u8,  DType::i8,  DType::i16, DType::i32, DType::i64,
                              DType::u8,  DType::u16, DType::u32, DType::u64, DType::f32,
                              DType::f64, DType::i64, DType::u8,  DType::f64, DType::i64};
        for (std::size_t f = 0; f < fields.size(); ++f) {
          EXPECT_EQ(fields[f].name, every_readable_column().columns[f]);
          EXPECT_EQ(fields[f].dtype, want[f]) << fields[f].name;
          EXPECT_EQ(fields[f].shape, fields[f].name == "bin"
                                         ? std::vector<std::int64_t>{ferry::ragged}
                                         : std::vector<std::int64_t>{});
        }
        EXPECT_EQ(ds->max_length(12), 5);
        expect_all_rows(ds, loader_options(7, true, 2), name);
        // A worker's share of 12 or more rows of a shuffled batch spans several row groups.
        expect_all_rows(ds, loader_options(48, true, 1), name + " in shares of 12");
        expect_all_rows(ds, loader_options(16, false, 1), name + " in order");
      }
    }
  }
}

TEST_F(ParquetFiles, DeltaEncodingsByteStreamSplitAndRleBooleansDeliverEveryValue) {
  // write_tables.js checks that each file's chunks carry the encodings named here.
  for (const std::string name : {"all_none_delta_v2.parquet", "all_snappy_delta_v2.parquet",
                                 "all_zstd_encodings_v1.parquet"}) {
    const auto ds = ParquetDataset::open({file(name)}, every_readable_column());
    ASSERT_EQ(ds->size(), kRows);
    expect_all_rows(ds, loader_options(7, true, 2), name);
    expect_all_rows(ds, loader_options(48, true, 1), name + " in shares of 12");
    expect_all_rows(ds, loader_options(16, false, 1), name + " in order");
  }
}

/// An IEEE binary16 value as a float (every half is a float exactly).
float half_value(std::uint16_t h) {
  const int sign = h >> 15;
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  float v = 0;
  if (exponent == 0x1f) {
    v = mantissa != 0 ? std::numeric_limits<float>::quiet_NaN()
                      : std::numeric_limits<float>::infinity();
  } else if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else {
    v = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  }
  return sign != 0 ? -v : v;
}
/// Value j of an f16 tensor.
float half_at(const ferry::Tensor& t, std::size_t j) {
  return half_value(static_cast<const std::uint16_t*>(t.data())[j]);
}

TEST_F(ParquetFiles, Float16ColumnsAndListsOfThemAreF16Fields) {
  // arrow-rs writes Arrow's float16 as FIXED_LEN_BYTE_ARRAY(2) with the FLOAT16 logical type;
  // write_tables.js checks that each file's chunks carry the encoding its name says.
  for (const std::string enc : {"plain", "split", "delta"}) {
    for (const std::string v : {"v1", "v2"}) {
      const std::string name = "float16_" + enc + "_" + v + ".parquet";
      SCOPED_TRACE(name);
      TableOptions o;
      o.columns = {"h", "hv", "hl"};
      o.missing = ferry::Missing::nan;
      const auto ds = ParquetDataset::open({file(name)}, o);
      ASSERT_EQ(ds->size(), kRows);
      const auto fields = ds->fields();
      ASSERT_EQ(fields.size(), 3U);
      for (const auto& f : fields) EXPECT_EQ(f.dtype, DType::f16) << f.name;
      EXPECT_EQ(fields[0].shape, std::vector<std::int64_t>{});
      EXPECT_EQ(fields[1].shape, std::vector<std::int64_t>{3});
      EXPECT_EQ(fields[2].shape, std::vector<std::int64_t>{ferry::ragged});
      ferry::Loader loader(ds, loader_options(7, true, 2));
      std::set<std::uint64_t> seen;
      for (const ferry::Batch& b : loader.epoch(0)) {
        const ferry::Tensor& hl = b["hl"];
        const auto width = static_cast<std::size_t>(hl.shape()[1]);
        for (std::size_t j = 0; j < b.size(); ++j) {
          const std::uint64_t r = b.indices()[j];
          seen.insert(r);
          const auto x = static_cast<float>(r);
          const float h = half_at(b["h"], j);
          if (r % 5 == 3) {
            EXPECT_TRUE(std::isnan(h)) << "row " << r;
          } else {
            EXPECT_EQ(h, x / 4 - 4) << "row " << r;
          }
          EXPECT_EQ(half_at(b["hv"], 3 * j), x) << "row " << r;
          EXPECT_EQ(half_at(b["hv"], 3 * j + 1), -x) << "row " << r;
          EXPECT_EQ(half_at(b["hv"], 3 * j + 2), x / 8) << "row " << r;
          ASSERT_EQ(at<std::int64_t>(b.lengths("hl"), j), static_cast<std::int64_t>(r % 4));
          for (std::size_t k = 0; k < r % 4; ++k) {
            EXPECT_EQ(half_at(hl, j * width + k), x + static_cast<float>(k) / 2)
                << "row " << r << ", value " << k;
          }
        }
      }
      EXPECT_EQ(seen.size(), kRows);
    }
  }
}

TEST_F(ParquetFiles, EachRowGroupIsDecodedOnceWhateverTheThreadsAndTheOrder) {
  TableOptions o;
  o.columns = {"i32", "f64"};
  const auto ds = ParquetDataset::open({file("all_snappy_dict_v1.parquet")}, o);
  EXPECT_EQ(ds->chunks_decoded(), 0U);  // no ragged or categorical column to scan at open
  const auto starts = ds->shard_starts();
  EXPECT_EQ(std::vector<std::size_t>(starts.begin(), starts.end()),
            (std::vector<std::size_t>{0, 16, 32, 48, 50}));
  // In order with one worker, then shuffled over windows of 2 row groups with 3 workers, then
  // shuffled whole: 4 row groups × 2 columns, decoded once (all of them fit the cache).
  ferry::Loader in_order(ds, loader_options(5, false, 1));
  std::size_t n = 0;
  for (const ferry::Batch& b : in_order.epoch(0)) n += b.size();
  EXPECT_EQ(n, kRows);
  EXPECT_EQ(ds->chunks_decoded(), 8U);
  ferry::LoaderOptions lo = loader_options(3, true, 3);
  lo.shuffle_window = 2;
  const auto d1 = ParquetDataset::open({file("all_snappy_dict_v1.parquet")}, o);
  ferry::Loader windows_fresh(d1, lo);
  for (const ferry::Batch& b : windows_fresh.epoch(3)) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      EXPECT_EQ(at<std::int32_t>(b["i32"], j),
                static_cast<std::int32_t>(b.indices()[j]) * 100000 - 2000000000);
    }
  }
  EXPECT_EQ(d1->chunks_decoded(), 8U);
  const auto d2 = ParquetDataset::open({file("all_snappy_dict_v1.parquet")}, o);
  ferry::Loader shuffled(d2, loader_options(4, true, 2));
  for (const ferry::Batch& b : shuffled.epoch(1)) (void)b;
  for (const ferry::Batch& b : shuffled.epoch(2)) (void)b;
  EXPECT_EQ(d2->chunks_decoded(), 8U);
}

TEST_F(ParquetFiles, ASubsetOfColumnsInTheOrderAsked) {
  TableOptions o;
  o.columns = {"f64", "u8", "s"};
  const auto ds = ParquetDataset::open({file("all_zstd_plain_v2.parquet")}, o);
  const auto fields = ds->fields();
  ASSERT_EQ(fields.size(), 3U);
  EXPECT_EQ(fields[0].name, "f64");
  EXPECT_EQ(fields[1].name, "u8");
  EXPECT_EQ(fields[2].name, "s");
  EXPECT_EQ(fields[2].shape, std::vector<std::int64_t>{ferry::ragged});  // text as bytes
  ferry::Loader loader(ds, loader_options(8, true, 2));
  std::size_t n = 0;
  for (const ferry::Batch& b : loader.epoch(1)) {
    const ferry::Tensor& s = b["s"];
    for (std::size_t j = 0; j < b.size(); ++j, ++n) {
      const std::uint64_t r = b.indices()[j];
      EXPECT_EQ(at<double>(b["f64"], j), static_cast<double>(r) * 0.25 + 1e10);
      EXPECT_EQ(at<std::uint8_t>(b["u8"], j), (r * 11) % 256);
      const auto len = static_cast<std::size_t>(at<std::int64_t>(b.lengths("s"), j));
      const auto* p = s.data<std::uint8_t>() + j * static_cast<std::size_t>(s.shape()[1]);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(p), len), expected_cat(r)) << r;
    }
  }
  EXPECT_EQ(n, kRows);
}

TEST_F(ParquetFiles, SeveralFilesAreOneSequenceOfRows) {
  TableOptions o;
  o.columns = {"i64", "s"};
  o.categorical = {"s"};
  const auto ds = ParquetDataset::open(
      {file("part0.parquet"), file("part1.parquet"), file("part2.parquet")}, o);
  ASSERT_EQ(ds->size(), kRows);
  const auto starts = ds->shard_starts();
  EXPECT_EQ(std::vector<std::size_t>(starts.begin(), starts.end()),
            (std::vector<std::size_t>{0, 20, 45, 50}));
  const auto& fruit = ds->categories("s");
  ferry::LoaderOptions lo = loader_options(6, true, 2);
  lo.shuffle_window = 2;
  ferry::Loader loader(ds, lo);
  std::set<std::uint64_t> seen;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::uint64_t r = b.indices()[j];
      seen.insert(r);
      EXPECT_EQ(at<std::int64_t>(b["i64"], j),
                static_cast<std::int64_t>(r) * 123456789012LL - 3000000000000LL);
      EXPECT_EQ(fruit.at(static_cast<std::size_t>(at<std::int64_t>(b["s"], j))), expected_cat(r));
    }
  }
  EXPECT_EQ(seen.size(), kRows);
}

TEST_F(ParquetFiles, ANullIsADataErrorNamingFileRowAndColumn) {
  const fs::path f = file("all_gzip_dict_v2.parquet");
  TableOptions o;
  o.columns = {"i32", "nf"};
  const auto ds = ParquetDataset::open({f}, o);
  ferry::Loader loader(ds, loader_options(1, false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ParquetDataset: " + f.string(), "row 1,", "column \"nf\"", "null", "sample 1"});
  // Missing::nan reads nulls in float and categorical columns only: text as bytes stays an error.
  o.columns = {"ns"};
  o.missing = ferry::Missing::nan;
  ferry::Loader texts(ParquetDataset::open({f}, o), loader_options(1, false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : texts.epoch(0)) (void)b;
      },
      {f.string(), "row 2,", "column \"ns\"", "null"});
}

TEST_F(ParquetFiles, TypesNotReadAndBadOptionsAreConfigErrors) {
  const fs::path f = file("all_none_dict_v1.parquet");
  TableOptions o;
  o.columns = {"i32", "ts"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); },
                            {"column \"ts\"", "INT64 (TIMESTAMP"});
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, {}); }, {"\"ts\"", "TIMESTAMP"});
  o.columns = {"i32", "nope"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); }, {"no column \"nope\""});
  o.columns = {"i32", "i32"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); }, {"\"i32\"", "twice"});
  o.columns = {"i32"};
  o.categorical = {"i32"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); },
                            {"categorical column \"i32\"", "INT32"});
  o.categorical = {};
  o.images = {"i32"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); },
                            {"column \"i32\"", "INT32", "not an image column"});
  o.columns = {"i32", "bin"};
  o.images = {"bin", "bin"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); },
                            {"image column \"bin\"", "twice"});
  o.images = {"bin"};
  o.categorical = {"bin"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); },
                            {"\"bin\"", "both an image and categorical"});
  o.categorical = {};
  o.image.height = 0;
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o); }, {"height"});
  o.image = {};
  o.columns = {"i32"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({}, {}); }, {"no files"});
  o.images = {};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({f}, o)->categories("i32"); },
                            {"categories(\"i32\")"});
}

TEST_F(ParquetFiles, TruncatedAndCorruptFilesAreDataErrorsNamingFileAndPlace) {
  const auto good = bytes_of(file("all_snappy_dict_v1.parquet"));
  ASSERT_GT(good.size(), 100U);
  TableOptions o;
  o.columns = {"i32", "f64"};

  const fs::path half = scratch_ / "half.parquet";
  write_bytes(half, std::vector<std::uint8_t>(
                        good.begin(), good.begin() + static_cast<std::ptrdiff_t>(good.size() / 2)));
  expect_error<DataError>([&] { (void)ParquetDataset::open({half}, o); },
                          {"ParquetDataset: " + half.string(), "footer"});
  const fs::path tiny = scratch_ / "tiny.parquet";
  write_bytes(tiny, {'P', 'A', 'R', '1', 0});
  expect_error<DataError>([&] { (void)ParquetDataset::open({tiny}, o); },
                          {tiny.string(), "footer"});

  std::uint32_t footer = 0;
  std::memcpy(&footer, good.data() + good.size() - 8, 4);
  const std::size_t data_end = good.size() - 8 - footer;

  // The footer's metadata overwritten.
  auto bad_footer = good;
  std::fill(bad_footer.begin() + static_cast<std::ptrdiff_t>(data_end), bad_footer.end() - 8,
            std::uint8_t{0xff});
  const fs::path bf = scratch_ / "bad_footer.parquet";
  write_bytes(bf, bad_footer);
  expect_error<DataError>([&] { (void)ParquetDataset::open({bf}, o); },
                          {bf.string(), "footer", "corrupt metadata"});

  // Every page overwritten: open succeeds (it reads the footer), the read fails naming the place.
  auto bad_pages = good;
  std::fill(bad_pages.begin() + 4, bad_pages.begin() + static_cast<std::ptrdiff_t>(data_end),
            std::uint8_t{0xff});
  const fs::path bp = scratch_ / "bad_pages.parquet";
  write_bytes(bp, bad_pages);
  const auto ds = ParquetDataset::open({bp}, o);
  ferry::Loader loader(ds, loader_options(4, false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ParquetDataset: " + bp.string(), "row group 0", "column \"i32\"", "page 0",
       "corrupt page header"});
  // A column scanned at open (text): the error comes from open.
  o.columns = {"s"};
  expect_error<DataError>([&] { (void)ParquetDataset::open({bp}, o); },
                          {bp.string(), "row group 0", "column \"s\"", "page 0"});
}

TEST_F(ParquetFiles, DamagedBytesNeverCrash) {
  // Random bytes flipped and random cuts: whatever happens is a ferry error or right values.
  std::mt19937 rng(7);
  TableOptions o = every_readable_column();
  for (const std::string name : {"all_snappy_dict_v2.parquet", "all_gzip_plain_v1.parquet",
                                 "all_zstd_dict_v1.parquet", "all_none_plain_v2.parquet",
                                 "all_none_delta_v2.parquet", "all_zstd_encodings_v1.parquet"}) {
    const auto good = bytes_of(file(name));
    for (int trial = 0; trial < 60; ++trial) {
      auto bad = good;
      if (trial % 4 == 0) {
        bad.resize(std::uniform_int_distribution<std::size_t>(0, good.size() - 1)(rng));
      } else {
        const int flips = 1 + trial % 8;
        for (int k = 0; k < flips; ++k) {
          bad[std::uniform_int_distribution<std::size_t>(0, bad.size() - 1)(rng)] ^=
              static_cast<std::uint8_t>(1 + rng() % 255);
        }
      }
      const fs::path p = scratch_ / ("damaged_" + std::to_string(trial) + ".parquet");
      write_bytes(p, bad);
      try {
        const auto ds = ParquetDataset::open({p}, o);
        ferry::Loader loader(ds, loader_options(16, false, 1));
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      } catch (const ferry::Error&) {
        // expected for most
      }
      fs::remove(p);
    }
  }
}

}  // namespace

namespace {

// ---- image columns ---------------------------------------------------------------------------

TEST_F(ParquetFiles, ImageStructsDecodeAsImageFolderDoes) {
  TableOptions o;
  o.columns = {"image", "raw", "label"};
  o.images = {"image", "raw"};
  o.image.height = 12;
  o.image.width = 10;
  o.image.geometry = ferry::Geometry::random_resized_crop;
  o.image.random_flip = true;
  const auto ds = ParquetDataset::open({file("images.parquet")}, o);
  ASSERT_EQ(ds->size(), kImages);
  EXPECT_EQ(ds->num_row_groups(), 6U);
  ASSERT_EQ(ds->fields().size(), 3U);
  EXPECT_EQ(ds->fields()[0], ferry::image_field(o.image, "image"));
  EXPECT_EQ(ds->fields()[1], ferry::image_field(o.image, "raw"));
  // The same bytes and samples as ImageFolder's, the same random crops and flips.
  const auto folder = ferry::ImageFolder::open(dir_ / "folder", o.image);
  ASSERT_EQ(folder->size(), kImages);
  ferry::Loader a(ds, loader_options(16, false, 2));
  ferry::Loader f(folder, loader_options(16, false, 2));
  ferry::testing::table_images::expect_images_as_folder(
      a, f, kImages, [](std::size_t r) { return static_cast<std::int64_t>(r); });
}

TEST_F(ParquetFiles, ImagesInAShuffledEpochAreDecodeImagesOfTheirRows) {
  TableOptions o;
  o.columns = {"label", "image"};
  o.images = {"image"};
  o.image.height = 9;
  o.image.width = 11;
  const auto ds = ParquetDataset::open({file("images.parquet")}, o);
  std::vector<fs::path> names;
  for (const auto& e : fs::directory_iterator(dir_ / "images")) names.push_back(e.path());
  std::sort(names.begin(), names.end());
  ASSERT_EQ(names.size(), kImages);
  const std::size_t per = 9 * 11 * 3;
  ferry::Loader loader(ds, loader_options(5, true, 3));
  std::set<std::int64_t> seen;
  std::vector<std::int64_t> order;
  for (const ferry::Batch& b : loader.epoch(1)) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::int64_t label = at<std::int64_t>(b["label"], j);
      ASSERT_EQ(static_cast<std::uint64_t>(label), b.indices()[j]);
      seen.insert(label);
      order.push_back(label);
      const Bytes file_bytes = bytes_of(names[static_cast<std::size_t>(label)]);
      Bytes want(per);
      ferry::decode_image(std::as_bytes(std::span(file_bytes)), o.image, 0, want, "want");
      EXPECT_EQ(std::memcmp(b["image"].data<std::uint8_t>() + j * per, want.data(), per), 0)
          << "row " << label;
    }
  }
  EXPECT_EQ(seen.size(), kImages);
  std::vector<std::int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(order, sorted);  // shuffled
}

TEST_F(ParquetFiles, ANullImageIsADataErrorNamingFileRowAndColumn) {
  const fs::path f = file("images_null.parquet");
  TableOptions o;
  o.images = {"image"};
  o.image.height = 8;
  o.image.width = 8;
  const auto ds = ParquetDataset::open({f}, o);
  ASSERT_EQ(ds->size(), 3U);
  ferry::Loader loader(ds, loader_options(1, false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ParquetDataset: " + f.string(), "row 1,", "column \"image\"", "null"});
  ferry::LoaderOptions lo = loader_options(1, false, 1);
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader skipping(ds, lo);
  std::vector<std::uint64_t> got;
  for (const ferry::Batch& b : skipping.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) got.push_back(b.indices()[j]);
  }
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 2}));
  EXPECT_EQ(skipping.stats().skipped, 1U);
  // Columns that are not images.
  TableOptions raw;
  raw.columns = {"label", "raw"};
  raw.images = {"label"};
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({file("images.parquet")}, raw); },
                            {"column \"label\"", "INT64", "not an image column"});
  // A struct not named in images is not read.
  expect_error<ConfigError>([&] { (void)ParquetDataset::open({file("images.parquet")}, {}); },
                            {"column \"image\"", "group", "does not read"});
}

TEST(ParquetForgedFile, APageClaimingMoreThanItHoldsIsADataErrorNamingFileAndPlace) {
  // fuzz/corpus/parquet/forged_page (after its first byte, the fuzz target's options): 124
  // bytes whose one row group claims 2^31 - 1 rows, and whose page claims as many values in
  // 2^28 bytes with 16 there. Before the bound, the read allocated 8 GiB of levels (here in a
  // child under an address space of 2 GiB: std::bad_alloc).
  const auto seed = bytes_of(fs::path(FERRY_SOURCE_DIR) / "fuzz/corpus/parquet/forged_page");
  ASSERT_EQ(seed.size(), 125U);
  const fs::path path =
      fs::temp_directory_path() / ("ferry_forged_" + std::to_string(::getpid()) + ".parquet");
  write_bytes(path, std::vector<std::uint8_t>(seed.begin() + 1, seed.end()));
  const std::string said = ferry::testing::in_child(
      [&]() -> std::string {
        try {
          const auto ds = ParquetDataset::open({path}, {});
          ferry::Loader loader(ds, ferry::testing::table_loader_options(1, false, 1, 0));
          for (const ferry::Batch& b : loader.epoch(0)) (void)b;
          return "no error";
        } catch (const DataError& e) {
          return e.what();
        }
      },
      std::uint64_t{2} << 30, 60);
  fs::remove(path);
  for (const std::string& part :
       {"ParquetDataset: " + path.string(), std::string("row group 0"), std::string("column \"a\""),
        std::string("page 0"), std::string("claims 268435456 decompressed")}) {
    EXPECT_NE(said.find(part), std::string::npos) << part << " in: " << said;
  }
}

TEST(ParquetForgedFile, ListsNestedDeepInTheFooterAreADataErrorNotACrash) {
  // fuzz/corpus/parquet/plain_v1 (after its first byte, the fuzz target's options) with a field
  // its reader does not know (id 20) added to the footer: a list of a list of ... 50,000 deep,
  // 50 KB. Skipping it recursed once a level and overflowed the stack (SIGSEGV).
  const auto seed = bytes_of(fs::path(FERRY_SOURCE_DIR) / "fuzz/corpus/parquet/plain_v1");
  std::vector<std::uint8_t> file(seed.begin() + 1, seed.end());
  std::uint32_t footer = 0;
  std::memcpy(&footer, file.data() + file.size() - 8, 4);
  const std::size_t stop = file.size() - 9;  // FileMetaData's last byte: its stop
  ASSERT_EQ(file[stop], 0);
  std::vector<std::uint8_t> nest = {0x09, 0x28};  // a list field, id 20 (zigzag)
  nest.insert(nest.end(), 50000, 0x19);           // a list of one list, ...
  nest.push_back(0x09);                           // ... of none
  file.insert(file.begin() + static_cast<std::ptrdiff_t>(stop), nest.begin(), nest.end());
  footer += static_cast<std::uint32_t>(nest.size());
  std::memcpy(file.data() + file.size() - 8, &footer, 4);
  const fs::path path =
      fs::temp_directory_path() / ("ferry_nested_" + std::to_string(::getpid()) + ".parquet");
  write_bytes(path, file);
  expect_error<DataError>([&] { static_cast<void>(ParquetDataset::open({path}, {})); },
                          {path.string(), "footer", "nested too deep"});
  fs::remove(path);
}

/// Thrift's compact protocol, as much as a footer needs (tests only).
struct CompactWriter {
  std::vector<std::uint8_t> out;
  void varint(std::uint64_t v) {
    for (; v >= 0x80; v >>= 7) out.push_back(static_cast<std::uint8_t>((v & 0x7f) | 0x80));
    out.push_back(static_cast<std::uint8_t>(v));
  }
  void field(int delta, int type) { out.push_back(static_cast<std::uint8_t>((delta << 4) | type)); }
  void i32(int delta, std::int32_t v) {
    field(delta, 5);
    varint((static_cast<std::uint64_t>(static_cast<std::uint32_t>(v)) << 1) ^
           static_cast<std::uint64_t>(static_cast<std::uint32_t>(v >> 31)));
  }
  void i64(int delta, std::int64_t v) {
    field(delta, 6);
    varint((static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63));
  }
  void text(int delta, const std::string& v) {
    field(delta, 8);
    varint(v.size());
    out.insert(out.end(), v.begin(), v.end());
  }
  void list(int delta, int type, std::size_t n) {  // a list field of n elements (n < 15)
    field(delta, 9);
    out.push_back(static_cast<std::uint8_t>((n << 4) | static_cast<std::size_t>(type)));
  }
  void stop() { out.push_back(0); }
};

/// A data page's header: `bytes` of `values` values in `encoding` (levels in RLE).
void data_page_header(CompactWriter& w, std::int32_t bytes, std::int32_t values,
                      std::int32_t encoding) {
  w.i32(1, 0);  // DATA_PAGE
  w.i32(1, bytes);
  w.i32(1, bytes);
  w.field(2, 12);  // field 5: DataPageHeader
  w.i32(1, values);
  w.i32(1, encoding);
  w.i32(1, 3);
  w.i32(1, 3);
  w.stop();
  w.stop();
}

/// A footer's start: its version and a schema of one required column `name` of physical `type`
/// (with `converted`, its converted_type, where >= 0).
void one_column_schema(CompactWriter& f, std::int32_t type, const std::string& name,
                       std::int32_t converted = -1) {
  f.i32(1, 1);       // version
  f.list(1, 12, 2);  // schema
  f.text(4, "schema");
  f.i32(1, 1);  // num_children
  f.stop();
  f.i32(1, type);
  f.i32(2, 0);  // REQUIRED
  f.text(1, name);
  if (converted >= 0) f.i32(2, converted);  // converted_type
  f.stop();
}

/// "PAR1", the column chunk's bytes (from byte 4), the footer, its length and "PAR1".
std::vector<std::uint8_t> parquet_file(const std::vector<std::uint8_t>& chunk,
                                       const std::vector<std::uint8_t>& footer) {
  std::vector<std::uint8_t> file = {'P', 'A', 'R', '1'};
  file.insert(file.end(), chunk.begin(), chunk.end());
  file.insert(file.end(), footer.begin(), footer.end());
  const auto n = static_cast<std::uint32_t>(footer.size());
  for (int i = 0; i < 4; ++i) file.push_back(static_cast<std::uint8_t>((n >> (8 * i)) & 0xff));
  file.insert(file.end(), {'P', 'A', 'R', '1'});
  return file;
}

/// A Parquet file of one required INT32 column "a": one page of `values` at byte 4, and a footer
/// of `groups` row groups, each listing that one chunk.
std::vector<std::uint8_t> parquet_with_shared_chunk(const std::vector<std::int32_t>& values,
                                                    std::size_t groups,
                                                    std::int32_t converted = -1) {
  CompactWriter page;
  data_page_header(page, static_cast<std::int32_t>(values.size() * 4),
                   static_cast<std::int32_t>(values.size()), 0);  // PLAIN
  const auto* v = reinterpret_cast<const std::uint8_t*>(values.data());
  page.out.insert(page.out.end(), v, v + values.size() * 4);
  const auto chunk = static_cast<std::int64_t>(page.out.size());
  const auto rows = static_cast<std::int64_t>(values.size());
  CompactWriter f;
  one_column_schema(f, 1, "a", converted);  // INT32
  f.i64(1, rows * static_cast<std::int64_t>(groups));
  f.list(1, 12, groups);  // row_groups
  for (std::size_t g = 0; g < groups; ++g) {
    f.list(1, 12, 1);  // columns
    f.i64(2, 4);       // file_offset
    f.field(1, 12);    // meta_data
    f.i32(1, 1);       // INT32
    f.list(1, 5, 1);   // encodings: PLAIN
    f.varint(0);
    f.list(1, 8, 1);  // path_in_schema
    f.varint(1);
    f.out.push_back('a');
    f.i32(1, 0);  // UNCOMPRESSED
    f.i64(1, rows);
    f.i64(1, chunk);
    f.i64(1, chunk);
    f.i64(2, 4);  // data_page_offset
    f.stop();
    f.stop();
    f.i64(1, chunk);  // total_byte_size
    f.i64(1, rows);
    f.stop();
  }
  f.stop();
  return parquet_file(page.out, f.out);
}

TEST(ParquetForgedFile, RowGroupsSharingAChunkAreADataErrorAtOpen) {
  // A chunk listed by several row groups: each would decode the same bytes again, so a file of
  // a few megabytes claimed hundreds of millions of rows, and open() spent minutes and
  // gigabytes scanning them. Chunks must not overlap; one row group alone reads.
  const std::vector<std::int32_t> values = {7, 8, 9};
  const fs::path path =
      fs::temp_directory_path() / ("ferry_shared_" + std::to_string(::getpid()) + ".parquet");
  write_bytes(path, parquet_with_shared_chunk(values, 1));
  const auto one = ParquetDataset::open({path}, {});
  ASSERT_EQ(one->size(), 3U);
  ferry::Loader loader(one, ferry::testing::table_loader_options(3, false, 1, 0));
  std::vector<std::int32_t> got;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) got.push_back(b["a"].data<std::int32_t>()[j]);
  }
  EXPECT_EQ(got, values);
  write_bytes(path, parquet_with_shared_chunk(values, 3));
  expect_error<DataError>([&] { static_cast<void>(ParquetDataset::open({path}, {})); },
                          {"ParquetDataset: " + path.string(), "row group 1, column \"a\"",
                           "overlap those of row group 0, column \"a\" (bytes 4 to"});
  fs::remove(path);
}

/// A Parquet file of one required BYTE_ARRAY column "s" of `rows` rows in one row group: a
/// dictionary of one value of `value_bytes` zero bytes, and one data page whose indices (one
/// RLE run) all name it. A few bytes of indices make rows * value_bytes bytes of values.
std::vector<std::uint8_t> parquet_dictionary_bomb(std::uint32_t value_bytes, std::uint32_t rows) {
  std::vector<std::uint8_t> dict_values(4 + std::size_t{value_bytes}, 0);
  for (int i = 0; i < 4; ++i)
    dict_values[static_cast<std::size_t>(i)] = (value_bytes >> (8 * i)) & 0xff;
  CompactWriter dict;
  dict.i32(1, 2);  // DICTIONARY_PAGE
  dict.i32(1, static_cast<std::int32_t>(dict_values.size()));
  dict.i32(1, static_cast<std::int32_t>(dict_values.size()));
  dict.field(4, 12);  // field 7: DictionaryPageHeader
  dict.i32(1, 1);     // one value
  dict.i32(1, 0);     // PLAIN
  dict.stop();
  dict.stop();
  CompactWriter indices;  // bit width 1, then one RLE run of `rows` zeros
  indices.out.push_back(1);
  indices.varint(std::uint64_t{rows} << 1);
  indices.out.push_back(0);
  CompactWriter page;
  data_page_header(page, static_cast<std::int32_t>(indices.out.size()),
                   static_cast<std::int32_t>(rows), 8);  // RLE_DICTIONARY
  std::vector<std::uint8_t> chunk = dict.out;
  chunk.insert(chunk.end(), dict_values.begin(), dict_values.end());
  const auto data_at = static_cast<std::int64_t>(4 + chunk.size());
  chunk.insert(chunk.end(), page.out.begin(), page.out.end());
  chunk.insert(chunk.end(), indices.out.begin(), indices.out.end());
  const auto size = static_cast<std::int64_t>(chunk.size());
  CompactWriter f;
  one_column_schema(f, 6, "s");  // BYTE_ARRAY
  f.i64(1, rows);
  f.list(1, 12, 1);  // row_groups
  f.list(1, 12, 1);  // columns
  f.i64(2, 4);       // file_offset
  f.field(1, 12);    // meta_data
  f.i32(1, 6);       // BYTE_ARRAY
  f.list(1, 5, 2);   // encodings: PLAIN, RLE_DICTIONARY
  f.varint(0);
  f.varint(16);
  f.list(1, 8, 1);  // path_in_schema
  f.varint(1);
  f.out.push_back('s');
  f.i32(1, 0);  // UNCOMPRESSED
  f.i64(1, rows);
  f.i64(1, size);
  f.i64(1, size);
  f.i64(2, data_at);  // data_page_offset
  f.i64(2, 4);        // dictionary_page_offset
  f.stop();
  f.stop();
  f.i64(1, size);  // total_byte_size
  f.i64(1, rows);
  f.stop();
  f.stop();
  return parquet_file(chunk, f.out);
}

TEST(ParquetForgedFile, AnIntegerOutsideItsDeclaredWidthIsADataError) {
  // INT32 values under UINT_8 (11) and INT_8 (15): 300 read as 44, 200 as -56, before.
  const fs::path path =
      fs::temp_directory_path() / ("ferry_narrow_" + std::to_string(::getpid()) + ".parquet");
  for (const auto& [converted, values, why] :
       {std::tuple<std::int32_t, std::vector<std::int32_t>, std::string>{
            11, {7, 300, 9}, "value 1 is 300, outside its declared type (0 to 255)"},
        {11, {7, -1, 9}, "value 1 is -1, outside its declared type (0 to 255)"},
        {15, {7, 8, 200}, "value 2 is 200, outside its declared type (-128 to 127)"}}) {
    write_bytes(path, parquet_with_shared_chunk(values, 1, converted));
    const auto ds = ParquetDataset::open({path}, {});
    expect_error<DataError>([&] { static_cast<void>(ferry::read_sample(*ds, 0)); },
                            {path.string(), "row group 0, column \"a\"", why});
  }
  // In range, they read.
  write_bytes(path, parquet_with_shared_chunk({0, 255, 9}, 1, 11));
  const auto ds = ParquetDataset::open({path}, {});
  std::vector<int> got;
  for (std::size_t i = 0; i < 3; ++i) {
    got.push_back(*static_cast<const std::uint8_t*>(ferry::read_sample(*ds, i)[0].second.data()));
  }
  EXPECT_EQ(got, (std::vector<int>{0, 255, 9}));
  fs::remove(path);
}

TEST(ParquetForgedSizes, ADictionaryValueRepeatedIntoGigabytesIsNamedNotABadAlloc) {
  // 1 MiB of dictionary and a few bytes of indices make 4 GiB of values. A read under an address
  // space of 1 GiB ended in a bare std::bad_alloc (MemoryError in Python), and a loader with the
  // default budget raised that budget to hold the row group, however large: now the read is a
  // DataError naming the file, the row group and the column, and the loader's default budget
  // (an eighth of the machine's memory) holds no more than that for the table.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' allocators reserve more than the address space limit allows";
#endif
  constexpr std::uint32_t kValue = 1U << 20;
  constexpr std::uint32_t kBombRows = 4096;
  const fs::path path =
      fs::temp_directory_path() / ("ferry_dict_bomb_" + std::to_string(::getpid()) + ".parquet");
  write_bytes(path, parquet_dictionary_bomb(kValue, kBombRows));
  const auto ds = ParquetDataset::open({path}, {});
  ASSERT_EQ(ds->size(), kBombRows);
  EXPECT_GE(ds->reader_memory(0), std::uint64_t{kValue} * kBombRows);
  const std::string read = ferry::testing::in_child(
      [&]() -> std::string {
        try {
          static_cast<void>(ferry::read_sample(*ds, 5));
          return "no error";
        } catch (const DataError& e) {
          return e.what();
        }
      },
      std::uint64_t{1} << 30, 60);
  for (const std::string& part :
       {"ParquetDataset: " + path.string(),
        std::string("row group 0 (rows 0 to 4095), column \"s\""), std::string("out of memory")}) {
    EXPECT_NE(read.find(part), std::string::npos) << read;
  }
  ferry::LoaderOptions o = ferry::testing::table_loader_options(4, false, 1, 0);
  o.autotune = true;  // the default budget applies under autotune
  if (ferry::default_memory_budget() < std::uint64_t{kValue} * kBombRows) {
    expect_error<ConfigError>([&] { ferry::Loader loader(ds, o); },
                              {"the default memory_budget", "held by the dataset's reads"});
  }
  o.memory_budget = std::uint64_t{1} << 30;
  expect_error<ConfigError>([&] { ferry::Loader loader(ds, o); },
                            {"memory_budget of 1073741824 bytes", "held by the dataset's reads"});
  fs::remove(path);
}

TEST_F(ParquetFiles, FilesWhoseSchemasDifferAreAConfigErrorNamingBoth) {
  // Every column read: a column of the second file that the first lacks is not dropped.
  const fs::path a = file("schema_a.parquet");
  const fs::path ab = file("schema_ab.parquet");
  expect_error<ConfigError>(
      [&] {
        static_cast<void>(ParquetDataset::open({a, ab}));
      },
      {ab.string(), "column \"y\"", a.string()});
  expect_error<ConfigError>(
      [&] {
        static_cast<void>(ParquetDataset::open({ab, a}));
      },
      {a.string(), "no column \"y\"", ab.string()});
  // The columns named: the extra one is not among them.
  TableOptions o;
  o.columns = {"x"};
  EXPECT_EQ(ParquetDataset::open({a, ab}, o)->fields().size(), 1U);
}

TEST_F(ParquetFiles, AColumnTheFileLacksIsAConfigErrorListingTheColumnsItHas) {
  const fs::path ab = file("schema_ab.parquet");
  TableOptions o;
  o.columns = {"x", "z"};
  expect_error<ConfigError>([&] { static_cast<void>(ParquetDataset::open({ab}, o)); },
                            {ab.string(), "no column \"z\"", "(its columns: \"x\", \"y\")"});
  o.columns = {};
  o.categorical = {"w"};
  expect_error<ConfigError>([&] { static_cast<void>(ParquetDataset::open({ab}, o)); },
                            {"\"w\"", "(its columns: \"x\", \"y\")"});
  // A later file without a column of the first's.
  const fs::path a = file("schema_a.parquet");
  o.categorical = {};
  o.columns = {"x", "y"};
  expect_error<ConfigError>(
      [&] {
        static_cast<void>(ParquetDataset::open({ab, a}, o));
      },
      {a.string(), "no column \"y\"", "(its columns: \"x\")"});
}

/// Bytes malloc holds for the program (every arena, and its own maps).
std::size_t bytes_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

TEST_F(ParquetFiles, DecodedRowGroupsGoWithTheDataset) {
  // oneTBB's worker threads outlive loaders: what a thread keeps of the row group it read last
  // must go with the dataset, not stay until the thread reads another table.
  const auto read_all = [&](const fs::path& f, const std::vector<std::string>& columns) {
    TableOptions o;
    o.columns = columns;
    ferry::Loader loader(ParquetDataset::open({f}, o), loader_options(50, false, 2));
    for (const ferry::Batch& b : loader.epoch(0)) (void)b;
  };
  read_all(file("part0.parquet"), {"i64"});  // what stays anyway (threads, contexts) is made
  read_all(file("part0.parquet"), {"i64"});
  const std::size_t before = bytes_in_use();
  // wide.parquet: row groups of 500 rows of 48 float64 columns and more, 200 KB and more each.
  std::vector<std::string> columns;
  for (int k = 0; k < 48; ++k) columns.push_back((k < 10 ? "c0" : "c") + std::to_string(k));
  read_all(file("wide.parquet"), columns);
  const std::size_t after = bytes_in_use();
  EXPECT_LT(after, before + (100 << 10)) << "before " << before << ", after " << after;
}

TEST_F(ParquetFiles, AnImageStructNotNamedInImagesIsAConfigErrorThatSaysSo) {
  TableOptions o;
  o.columns = {"image", "label"};
  expect_error<ConfigError>(
      [&] { static_cast<void>(ParquetDataset::open({file("images.parquet")}, o)); },
      {"column \"image\"", "does not read", "TableOptions::images", "images="});
  // Named, it decodes.
  o.images = {"image"};
  EXPECT_EQ(ParquetDataset::open({file("images.parquet")}, o)->fields().size(), 2U);
}

TEST_F(ParquetFiles, AColumnWhoseHuggingFaceFeatureIsImageDecodesWithoutBeingNamed) {
  // images_hf.parquet: images.parquet with Hugging Face's features in its metadata, as `datasets`
  // writes them: `image` an Image, `raw` a Value("binary").
  TableOptions o;
  o.columns = {"image", "label"};
  const auto hf = ParquetDataset::open({file("images_hf.parquet")}, o);
  ASSERT_EQ(hf->fields()[0], ferry::image_field(o.image, "image"));
  TableOptions named = o;
  named.images = {"image"};
  const auto plain = ParquetDataset::open({file("images.parquet")}, named);
  ferry::Loader a(hf, loader_options(5, false, 1));
  ferry::Loader b(plain, loader_options(5, false, 1));
  const auto from_hf = ferry::testing::table_images::field_bytes_by_batch(a, "image");
  const auto from_named = ferry::testing::table_images::field_bytes_by_batch(b, "image");
  EXPECT_EQ(from_hf.size(), from_named.size());
  EXPECT_EQ(from_hf, from_named);
  // A Value("binary") stays bytes; the Image column left out of the columns read stays out.
  o.columns = {"raw"};
  const auto raw = ParquetDataset::open({file("images_hf.parquet")}, o);
  ASSERT_EQ(raw->fields().size(), 1U);
  EXPECT_EQ(raw->fields()[0].shape, std::vector<std::int64_t>{ferry::ragged});
}

TEST_F(ParquetFiles, DecodedRowGroupsCountInTheMemoryBudgetAndAreKeptWithinIt) {
  // wide.parquet: 2000 rows in row groups of 500, 48 float64 columns, an int64 and a utf8 one:
  // a row group decodes to about 500 * (50 * 9 + 8 + 1) + its text, some 240 KB.
  const auto ds = ParquetDataset::open({file("wide.parquet")}, {});
  // With no room for a cache, the reads still hold two row groups past it and a third being
  // decoded: a row group's estimate is a third of that.
  const auto probe = ParquetDataset::open({file("wide.parquet")}, {});
  probe->fit_reader_memory(0);
  const std::uint64_t group = probe->reader_memory(0) / 3;
  EXPECT_GT(group, 500U * 50 * 9);
  EXPECT_LT(group, 500U * 50 * 9 * 2);
  // The decoded cache's 512 MiB would hold the whole table: its 4 row groups, no more.
  const std::uint64_t held = ds->reader_memory(0);
  EXPECT_GE(held, 3 * group);
  EXPECT_LE(held, 4 * group);
  {  // Without a budget: memory_bytes counts the cache whole.
    ferry::Loader loader(ds, ferry::testing::table_loader_options(50, true, 2, 1));
    EXPECT_GE(loader.stats().memory_bytes, held);
  }
  // A budget of 8 MiB: the cache keeps what the loader's slots and scratch leave of it, and
  // memory_bytes counts it within the budget; every row is read.
  ferry::LoaderOptions lo = ferry::testing::table_loader_options(50, true, 2, 1);
  lo.memory_budget = std::uint64_t{8} << 20;
  {
    ferry::Loader loader(ds, lo);
    const std::uint64_t fitted = ds->reader_memory(0);
    EXPECT_LT(fitted, lo.memory_budget);
    EXPECT_GE(fitted, 3 * group);
    const ferry::LoaderStats stats = loader.stats();
    EXPECT_GE(stats.memory_bytes, fitted);
    EXPECT_LE(stats.memory_bytes, lo.memory_budget);
    std::size_t rows = 0;
    for (const ferry::Batch& b : loader.epoch(0)) rows += b.size();
    EXPECT_EQ(rows, 2000U);
  }
  // A budget that cannot hold three row groups (and a decode's scratch) beside the loader's
  // own: a ConfigError that says the bytes the dataset's reads need.
  const auto fresh = ParquetDataset::open({file("wide.parquet")}, {});
  lo.memory_budget = 2 * group;
  const std::string said = expect_error<ferry::ConfigError>(
      [&] { ferry::Loader loader(fresh, lo); },
      {"memory_budget of " + std::to_string(2 * group), "held by the dataset's reads"});
  EXPECT_NE(said.find(std::to_string(probe->reader_memory(0)) + " held by the dataset's reads"),
            std::string::npos)
      << said;
}

}  // namespace
