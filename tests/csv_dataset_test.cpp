#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "datasets/csv/csv_parse.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::Column;
using ferry::ConfigError;
using ferry::CsvDataset;
using ferry::CsvOptions;
using ferry::DataError;
using ferry::Missing;

// A gzip file of `text` in stored (uncompressed) deflate blocks, `members` members.
std::uint32_t crc32_of(const std::string& s) {
  std::uint32_t crc = 0xffffffffU;
  for (const char ch : s) {
    crc ^= static_cast<unsigned char>(ch);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320U & (0U - (crc & 1U)));
  }
  return ~crc;
}

void put32(std::string& out, std::uint32_t v) {
  for (int shift = 0; shift < 32; shift += 8) out += static_cast<char>((v >> shift) & 0xffU);
}

std::string gzip_member(const std::string& text) {
  std::string out("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10);
  std::size_t at = 0;
  do {
    const std::size_t n = std::min<std::size_t>(text.size() - at, 65535);
    const bool last = at + n == text.size();
    out += static_cast<char>(last ? 1 : 0);
    out += static_cast<char>(n & 0xffU);
    out += static_cast<char>(n >> 8);
    out += static_cast<char>(~n & 0xffU);
    out += static_cast<char>((~n >> 8) & 0xffU);
    out.append(text, at, n);
    at += n;
  } while (at < text.size());
  put32(out, crc32_of(text));
  put32(out, static_cast<std::uint32_t>(text.size()));
  return out;
}

std::string gzip(const std::string& text, bool two_members = false) {
  if (!two_members) return gzip_member(text);
  const std::size_t half = text.size() / 2;
  return gzip_member(text.substr(0, half)) + gzip_member(text.substr(half));
}

std::string shortest(float v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return {buf, r.ptr};
}

class CsvFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_csv_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  std::shared_ptr<CsvDataset> open(const std::string& text, const CsvOptions& o = {}) {
    return CsvDataset::open(write("data.csv", text), o);
  }

  // The DataError's message ("no error" when open() succeeds).
  std::string message(const std::string& text, const CsvOptions& o = {},
                      const std::string& name = "data.csv") {
    const fs::path p = write(name, text);
    try {
      (void)CsvDataset::open(p, o);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  }

  std::string config_message(const std::string& text, const CsvOptions& o) {
    const fs::path p = write("data.csv", text);
    try {
      (void)CsvDataset::open(p, o);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no ConfigError";
  }

  std::string prefix(const std::string& name = "data.csv") const {
    return "CsvDataset: " + (dir_ / name).string() + ": ";
  }

  fs::path dir_;
};

#define EXPECT_HAS(haystack, needle)                                    \
  do {                                                                  \
    const std::string h_ = (haystack);                                  \
    EXPECT_NE(h_.find(needle), std::string::npos) << "message: " << h_; \
  } while (0)

TEST_F(CsvFiles, HeaderLabelByName) {
  const auto ds = open("a,b,label\n1,2,0\n3.5,-4,1\n-0.25,1e3,1\n");
  ASSERT_EQ(ds->size(), 3U);
  EXPECT_EQ(ds->num_features(), 2U);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ds->features(), (std::vector<float>{1, 2, 3.5F, -4, -0.25F, 1000}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{0, 1, 1}));
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"0", "1"}));
  EXPECT_TRUE(ds->targets().empty());
  const std::vector<ferry::FieldSpec> fields = {{"features", ferry::DType::f32, {2}, {}},
                                                {"label", ferry::DType::i64, {}, {}}};
  EXPECT_EQ(ds->fields(), fields);
}

TEST_F(CsvFiles, LabelByIndexLastOrNone) {
  const std::string text = "7,1.5,2.5\n8,3.5,4.5\n";
  CsvOptions o;
  o.header = false;
  o.label = Column::index(0);
  auto ds = open(text, o);
  EXPECT_EQ(ds->features(), (std::vector<float>{1.5F, 2.5F, 3.5F, 4.5F}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{7, 8}));
  EXPECT_EQ(ds->classes().size(), 9U);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"column 2", "column 3"}));

  o.label = Column::last();
  o.classes = false;
  ds = open(text, o);
  EXPECT_EQ(ds->features(), (std::vector<float>{7, 1.5F, 8, 3.5F}));
  EXPECT_EQ(ds->targets(), (std::vector<float>{2.5F, 4.5F}));
  EXPECT_TRUE(ds->labels().empty());
  EXPECT_TRUE(ds->classes().empty());
  EXPECT_EQ(ds->fields()[1], (ferry::FieldSpec{"label", ferry::DType::f32, {}, {}}));

  o.label = Column::none();
  ds = open(text, o);
  EXPECT_EQ(ds->num_features(), 3U);
  EXPECT_EQ(ds->features(), (std::vector<float>{7, 1.5F, 2.5F, 8, 3.5F, 4.5F}));
  ASSERT_EQ(ds->fields().size(), 1U);
  EXPECT_EQ(ds->fields()[0], (ferry::FieldSpec{"features", ferry::DType::f32, {3}, {}}));
}

TEST_F(CsvFiles, ExplicitFeatureColumnsInTheirOrder) {
  CsvOptions o;
  o.label = Column::name("y");
  o.features = {Column::name("c"), Column::index(0)};
  const auto ds = open("a,note,c,y\n1,free text,3,0\n4,\"more, text\",6,1\n", o);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(ds->features(), (std::vector<float>{3, 1, 6, 4}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{0, 1}));
}

TEST_F(CsvFiles, TextLabelsBecomeSortedClasses) {
  const auto ds = open("x,label\n1,dog\n2,cat\n3,dog\n4,bird\n5, cat \n");
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{2, 1, 2, 0, 1}));
}

TEST_F(CsvFiles, IntegerLabelsAreTheirIds) {
  auto ds = open("x,label\n1,2\n2,0\n3,5\n4, 2\n5,\"1\"\n");
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{2, 0, 5, 2, 1}));
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"0", "1", "2", "3", "4", "5"}));
  // One text among them: all are texts.
  ds = open("x,label\n1,2\n2,10\n3,cat\n4,2\n");
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"10", "2", "cat"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{1, 0, 2, 1}));
}

// An integer label is '-' and digits as std::to_string writes them; any other way of writing a
// number ("+1", "01", "-0", "1.0", "1e0", "0x1") is a text, and one text makes every label a
// text (sorted), so none is read as the id it might look like.
TEST_F(CsvFiles, LabelsNotWrittenAsIntegersAreTexts) {
  for (const std::string odd : {"+1", "01", "-0", "1.0", "1e0", "0x1", "1_0", "--1", "1-"}) {
    const auto ds = open("x,label\n1,2\n2,0\n3," + odd + "\n");
    std::vector<std::string> texts{"2", "0", odd};
    std::sort(texts.begin(), texts.end());
    EXPECT_EQ(ds->classes(), texts) << odd;
    std::vector<std::int64_t> ids;
    for (const std::string t : {"2", "0", odd.c_str()}) {
      ids.push_back(std::find(texts.begin(), texts.end(), t) - texts.begin());
    }
    EXPECT_EQ(ds->labels(), ids) << odd;
  }
  // Blanks around a field are not part of it, for integers as for any field.
  EXPECT_EQ(open("x,label\n1, 2\n2,0 \n3,\t1\t\n")->labels(), (std::vector<std::int64_t>{2, 0, 1}));
  // As regression targets every one is a number.
  CsvOptions regression;
  regression.classes = false;
  EXPECT_EQ(open("x,label\n1,+1\n2,1e0\n3,-0\n", regression)->targets(),
            (std::vector<float>{1.0F, 1.0F, -0.0F}));
}

TEST_F(CsvFiles, IntegerLabelsBeyondTheClassIdsAreErrorsHoweverLarge) {
  const std::string at = prefix() + "line 4, column 2 (\"label\"): the label ";
  for (const std::string big : {"99999999999999999999", "18446744073709551616",
                                "9223372036854775808", "9223372036854775807", "1048576"}) {
    EXPECT_HAS(message("x,label\n1,2\n2,10\n3," + big + "\n"),
               at + big + " is too large a class id (at most 1048575)");
    EXPECT_HAS(message("x,label\n1,2\n2,10\n3,\"" + big + "\"\n"),
               at + big + " is too large a class id");
  }
  for (const std::string small :
       {"-99999999999999999999", "-9223372036854775809", "-9223372036854775808", "-1"}) {
    EXPECT_HAS(message("x,label\n1,2\n2,10\n3," + small + "\n"), at + small + " is negative");
  }
  EXPECT_HAS(message("x,label\n1,2\n2,10\n3,1" + std::string(100, '0') + "\n"),
             at + "1" + std::string(36, '0') + "... is too large a class id");
  // The first such label is the one named, whichever comes after it.
  EXPECT_HAS(message("x,label\n1,2\n2,10\n3,99999999999999999999\n4,-5\n"),
             at + "99999999999999999999 is too large");
  // With a text label among them all are texts, as they would be for an id in range.
  const auto ds = open("x,label\n1,99999999999999999999\n2,cat\n3,1e400\n");
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"1e400", "99999999999999999999", "cat"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{1, 2, 0}));
  // As regression targets they are numbers.
  CsvOptions regression;
  regression.classes = false;
  EXPECT_EQ(open("x,label\n1,99999999999999999999\n", regression)->targets(),
            (std::vector<float>{1e20F}));
}

TEST_F(CsvFiles, RegressionTargets) {
  CsvOptions o;
  o.classes = false;
  o.label = Column::name("price");
  const auto ds = open("price,rooms\n123.5,3\n-1e-3,1\n7,2\n", o);
  EXPECT_EQ(ds->targets(), (std::vector<float>{123.5F, -1e-3F, 7}));
  EXPECT_EQ(ds->features(), (std::vector<float>{3, 1, 2}));
  EXPECT_HAS(message("price,rooms\n1,2\ncheap,3\n", o),
             prefix() +
                 "line 3, column 1 (\"price\"): \"cheap\" is not a number (the label is a "
                 "regression target");
}

// A feature column of text says which option reads it (as categories), by its header name,
// or by its index without a header; a bad regression target says classes = false instead.
TEST_F(CsvFiles, TextInAFeatureColumnNamesTheCategoricalOption) {
  CsvOptions o;
  o.classes = false;
  EXPECT_EQ(message("x,name,label\n1,foo,1\n2,bar,0\n", o),
            prefix() +
                "line 2, column 2 (\"name\"): \"foo\" is not a number (a column of text: read "
                "it as categories with CsvOptions::categorical = {Column::name(\"name\")}, in "
                "Python categorical=[\"name\"])");
  CsvOptions no_header;
  no_header.header = false;
  no_header.label = Column::last();
  EXPECT_HAS(message("1,foo,1\n2,bar,0\n", no_header),
             prefix() +
                 "line 1, column 2: \"foo\" is not a number (a column of text: read it as "
                 "categories with CsvOptions::categorical = {Column::index(1)}, in Python "
                 "categorical=[1])");
  CsvOptions target = o;
  target.label = Column::name("price");
  const std::string m = message("price,rooms\n1,2\ncheap,3\n", target);
  EXPECT_EQ(m.find("categorical"), std::string::npos) << m;
}

TEST_F(CsvFiles, QuotesCrLfBomBlankLinesAndSpaces) {
  const std::string text =
      "\xEF\xBB\xBF"
      "\"first, col\",\"sec\"\"ond\",label\r\n"
      "\"1.5\", 2 ,\"he said \"\"hi\"\", then\r\nleft\"\r\n"
      " +3 ,\"-4\" ,plain\r\n"
      "5,6,\"he said \"\"hi\"\", then\r\nleft\"\r\n"
      "\r\n\n\r\n";
  const auto ds = open(text);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"first, col", "sec\"ond"}));
  EXPECT_EQ(ds->features(), (std::vector<float>{1.5F, 2, 3, -4, 5, 6}));
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"he said \"hi\", then\r\nleft", "plain"}));
  EXPECT_EQ(ds->labels(), (std::vector<std::int64_t>{0, 1, 0}));
  // Lines inside quotes count: the bad row is on line 7 of an editor.
  EXPECT_HAS(message("a,b,label\n1,2,\"x\ny\"\n3,4,\"p\n\nq\"\n5,6\n"),
             prefix() + "line 7: 2 fields, expected 3 (as the header)");
}

TEST_F(CsvFiles, GzipIsReadTransparently) {
  std::string text = "a,b,label\n";
  for (int i = 0; i < 3000; ++i) {
    text += std::to_string(i) + "," + std::to_string(i * 0.5) + "," + std::to_string(i % 3) + "\n";
  }
  for (const bool two : {false, true}) {
    const auto ds = CsvDataset::open(write("x.csv.gz", gzip(text, two)));
    ASSERT_EQ(ds->size(), 3000U);
    for (std::size_t i = 0; i < 3000; ++i) {
      ASSERT_EQ(ds->features()[2 * i], static_cast<float>(i));
      ASSERT_EQ(ds->features()[2 * i + 1], static_cast<float>(i) * 0.5F);
      ASSERT_EQ(ds->labels()[i], static_cast<std::int64_t>(i % 3));
    }
  }
  std::string corrupt = gzip(text);
  corrupt.resize(corrupt.size() / 2);
  EXPECT_HAS(message(corrupt, {}, "cut.csv.gz"), prefix("cut.csv.gz"));
  EXPECT_HAS(message(corrupt, {}, "cut.csv.gz"), "cannot decompress");
}

TEST_F(CsvFiles, GzipBeyondTheLimitIsADataErrorNamingTheLimit) {
  std::string text = "a,b,label\n";
  for (int i = 0; i < 500; ++i) text += std::to_string(i) + ",1.5,0\n";
  for (const bool two : {false, true}) {  // two members: the second passes the limit
    const std::string gz = gzip(text, two);
    CsvOptions o;
    o.max_decompressed_bytes = text.size();
    EXPECT_EQ(CsvDataset::open(write("x.csv.gz", gz), o)->size(), 500U);
    for (const std::uint64_t limit : {std::uint64_t{text.size() - 1}, std::uint64_t{100}}) {
      o.max_decompressed_bytes = limit;
      const std::string m = message(gz, o, "x.csv.gz");
      EXPECT_HAS(m, prefix("x.csv.gz") + "byte ");
      EXPECT_HAS(m, ": decompresses to more than the limit of " + std::to_string(limit) +
                        " bytes (CsvOptions::max_decompressed_bytes)");
    }
  }
  // 0 is the default, half the physical memory; a plain file is not decompressed, so not limited.
  EXPECT_EQ(CsvDataset::open(write("x.csv.gz", gzip(text)))->size(), 500U);
  CsvOptions tiny;
  tiny.max_decompressed_bytes = 10;
  EXPECT_EQ(open(text, tiny)->size(), 500U);
}

// `unit` n times.
std::string repeat(const std::string& unit, std::size_t n) {
  std::string out = unit;
  while (out.size() < unit.size() * n) out += out;
  out.resize(unit.size() * n);
  return out;
}

TEST(CsvMemory, BlankOrShortFirstRowsDoNotMultiplyTheRoomByTheColumns) {
  // 300,000 columns and 3 rows of 600 KB. A blank line, or a row of one field, after the header
  // once made the parser guess a million rows of 300,000 floats (1.2 TB).
  constexpr std::size_t kWidth = 300000;
  constexpr std::size_t kRows = 3;
  const std::string header = repeat("c,", kWidth - 1) + "label\n";
  std::string rows;
  for (std::size_t r = 0; r < kRows; ++r) {
    rows += repeat(r % 2 == 0 ? "1," : "2,", kWidth - 1) + std::to_string(r) + "\n";
  }
  // One piece (all the rows guessed at once), and pieces on oneTBB's threads.
  for (const ferry::detail::CsvSplit split :
       {ferry::detail::CsvSplit{0, false}, ferry::detail::CsvSplit{0, true}}) {
    const auto t = ferry::detail::parse_csv(header + "\n" + rows, {}, "wide.csv", split);
    ASSERT_EQ(t.rows, kRows);
    ASSERT_EQ(t.num_features, kWidth - 1);
    for (std::size_t r = 0; r < kRows; ++r) {
      EXPECT_EQ(t.labels[r], static_cast<std::int64_t>(r));
      EXPECT_EQ(t.features[r * (kWidth - 1) + 12345], r % 2 == 0 ? 1.0F : 2.0F);
    }
    EXPECT_LE(t.features.capacity(), t.features.size() * 5 / 4);
  }
  try {
    (void)ferry::detail::parse_csv(header + "1\n" + rows, {}, "wide.csv", {0, false});
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(),
                 "CsvDataset: wide.csv: line 2: 1 field, but the header (line 1) has 300000");
  }
}

TEST(CsvOptionsCost, LongFeatureListsCostTimeInProportionToTheirLength) {
  // 50,000 named columns, listed in reverse: a scan of the list, or of the header, per column
  // once took billions of steps (minutes).
  constexpr std::size_t kWidth = 50000;
  std::string header;
  std::string row;
  CsvOptions o;
  o.label = Column::none();
  for (std::size_t i = 0; i < kWidth; ++i) {
    if (i != 0) {
      header += ',';
      row += ',';
    }
    header += 'c';
    header += std::to_string(i);
    row += std::to_string(i);
    std::string name = "c";
    name += std::to_string(kWidth - 1 - i);
    o.features.push_back(Column::name(name));
  }
  const auto t = ferry::detail::parse_csv(header + "\n" + row + "\n", o, "wide.csv");
  ASSERT_EQ(t.num_features, kWidth);
  for (std::size_t k = 0; k < kWidth; k += 997) {
    EXPECT_EQ(t.features[k], static_cast<float>(kWidth - 1 - k));
    EXPECT_EQ(t.feature_names[k].substr(1), std::to_string(kWidth - 1 - k));
  }
  // The same column twice, far apart: by name, by index, and by name then index.
  const auto config_error = [&](const CsvOptions& options) {
    try {
      (void)ferry::detail::parse_csv(header + "\n" + row + "\n", options, "wide.csv");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  o.features.push_back(Column::name("c5"));
  EXPECT_HAS(config_error(o),
             "the feature column \"c5\" is listed twice (features[49994] and [50000])");
  o.features.clear();
  for (std::size_t i = 0; i < kWidth; ++i) o.features.push_back(Column::index(i));
  o.features.push_back(Column::index(7));
  EXPECT_HAS(config_error(o), "the feature column #7 is listed twice (features[7] and [50000])");
  o.features.back() = Column::name("c7");
  EXPECT_HAS(config_error(o), "the feature columns list column 8 (\"c7\") twice");
  o.features.back() = Column::last();
  EXPECT_HAS(config_error(o), "the feature columns list column 50000 (\"c49999\") twice");
}

TEST(CsvMemory, ARowOfManyFieldsIsCountedNotKept) {
  const std::string text = "a,label\n1,0\n" + repeat("1,", 1000000) + "0\n";
  try {
    (void)ferry::detail::parse_csv(text, {}, "long.csv");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(),
                 "CsvDataset: long.csv: line 3: 1000001 fields, expected 2 (as the header)");
  }
}

TEST_F(CsvFiles, MissingValuesAndNanText) {
  CsvOptions o;
  o.missing = Missing::nan;
  const auto ds = open("a,b,c,label\n1,,3,0\n,\"\",  ,1\nnan,-inf,Infinity,0\n", o);
  const std::vector<float>& f = ds->features();
  ASSERT_EQ(f.size(), 9U);
  EXPECT_EQ(f[0], 1);
  EXPECT_TRUE(std::isnan(f[1]));
  EXPECT_EQ(f[2], 3);
  EXPECT_TRUE(std::isnan(f[3]) && std::isnan(f[4]) && std::isnan(f[5]));
  EXPECT_TRUE(std::isnan(f[6]));
  EXPECT_EQ(f[7], -INFINITY);
  EXPECT_EQ(f[8], INFINITY);
  EXPECT_HAS(message("a,b,c,label\n1,2,3,0\n1,,3,0\n"),
             prefix() + "line 3, column 2 (\"b\"): an empty field, expected a number");
  // Beyond f32: infinity or zero, as a conversion from a double would give.
  const auto big = open("a,label\n1e39,0\n-1e39,0\n1e-50,0\n1e-400,0\n-1e400,0\n");
  EXPECT_EQ(big->features(), (std::vector<float>{INFINITY, -INFINITY, 0, 0, -INFINITY}));
}

// The expected content of the big file: row i's features and label text.
struct BigFile {
  std::string text;
  std::vector<float> features;  // 3 per row
  std::vector<std::string> labels;
};

BigFile big_file(std::size_t rows) {
  BigFile b;
  b.text = "f0,f1,f2,label\n";
  const std::vector<std::string> texts = {"alpha", "be,ta", "gam\"ma", "del\nta", "eps\r\nilon"};
  for (std::size_t i = 0; i < rows; ++i) {
    const float f0 = static_cast<float>(i) * 0.125F;
    const float f1 = -static_cast<float>((i * 7919) % 10007) / 3.0F;
    const float f2 = static_cast<float>(i % 17) * 1e-3F;
    const std::string& label = texts[(i * 31) % texts.size()];
    std::string quoted = "\"";
    for (const char c : label) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    quoted += "\"";
    b.text += (i % 3 == 0 ? "\"" + shortest(f0) + "\"" : shortest(f0)) + "," + shortest(f1) + "," +
              shortest(f2) + "," +
              (i % 2 == 0                                            ? quoted
               : label.find_first_of(",\"\r\n") == std::string::npos ? label
                                                                     : quoted) +
              (i % 5 == 0 ? "\r\n" : "\n");
    b.features.insert(b.features.end(), {f0, f1, f2});
    b.labels.push_back(label);
  }
  return b;
}

void expect_same(const ferry::detail::CsvTable& a, const ferry::detail::CsvTable& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.feature_names, b.feature_names);
  EXPECT_EQ(a.classes, b.classes);
  EXPECT_TRUE(a.features == b.features);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.targets, b.targets);
}

std::string parse_error(const std::string& text, const ferry::detail::CsvSplit& split) {
  try {
    (void)ferry::detail::parse_csv(text, {}, "big.csv", split);
  } catch (const DataError& e) {
    return e.what();
  }
  return "no error";
}

TEST_F(CsvFiles, ParallelChunksGiveTheSerialResult) {
  const BigFile b = big_file(20000);
  const auto ds = CsvDataset::open(write("big.csv", b.text));
  ASSERT_EQ(ds->size(), 20000U);
  EXPECT_TRUE(ds->features() == b.features);
  const std::set<std::string> distinct(b.labels.begin(), b.labels.end());
  EXPECT_EQ(ds->classes(), std::vector<std::string>(distinct.begin(), distinct.end()));
  for (std::size_t i = 0; i < b.labels.size(); ++i) {
    ASSERT_EQ(ds->classes()[static_cast<std::size_t>(ds->labels()[i])], b.labels[i]) << i;
  }

  const auto serial = ferry::detail::parse_csv(b.text, {}, "big.csv", {~std::size_t{0}, false});
  EXPECT_EQ(serial.chunks, 1U);
  const auto automatic = ferry::detail::parse_csv(b.text, {}, "big.csv", {});
  EXPECT_GT(automatic.chunks, 4U);  // the file is ~700 KB
  expect_same(serial, automatic);
  // Small pieces: many borders fall inside quotes, others on "\r\n" or between doubled quotes.
  const std::size_t body = b.text.size() - b.text.find('\n') - 1;
  for (const std::size_t chunk : {331U, 4093U}) {
    SCOPED_TRACE(chunk);
    std::size_t inside = 0;
    std::size_t quotes = 0;
    for (std::size_t at = b.text.size() - body; at < b.text.size(); ++at) {
      if ((at - (b.text.size() - body)) % chunk == 0 && quotes % 2 == 1) ++inside;
      quotes += b.text[at] == '"' ? 1U : 0U;
    }
    EXPECT_GT(inside, body / chunk / 8);
    const auto pieces = ferry::detail::parse_csv(b.text, {}, "big.csv", {chunk, true});
    EXPECT_EQ(pieces.chunks, (body + chunk - 1) / chunk);
    expect_same(serial, pieces);
  }

  // The first error in the file, whatever the pieces: a ragged row on a late line and a
  // non-number on a later one.
  std::string bad = b.text;
  const std::size_t row_at = bad.find("\n1875.125,");
  ASSERT_NE(row_at, std::string::npos);
  bad.insert(row_at + 1, "1,2\n");
  bad += "1,x,3,alpha\n";
  const std::size_t line =
      static_cast<std::size_t>(std::count(bad.data(), bad.data() + row_at + 1, '\n')) + 1;
  const std::string expected = "CsvDataset: big.csv: line " + std::to_string(line) +
                               ": 2 fields, expected 4 (as the header)";
  EXPECT_EQ(parse_error(bad, {~std::size_t{0}, false}), expected);  // one piece
  EXPECT_EQ(parse_error(bad, {0, true}), expected);
  EXPECT_EQ(parse_error(bad, {331, true}), expected);
  EXPECT_EQ(parse_error(bad, {331, false}), expected);
}

// Short decimals are read without std::from_chars; they must give its floats, bit for bit:
// every digit count and sign around the fast path's limits (8 digits, 2^24), exponents, and
// forms it leaves to from_chars ("1.", ".5", "1e3").
TEST(CsvNumbers, EveryFieldIsTheFloatFromCharsGives) {
  std::string text = "label";
  constexpr int kColumns = 16;
  for (int c = 0; c < kColumns; ++c) text += ",f" + std::to_string(c);
  text += '\n';
  std::vector<std::string> fields;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::vector<std::string> fixed = {
      "16777216", "16777217", "1677721.7",  "167772.17", "99999999",  "9999.9999",
      "-0",       "-0.0",     "0.1",        "1.",        ".5",        "1e3",
      "-2.5E-3",  "00000001", "0.00000001", "123456789", "3.4028235", "-16777215"};
  std::size_t rows = 0;
  for (std::size_t i = 0; fields.size() < 20000 || fields.size() % kColumns != 0; ++i) {
    if (i < fixed.size()) {
      fields.push_back(fixed[i]);
      continue;
    }
    const std::uint64_t r = next();
    const int digits = 1 + static_cast<int>(r % 10);  // 1..10 digits
    const int point = static_cast<int>((r >> 8) % static_cast<std::uint64_t>(digits + 1));
    std::string f = (r >> 16) % 2 == 0 ? "" : "-";
    for (int d = 0; d < digits; ++d) {
      if (d == point && point != 0) f += '.';
      f += static_cast<char>('0' + static_cast<int>((next() >> 20) % 10));
    }
    fields.push_back(f);
  }
  for (std::size_t i = 0; i < fields.size(); i += kColumns) {
    text += std::to_string(rows % 3);
    for (int c = 0; c < kColumns; ++c) text += "," + fields[i + static_cast<std::size_t>(c)];
    text += '\n';
    ++rows;
  }
  const auto table = ferry::detail::parse_csv(text, CsvOptions{}, "numbers.csv");
  ASSERT_EQ(table.features.size(), fields.size());
  for (std::size_t i = 0; i < fields.size(); ++i) {
    float want = 0;
    const auto [end, ec] =
        std::from_chars(fields[i].data(), fields[i].data() + fields[i].size(), want);
    ASSERT_EQ(ec, std::errc{}) << fields[i];
    std::uint32_t got_bits = 0, want_bits = 0;
    std::memcpy(&got_bits, &table.features[i], 4);
    std::memcpy(&want_bits, &want, 4);
    ASSERT_EQ(got_bits, want_bits)
        << "field \"" << fields[i] << "\": " << table.features[i] << " instead of " << want;
  }
}

TEST_F(CsvFiles, UnterminatedQuoteIsTheSameErrorInEveryPiece) {
  std::string text = "a,b,label\n";
  for (int i = 0; i < 500; ++i) text += std::to_string(i) + ",1,\"x\"\n";
  text += "7,\"8,0\n";
  for (int i = 0; i < 500; ++i) text += std::to_string(i) + ",1,x\n";
  for (const std::size_t chunk : {0U, 13U, 256U, 100000000U}) {
    EXPECT_EQ(parse_error(text, {chunk, true}),
              "CsvDataset: big.csv: line 502, column 2 (\"b\"): a quoted field starts here and "
              "never ends");
  }
}

TEST_F(CsvFiles, BadInputNamesFileLineAndColumn) {
  EXPECT_HAS(message("", {}, "none.csv"), prefix("none.csv") + "the file is empty");
  EXPECT_HAS(message("\n\r\n\n"), prefix() + "the file has only blank lines");
  fs::remove(dir_ / "missing.csv");
  try {
    (void)CsvDataset::open(dir_ / "missing.csv");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_HAS(e.what(), prefix("missing.csv") + "cannot open: No such file");
  }
  EXPECT_HAS(message("a,b,label\n\n"), prefix() + "line 1 is the header, and no rows follow it");
  EXPECT_HAS(message("a,b,c,label\n1,2,3,0\n4,5,6,1\n7,8,9\n"),
             prefix() + "line 4: 3 fields, expected 4 (as the header)");
  EXPECT_HAS(message("a,b,c,label\n1,2,3,0\n4,5,6,1,9\n"),
             prefix() + "line 3: 5 fields, expected 4 (as the header)");
  CsvOptions no_header;
  no_header.header = false;
  no_header.label = Column::last();
  EXPECT_HAS(message("\n1,2,0\n4,5\n", no_header),
             prefix() + "line 3: 2 fields, expected 3 (as line 2)");
  CsvOptions by_last;
  by_last.label = Column::last();
  EXPECT_HAS(message("150,4,setosa\n5.1,3.5,1.4,0.2,0\n", by_last),
             prefix() + "line 2: 5 fields, but the header (line 1) has 3");
  EXPECT_HAS(message("a,b,label\n1,2,0\n1,abc,0\n"),
             prefix() + "line 3, column 2 (\"b\"): \"abc\" is not a number");
  EXPECT_HAS(message("a,b,label\n1,2,0\n1,0123456789012345678901234567890123456789xyz,0\n"),
             prefix() +
                 "line 3, column 2 (\"b\"): \"0123456789012345678901234567890123456...\" "
                 "is not a number");
  EXPECT_HAS(message("a,b,label\n1,2,0\n1,2\"3,0\n"),
             prefix() + "line 3, column 2 (\"b\"): a quote inside an unquoted field");
  EXPECT_HAS(message("a,b,label\n1,\"2\"3,0\n"),
             prefix() + "line 2, column 2 (\"b\"): text after a closing quote");
  EXPECT_HAS(message("a,b,label\n1,2,0\n3,\"4,0\n5,6,1\n"),
             prefix() + "line 3, column 2 (\"b\"): a quoted field starts here and never ends");
  EXPECT_HAS(message("a,b,label\n1,2,0\n3,4,-1\n"),
             prefix() + "line 3, column 3 (\"label\"): the label -1 is negative");
  EXPECT_HAS(message("a,b,label\n1,2,0\n3,4,\n"),
             prefix() + "line 3, column 3 (\"label\"): an empty label");
  EXPECT_HAS(message("a,b,label\n1,2,5000000\n"), "is too large a class id");
  EXPECT_HAS(message("a,b,label\n1,2,0\n3,x,0\n", {}, "a b.csv"),
             prefix("a b.csv") + "line 3, column 2 (\"b\")");

  CsvOptions o;
  o.label = Column::name("target");
  EXPECT_HAS(message("a,b,label\n1,2,0\n", o),
             prefix() +
                 "the label column \"target\" is not in the header (line 1), which has "
                 "\"a\", \"b\", \"label\" (3 columns)");
  o.label = Column::index(3);
  EXPECT_HAS(message("a,b,label\n1,2,0\n", o),
             prefix() + "the label column #3 does not exist: the rows have 3 columns");
  o.label = Column::last();
  o.features = {Column::name("a"), Column::name("z")};
  EXPECT_HAS(message("a,b,label\n1,2,0\n", o),
             prefix() + "the feature column \"z\" is not in the header");
  o.features = {Column::index(7)};
  EXPECT_HAS(message("a,b,label\n1,2,0\n", o), prefix() + "the feature column #7 does not exist");
  CsvOptions twice;
  twice.features = {Column::name("x")};
  EXPECT_HAS(message("x,x,label\n1,2,0\n", twice),
             "the feature column \"x\" is ambiguous: columns 1 and 2");
  CsvOptions only_label;
  only_label.label = Column::last();
  EXPECT_HAS(message("label\n1\n", only_label), prefix() + "no feature columns");
}

TEST_F(CsvFiles, OptionsThatDoNotFitRaiseConfigError) {
  const std::string text = "a,b,label\n1,2,0\n";
  CsvOptions o;
  o.delimiter = '"';
  EXPECT_HAS(config_message(text, o), "the delimiter \"\\\"\" cannot separate fields");
  o.delimiter = '\n';
  EXPECT_HAS(config_message(text, o), "the delimiter \"\\x0a\" cannot separate fields");
  o.delimiter = '\r';
  EXPECT_HAS(config_message(text, o), "the delimiter \"\\x0d\" cannot separate fields");
  o.delimiter = '\0';
  EXPECT_HAS(config_message(text, o), "the delimiter \"\\x00\" cannot separate fields");
  for (const char d : {'e', 'E', '.', '-', '7'}) {
    o.delimiter = d;
    EXPECT_HAS(config_message(text, o), "cannot separate fields: it is part of numbers");
  }
  o = {};
  o.features = {Column::name("a"), Column::name("a")};
  EXPECT_HAS(config_message(text, o), "the feature column \"a\" is listed twice");
  o.features = {Column::name("a"), Column::index(0)};
  EXPECT_HAS(config_message(text, o), "the feature columns list column 1 (\"a\") twice");
  o.features = {Column::name("a"), Column::name("label")};
  EXPECT_HAS(config_message(text, o), "the label column \"label\" is also a feature column");
  o.features = {Column::index(2)};
  EXPECT_HAS(config_message(text, o), "the label column \"label\" is also a feature column");
  o = {};
  o.header = false;
  EXPECT_HAS(config_message(text, o), "the label column \"label\" is named, but header = false");
  // Checked before the file is read.
  o.delimiter = '"';
  EXPECT_THROW((void)CsvDataset::open(dir_ / "missing.csv", o), ConfigError);
}

TEST_F(CsvFiles, BatchesThroughTheLoaderCarryTheirRows) {
  std::string text = "u,v,w,label\n";
  for (int i = 0; i < 103; ++i) {
    text += std::to_string(i) + "," + std::to_string(-i) + "," + std::to_string(i * 2) + "," +
            std::to_string(i % 4) + "\n";
  }
  const auto ds = open(text);
  ferry::Loader loader(ds, ferry::testing::cpu_options(8, true, 7));
  std::vector<std::uint64_t> seen;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const ferry::Tensor f = b["features"].cpu();
    const ferry::Tensor y = b["label"].cpu();
    ASSERT_EQ(f.shape(), (std::vector<std::int64_t>{static_cast<std::int64_t>(b.size()), 3}));
    for (std::size_t k = 0; k < b.size(); ++k) {
      const auto i = static_cast<float>(b.indices()[k]);
      const auto at = static_cast<std::int64_t>(k);
      EXPECT_EQ(f.data<float>()[at * 3], i);
      EXPECT_EQ(f.data<float>()[at * 3 + 1], -i);
      EXPECT_EQ(f.data<float>()[at * 3 + 2], 2 * i);
      EXPECT_EQ(y.data<std::int64_t>()[at], static_cast<std::int64_t>(b.indices()[k] % 4));
      seen.push_back(b.indices()[k]);
    }
  }
  std::sort(seen.begin(), seen.end());
  ASSERT_EQ(seen.size(), 103U);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
}

// Every batch of a shuffled epoch of batches of 8, directly or gathered from rows.
std::vector<std::vector<std::uint8_t>> batches_of(const std::shared_ptr<const ferry::Dataset>& ds,
                                                  bool gathered) {
  return ferry::testing::epoch_bytes(ds, 8, 5, 2, gathered);
}

// 45 rows "i,-i/4,label" with label i % 3 as a class name, an integer or a target, or none.
std::string rows_text(const std::string& header) {
  std::string text = header;
  for (int i = 0; i < 45; ++i) {
    text += std::to_string(i);
    text += ',';
    text += std::to_string(-i / 4.0);
    if (header.find("label") != std::string::npos) {
      text += ",c";
      text += std::to_string(i % 3);
    }
    text += '\n';
  }
  return text;
}

TEST_F(CsvFiles, StandsOnATensorDatasetThatMovesBetweenDevices) {
  const auto ds = open(rows_text("a,b,label\n"));
  EXPECT_EQ(ds->device(), ferry::Device::cpu());
  const std::span<const ferry::Tensor> rows = ds->rows_in_memory();
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0].shape(), (std::vector<std::int64_t>{45, 2}));
  EXPECT_EQ(rows[0].data(), ds->features().data());  // the tensors view the values: no copy
  EXPECT_EQ(rows[1].shape(), (std::vector<std::int64_t>{45}));
  EXPECT_EQ(rows[1].data(), ds->labels().data());

  const auto same = ds->to(ferry::Device::cpu());
  EXPECT_EQ(same->fields(), ds->fields());
  EXPECT_EQ(same->feature_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(same->classes(), (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_EQ(same->num_features(), 2U);
  EXPECT_EQ(same->features().data(), ds->features().data());
  for (std::size_t f = 0; f < 2; ++f) {
    EXPECT_TRUE(same->rows_in_memory()[f].shares_storage_with(rows[f])) << f;
  }
  EXPECT_EQ(batches_of(same, false), batches_of(ds, false));

  if (!ferry::cuda_is_available()) {
    EXPECT_THROW((void)ds->to(ferry::Device::cuda()), ferry::DeviceError);
    return;
  }
  const auto gpu = ds->to(ferry::Device::cuda());
  EXPECT_EQ(gpu->device(), ferry::Device::cuda());
  EXPECT_EQ(gpu->classes(), ds->classes());
  EXPECT_THROW((void)gpu->features(), ConfigError);
  EXPECT_THROW((void)gpu->labels(), ConfigError);
  const auto back = gpu->to(ferry::Device::cpu());
  EXPECT_EQ(back->features(), ds->features());
  EXPECT_EQ(back->labels(), ds->labels());
  EXPECT_EQ(batches_of(back, false), batches_of(ds, false));
}

TEST_F(CsvFiles, GatheredRowsGiveTheSameBatchesAsReadSamples) {
  CsvOptions regression;
  regression.header = false;
  regression.label = Column::index(0);
  regression.classes = false;
  CsvOptions unlabelled;
  unlabelled.label = Column::none();
  for (const auto& [text, options] :
       std::vector<std::pair<std::string, CsvOptions>>{{rows_text("a,b,label\n"), {}},
                                                       {rows_text(""), regression},
                                                       {rows_text("a,b\n"), unlabelled}}) {
    const auto ds = open(text, options);
    ASSERT_EQ(ds->size(), 45U);
    const auto read = batches_of(ds, false);
    EXPECT_EQ(read.size(), 6U);
    EXPECT_EQ(batches_of(ds, true), read);
  }
}

// Debian's python3-sklearn ships its small data sets as CSV files.
const fs::path kSklearn = "/usr/lib/python3/dist-packages/sklearn/datasets/data";

std::string read_file(const fs::path& p) {
  std::string out(fs::file_size(p), '\0');
  std::ifstream(p, std::ios::binary).read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

std::map<std::int64_t, std::size_t> class_counts(const CsvDataset& ds) {
  std::map<std::int64_t, std::size_t> out;
  for (const std::int64_t id : ds.labels()) ++out[id];
  return out;
}

TEST(CsvDatasetRealData, Iris) {
  if (!fs::exists(kSklearn / "iris.csv")) GTEST_SKIP() << "python3-sklearn is not installed";
  // Its first line "150,4,setosa,versicolor,virginica" has the rows' width: a header.
  CsvOptions o;
  o.label = Column::last();
  const auto ds = CsvDataset::open(kSklearn / "iris.csv", o);
  ASSERT_EQ(ds->size(), 150U);
  EXPECT_EQ(ds->num_features(), 4U);
  EXPECT_EQ(ds->feature_names(), (std::vector<std::string>{"150", "4", "setosa", "versicolor"}));
  EXPECT_EQ(std::vector<float>(ds->features().begin(), ds->features().begin() + 4),
            (std::vector<float>{5.1F, 3.5F, 1.4F, 0.2F}));
  EXPECT_EQ(std::vector<float>(ds->features().end() - 4, ds->features().end()),
            (std::vector<float>{5.9F, 3.0F, 5.1F, 1.8F}));
  EXPECT_EQ(class_counts(*ds), (std::map<std::int64_t, std::size_t>{{0, 50}, {1, 50}, {2, 50}}));
}

TEST_F(CsvFiles, SklearnWineAndBreastCancer) {
  if (!fs::exists(kSklearn / "wine_data.csv")) GTEST_SKIP() << "python3-sklearn is not installed";
  CsvOptions o;
  o.label = Column::last();
  // Their first line ("178,13,class_0,class_1,class_2") is no header of the rows.
  try {
    (void)CsvDataset::open(kSklearn / "wine_data.csv", o);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_HAS(e.what(), "wine_data.csv: line 2: 14 fields, but the header (line 1) has 5");
  }
  o.header = false;
  for (const auto& [name, rows, features, first, counts] :
       std::vector<std::tuple<std::string, std::size_t, std::size_t, float,
                              std::map<std::int64_t, std::size_t>>>{
           {"wine_data.csv", 178, 13, 14.23F, {{0, 59}, {1, 71}, {2, 48}}},
           {"breast_cancer.csv", 569, 30, 17.99F, {{0, 212}, {1, 357}}}}) {
    std::string text = read_file(kSklearn / name);
    text.erase(0, text.find('\n') + 1);
    const auto ds = CsvDataset::open(write(name, text), o);
    EXPECT_EQ(ds->size(), rows) << name;
    EXPECT_EQ(ds->num_features(), features) << name;
    EXPECT_EQ(ds->features()[0], first) << name;
    EXPECT_EQ(class_counts(*ds), counts) << name;
  }
}

TEST(CsvDatasetRealData, DigitsGzipAndDiabetesSpaces) {
  if (!fs::exists(kSklearn / "digits.csv.gz")) GTEST_SKIP() << "python3-sklearn is not installed";
  CsvOptions o;
  o.header = false;
  o.label = Column::last();
  const auto digits = CsvDataset::open(kSklearn / "digits.csv.gz", o);
  EXPECT_EQ(digits->size(), 1797U);
  EXPECT_EQ(digits->num_features(), 64U);
  EXPECT_EQ(digits->classes().size(), 10U);
  EXPECT_EQ(digits->features()[2], 5);
  EXPECT_EQ(digits->labels()[0], 0);
  o.delimiter = ' ';
  o.label = Column::none();
  const auto diabetes = CsvDataset::open(kSklearn / "diabetes_data_raw.csv.gz", o);
  EXPECT_EQ(diabetes->size(), 442U);
  EXPECT_EQ(diabetes->num_features(), 10U);
  EXPECT_EQ(std::vector<float>(diabetes->features().begin(), diabetes->features().begin() + 3),
            (std::vector<float>{59, 2, 32.1F}));
}

}  // namespace
