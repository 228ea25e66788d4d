// CsvDataset's categorical columns (CsvOptions::categorical): codes, categories, missing
// values, given vocabularies, unknown values, files of categories only, and the same codes
// whatever the threads and pieces.

#include <gtest/gtest.h>
#include <oneapi/tbb/task_arena.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "datasets/csv/csv_internal.hpp"
#include "datasets/csv/csv_parse.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::Column;
using ferry::ConfigError;
using ferry::CsvDataset;
using ferry::CsvOptions;
using ferry::DataError;
using ferry::DType;
using ferry::FieldSpec;
using ferry::Missing;
using ferry::Unknown;
using Codes = std::vector<std::int64_t>;
using Texts = std::vector<std::string>;

class CsvCategorical : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_csv_cat_" + std::to_string(::getpid()) + "_" +
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

  std::shared_ptr<CsvDataset> open(const std::string& text, const CsvOptions& o,
                                   const std::string& name = "data.csv") {
    return CsvDataset::open(write(name, text), o);
  }

  // The message of the error E that open() raises ("no error" when it succeeds).
  template <class E = DataError>
  std::string message(const std::string& text, const CsvOptions& o,
                      const std::string& name = "data.csv") {
    const fs::path p = write(name, text);
    try {
      (void)CsvDataset::open(p, o);
    } catch (const E& e) {
      return e.what();
    }
    return "no error";
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

// prefix followed by n in decimal (not "u" + std::to_string(n): GCC 12 warns wrongly of an
// overlap there).
std::string numbered(const char* prefix, std::size_t n) {
  std::string out = prefix;
  out += std::to_string(n);
  return out;
}

CsvOptions with_categorical(std::vector<Column> columns) {
  CsvOptions o;
  o.categorical = std::move(columns);
  return o;
}

TEST_F(CsvCategorical, EachColumnIsAFieldOfCodesInSortedOrder) {
  const auto ds = open("a,city,label,size\n1,paris,0,S\n2,berlin,1,M\n3,paris,0,L\n4,athens,1,M\n",
                       with_categorical({Column::name("city"), Column::index(3)}));
  ASSERT_EQ(ds->size(), 4U);
  const std::vector<FieldSpec> fields = {{"features", DType::f32, {1}, {}},
                                         {"label", DType::i64, {}, {}},
                                         {"city", DType::i64, {}, {}},
                                         {"size", DType::i64, {}, {}}};
  EXPECT_EQ(ds->fields(), fields);
  EXPECT_EQ(ds->num_features(), 1U);
  EXPECT_EQ(ds->feature_names(), Texts{"a"});
  EXPECT_EQ(ds->features(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ds->labels(), (Codes{0, 1, 0, 1}));
  EXPECT_EQ(ds->categorical_names(), (Texts{"city", "size"}));
  EXPECT_EQ(ds->categories("city"), (Texts{"athens", "berlin", "paris"}));
  EXPECT_EQ(ds->codes("city"), (Codes{2, 1, 2, 0}));
  EXPECT_EQ(ds->categories("size"), (Texts{"L", "M", "S"}));
  EXPECT_EQ(ds->codes("size"), (Codes{2, 1, 0, 1}));
  EXPECT_EQ(ds->vocabulary(), (std::map<std::string, Texts>{{"city", {"athens", "berlin", "paris"}},
                                                            {"size", {"L", "M", "S"}}}));
  try {
    (void)ds->categories("a");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_HAS(e.what(), "\"a\" is not a categorical column (they are \"city\", \"size\")");
  }
  EXPECT_THROW((void)ds->codes("label"), ConfigError);

  // Through a loader, every sample carries its row's codes.
  ferry::Loader loader(ds, ferry::testing::cpu_options(3, true, 5));
  std::size_t seen = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const ferry::Tensor city = b["city"].cpu();
    const ferry::Tensor size = b["size"].cpu();
    const ferry::Tensor a = b["features"].cpu();
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::size_t row = b.indices()[k];
      const auto at = static_cast<std::int64_t>(k);
      EXPECT_EQ(city.data<std::int64_t>()[at], ds->codes("city")[row]);
      EXPECT_EQ(size.data<std::int64_t>()[at], ds->codes("size")[row]);
      EXPECT_EQ(a.data<float>()[at], static_cast<float>(row + 1));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 4U);
}

TEST_F(CsvCategorical, TextsAreTrimmedUnquotedAndSortedByByte) {
  const std::string text =
      "x,t\n"
      "1, paris \n"
      "2,\"paris\"\n"
      "3,\"say \"\"hi\"\"\"\n"
      "4,\"a, b\"\n"
      "5,10\n"
      "6,9\n"
      "7,Zurich\n"
      "8,\xc3\xa9vian\n"
      "9,\"two\nlines\"\n"
      "10,\"say \"\"hi\"\"\"\r\n";
  CsvOptions o = with_categorical({Column::name("t")});
  o.label = Column::none();
  const auto ds = open(text, o);
  EXPECT_EQ(ds->categories("t"), (Texts{"10", "9", "Zurich", "a, b", "paris", "say \"hi\"",
                                        "two\nlines", "\xc3\xa9vian"}));
  EXPECT_EQ(ds->codes("t"), (Codes{4, 4, 5, 3, 0, 1, 2, 7, 6, 5}));
  EXPECT_EQ(ds->features(), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST_F(CsvCategorical, QuotedTextsWithDoubledQuotesAreStoredOncePerDistinctText) {
  // 60,000 rows of two texts with doubled quotes, as a category and as a label: the texts are
  // unescaped into one buffer and kept once per piece of the file, never once per row.
  constexpr std::size_t kRows = 60'000;
  std::string text = "x,t,label\n";
  for (std::size_t i = 0; i < kRows; ++i) {
    text += i % 3 == 0 ? "1,\"a\"\"b\",\"l\"\"1\"\n" : "2,\"c\"\"d\",\"l\"\"2\"\n";
  }
  CsvOptions o = with_categorical({Column::name("t")});
  const std::uint64_t before = ferry::detail::csv::unquoted_stored.load();
  const auto ds = open(text, o);
  const std::uint64_t stored = ferry::detail::csv::unquoted_stored.load() - before;
  // Four distinct texts in each of at most a few hundred pieces.
  EXPECT_LE(stored, 4U * 256) << "texts stored for " << 2 * kRows << " quoted fields";
  EXPECT_EQ(ds->categories("t"), (Texts{"a\"b", "c\"d"}));
  EXPECT_EQ(ds->classes(), (Texts{"l\"1", "l\"2"}));
  const Codes& codes = ds->codes("t");
  const Codes& labels = ds->labels();
  ASSERT_EQ(codes.size(), kRows);
  ASSERT_EQ(labels.size(), kRows);
  for (std::size_t i = 0; i < kRows; ++i) {
    ASSERT_EQ(codes[i], i % 3 == 0 ? 0 : 1) << "row " << i;
    ASSERT_EQ(labels[i], i % 3 == 0 ? 0 : 1) << "row " << i;
  }
}

TEST_F(CsvCategorical, WithoutAHeaderColumnsAreNamedByPosition) {
  CsvOptions o = with_categorical({Column::index(1)});
  o.header = false;
  o.label = Column::index(0);
  const auto ds = open("1,lyon,0.5\n0,nice,1.5\n1,lyon,2.5\n", o);
  EXPECT_EQ(ds->categorical_names(), Texts{"column 2"});
  EXPECT_EQ(ds->categories("column 2"), (Texts{"lyon", "nice"}));
  EXPECT_EQ(ds->codes("column 2"), (Codes{0, 1, 0}));
  EXPECT_EQ(ds->feature_names(), Texts{"column 3"});
  EXPECT_EQ(ds->labels(), (Codes{1, 0, 1}));
  // Its vocabulary goes by that name too.
  CsvOptions test = o;
  test.categories_from(*ds);
  test.unknown = Unknown::reserved;
  EXPECT_EQ(open("0,nice,1\n1,caen,2\n", test, "test.csv")->codes("column 2"), (Codes{1, 2}));
}

TEST_F(CsvCategorical, MissingValuesAreAnErrorOrMinusOne) {
  const std::string text = "x,c,label\n1,a,0\n2,,1\n3,  ,0\n4,\"\",1\n5,b,0\n";
  EXPECT_EQ(message(text, with_categorical({Column::name("c")})),
            prefix() +
                "line 3, column 2 (\"c\"): an empty field, expected a category "
                "(CsvOptions::missing = Missing::nan reads it as the code -1)");
  CsvOptions o = with_categorical({Column::name("c")});
  o.missing = Missing::nan;
  const auto ds = open(text, o);
  EXPECT_EQ(ds->categories("c"), (Texts{"a", "b"}));
  EXPECT_EQ(ds->codes("c"), (Codes{0, -1, -1, -1, 1}));
  // The last field of the file, empty.
  EXPECT_EQ(open("x,c\n1,a\n2,",
                 [] {
                   CsvOptions n = with_categorical({Column::name("c")});
                   n.label = Column::none();
                   n.missing = Missing::nan;
                   return n;
                 }())
                ->codes("c"),
            (Codes{0, -1}));
}

TEST_F(CsvCategorical, AGivenVocabularyNumbersTheCodes) {
  CsvOptions o = with_categorical({Column::name("city")});
  const auto train =
      open("x,city,label\n1,paris,0\n2,berlin,1\n3,rome,0\n4,athens,1\n", o, "train.csv");
  EXPECT_EQ(train->categories("city"), (Texts{"athens", "berlin", "paris", "rome"}));
  CsvOptions test_options = o;
  test_options.categories_from(*train);
  EXPECT_EQ(test_options.vocabulary,
            (std::map<std::string, Texts>{{"city", {"athens", "berlin", "paris", "rome"}}}));
  // The test file lacks two of the cities: alone it would number them 0 and 1.
  const std::string test_text = "x,city,label\n5,rome,0\n6,berlin,1\n7,rome,0\n";
  EXPECT_EQ(open(test_text, o, "test.csv")->codes("city"), (Codes{1, 0, 1}));
  const auto test = open(test_text, test_options, "test.csv");
  EXPECT_EQ(test->codes("city"), (Codes{3, 1, 3}));
  EXPECT_EQ(test->categories("city"), train->categories("city"));

  // A vocabulary of one's own order: codes are positions in it.
  CsvOptions ordinal = with_categorical({Column::name("size")});
  ordinal.label = Column::none();
  ordinal.vocabulary["size"] = {"small", "medium", "large"};
  const auto sizes = open("x,size\n1,large\n2,small\n3,medium\n4,small\n", ordinal);
  EXPECT_EQ(sizes->codes("size"), (Codes{2, 0, 1, 0}));
  EXPECT_EQ(sizes->categories("size"), (Texts{"small", "medium", "large"}));
}

TEST_F(CsvCategorical, AValueOutsideTheVocabularyIsAnErrorOrTheReservedCode) {
  CsvOptions o = with_categorical({Column::name("city"), Column::name("size")});
  o.vocabulary["city"] = {"paris", "berlin"};
  o.vocabulary["size"] = {"S", "M", "L"};
  const std::string text =
      "x,city,size,label\n1,paris,S,0\n2,berlin,M,1\n3,paris,XL,0\n4,rome,S,1\n5,oslo,XXL,0\n";
  EXPECT_EQ(message(text, o),
            prefix() +
                "line 4, column 3 (\"size\"): \"XL\" is not among the 3 categories of the "
                "vocabulary given for \"size\" (CsvOptions::unknown = Unknown::reserved gives it "
                "the code 3)");
  // The first one in the file, whatever the pieces it was parsed in.
  for (const std::size_t chunk : {0U, 7U, 31U}) {
    for (const bool parallel : {false, true}) {
      try {
        (void)ferry::detail::parse_csv(text, o, "t.csv", {chunk, parallel});
        ADD_FAILURE() << "no error";
      } catch (const DataError& e) {
        EXPECT_HAS(e.what(), "CsvDataset: t.csv: line 4, column 3 (\"size\"): \"XL\"");
      }
    }
  }
  // Quoted or not, the first one is named.
  CsvOptions one = with_categorical({Column::name("c")});
  one.label = Column::none();
  one.vocabulary["c"] = {"paris"};
  for (const std::string rows : {"1,rome\n2,\"rome\"\n", "1,\"rome\"\n2,rome\n"}) {
    EXPECT_HAS(message("x,c\n0,paris\n" + rows, one),
               prefix() + "line 3, column 2 (\"c\"): \"rome\" is not among the 1 categories");
  }
  o.unknown = Unknown::reserved;
  const auto ds = open(text, o);
  EXPECT_EQ(ds->codes("city"), (Codes{0, 1, 0, 2, 2}));
  EXPECT_EQ(ds->codes("size"), (Codes{0, 1, 3, 0, 3}));
  EXPECT_EQ(ds->categories("city"), (Texts{"paris", "berlin"}));  // the unknown code is 2
}

TEST_F(CsvCategorical, AFileOfCategoriesOnlyHasNoFeaturesField) {
  const std::string text = "color,shape,label\nred,round,1\nblue,square,0\nred,square,1\n";
  const auto ds = open(text, with_categorical({Column::name("color"), Column::name("shape")}));
  const std::vector<FieldSpec> fields = {
      {"label", DType::i64, {}, {}}, {"color", DType::i64, {}, {}}, {"shape", DType::i64, {}, {}}};
  EXPECT_EQ(ds->fields(), fields);
  EXPECT_EQ(ds->num_features(), 0U);
  EXPECT_TRUE(ds->features().empty());
  EXPECT_TRUE(ds->feature_names().empty());
  EXPECT_EQ(ds->codes("color"), (Codes{1, 0, 1}));
  EXPECT_EQ(ds->codes("shape"), (Codes{0, 1, 1}));
  EXPECT_EQ(ds->labels(), (Codes{1, 0, 1}));
  ferry::Loader loader(ds, ferry::testing::cpu_options(2, false, 0));
  std::vector<std::int64_t> colors;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const ferry::Tensor c = b["color"].cpu();
    for (std::size_t k = 0; k < b.size(); ++k) {
      colors.push_back(c.data<std::int64_t>()[static_cast<std::int64_t>(k)]);
    }
    EXPECT_THROW((void)b["features"], ferry::Error);
  }
  EXPECT_EQ(colors, (Codes{1, 0, 1}));
  // Without a label: the categorical fields alone.
  CsvOptions o = with_categorical({Column::name("shape")});
  o.label = Column::none();
  o.features = {};
  const auto only = open("shape\nround\nsquare\n", o);
  EXPECT_EQ(only->fields(), (std::vector<FieldSpec>{{"shape", DType::i64, {}, {}}}));
  // Neither features nor categorical columns: as before, no feature columns.
  CsvOptions none;
  none.label = Column::last();
  EXPECT_HAS(message("label\n1\n", none), prefix() + "no feature columns");
}

TEST_F(CsvCategorical, OptionsThatDoNotFitAreConfigErrors) {
  const std::string text = "a,b,label\n1,x,0\n";
  CsvOptions o = with_categorical({Column::name("label")});
  EXPECT_HAS(message<ConfigError>(text, o),
             "the label column \"label\" is also a categorical column (categorical[0])");
  o = with_categorical({Column::index(2)});
  EXPECT_HAS(message<ConfigError>(text, o), "the label column \"label\" is also a categorical");
  o = with_categorical({Column::name("b"), Column::name("b")});
  EXPECT_HAS(message<ConfigError>(text, o),
             "the categorical column \"b\" is listed twice (categorical[0] and [1])");
  o = with_categorical({Column::name("b"), Column::index(1)});
  EXPECT_HAS(message<ConfigError>(text, o), "the categorical columns list column 2 (\"b\") twice");
  o = with_categorical({Column::name("b")});
  o.features = {Column::name("a"), Column::name("b")};
  EXPECT_HAS(message<ConfigError>(text, o),
             "the column \"b\" is both a feature (features[1]) and a categorical column");
  o.features = {Column::index(1)};
  EXPECT_HAS(message<ConfigError>(text, o),
             "the feature column #1 (column 2 (\"b\")) is also a categorical column");
  o = with_categorical({Column::none()});
  EXPECT_HAS(message<ConfigError>(text, o), "Column::none() in the categorical columns");
  o = with_categorical({Column::name("b")});
  o.header = false;
  o.label = Column::last();
  EXPECT_HAS(message<ConfigError>(text, o), "the categorical column \"b\" is named, but header");
  o = with_categorical({Column::name("b")});
  o.vocabulary["a"] = {"x"};
  EXPECT_HAS(message<ConfigError>(text, o),
             "CsvOptions::vocabulary gives categories for \"a\", which is not a categorical "
             "column (\"b\")");
  o.vocabulary = {{"b", {"x", "y", "x"}}};
  EXPECT_HAS(message<ConfigError>(text, o),
             "the vocabulary of \"b\" lists \"x\" twice ([0] and [2])");
  o.vocabulary = {{"b", {"x", ""}}};
  EXPECT_HAS(message<ConfigError>(text, o), "the vocabulary of \"b\" has an empty category ([1])");
  // A field of that name exists already.
  o = with_categorical({Column::name("features")});
  EXPECT_HAS(message<ConfigError>("a,features,label\n1,x,0\n", o),
             "the categorical column 2 (\"features\") would be a field named as the "
             "\"features\" field");
  o = with_categorical({Column::index(0), Column::index(1)});
  o.label = Column::none();
  EXPECT_HAS(message<ConfigError>("b,b,c\nx,y,1\n", o),
             "the categorical column 2 (\"b\") would be a field named as the categorical "
             "column 1 (\"b\")");
  // A categorical column "label" where there is no label field is fine.
  o = with_categorical({Column::name("label")});
  o.label = Column::none();
  EXPECT_EQ(open("a,label\n1,x\n2,w\n", o)->codes("label"), (Codes{1, 0}));
  EXPECT_HAS(message("a,b,label\n1,x,0\n", with_categorical({Column::name("z")})),
             prefix() + "the categorical column \"z\" is not in the header");
}

// A file whose categorical columns have 3, 50 and up to 20,000 distinct texts, some quoted
// (with line breaks and delimiters inside), some missing; the expected codes are the texts'
// ranks among the distinct ones.
struct Generated {
  std::string text;
  std::vector<Texts> values;  // per column, per row ("" missing)
};

Generated generated(std::size_t rows) {
  Generated g;
  g.text = "id,small,x,medium,large,label\n";
  g.values.resize(3);
  std::uint64_t s = 0x2545f4914f6cdd1dULL;
  const auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  };
  const Texts small = {"one", "two, or \"2\"", "three\nlines"};
  for (std::size_t r = 0; r < rows; ++r) {
    const std::string a = small[next() % 3];
    const std::string b = next() % 17 == 0 ? "" : numbered("m", next() % 50);
    const std::string c = numbered("L", next() % 20000);
    std::string quoted_a = "\"";
    for (const char ch : a) quoted_a += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    quoted_a += '"';
    g.text += std::to_string(r) + "," + quoted_a + "," + std::to_string(r % 7) + "," +
              (r % 5 == 0 ? "\"" + b + "\"" : b) + "," + c + "," + std::to_string(r % 3) +
              (r % 4 == 0 ? "\r\n" : "\n");
    g.values[0].push_back(a);
    g.values[1].push_back(b);
    g.values[2].push_back(c);
  }
  return g;
}

CsvOptions generated_options() {
  CsvOptions o =
      with_categorical({Column::name("small"), Column::name("medium"), Column::name("large")});
  o.missing = Missing::nan;
  return o;
}

void expect_same(const ferry::detail::CsvTable& a, const ferry::detail::CsvTable& b) {
  ASSERT_EQ(a.categorical.size(), b.categorical.size());
  for (std::size_t k = 0; k < a.categorical.size(); ++k) {
    EXPECT_EQ(a.categorical[k].name, b.categorical[k].name);
    EXPECT_EQ(a.categorical[k].categories, b.categorical[k].categories);
    EXPECT_TRUE(a.categorical[k].codes == b.categorical[k].codes) << k;
  }
  EXPECT_TRUE(a.features == b.features);
  EXPECT_EQ(a.labels, b.labels);
}

TEST_F(CsvCategorical, TheSameCodesWhateverTheThreadsAndPieces) {
  const Generated g = generated(40000);
  const fs::path file = write("big.csv", g.text);
  std::shared_ptr<CsvDataset> one, many;
  tbb::task_arena(1).execute([&] { one = CsvDataset::open(file, generated_options()); });
  tbb::task_arena(4).execute([&] { many = CsvDataset::open(file, generated_options()); });
  const Texts names = {"small", "medium", "large"};
  for (std::size_t k = 0; k < 3; ++k) {
    SCOPED_TRACE(names[k]);
    std::set<std::string> distinct(g.values[k].begin(), g.values[k].end());
    distinct.erase("");
    const Texts sorted(distinct.begin(), distinct.end());
    EXPECT_EQ(one->categories(names[k]), sorted);
    EXPECT_EQ(many->categories(names[k]), sorted);
    Codes expected;
    for (const std::string& v : g.values[k]) {
      expected.push_back(
          v.empty() ? -1 : std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin());
    }
    EXPECT_TRUE(one->codes(names[k]) == expected);
    EXPECT_TRUE(many->codes(names[k]) == expected);
  }
  EXPECT_EQ(one->categories("small"), (Texts{"one", "three\nlines", "two, or \"2\""}));
  EXPECT_EQ(one->categories("medium").size(), 50U);
  EXPECT_GT(one->categories("large").size(), 17000U);
  EXPECT_EQ(one->feature_names(), (Texts{"id", "x"}));
  EXPECT_TRUE(one->features() == many->features());

  // In one piece, and in small pieces whose borders fall inside quotes and line breaks.
  const auto serial =
      ferry::detail::parse_csv(g.text, generated_options(), "big.csv", {~std::size_t{0}, false});
  EXPECT_EQ(serial.chunks, 1U);
  for (const std::size_t chunk : {0U, 331U, 4093U, 65536U}) {
    for (const bool parallel : {false, true}) {
      SCOPED_TRACE(std::to_string(chunk) + (parallel ? " parallel" : " serial"));
      const auto pieces =
          ferry::detail::parse_csv(g.text, generated_options(), "big.csv", {chunk, parallel});
      if (chunk == 331) {
        EXPECT_GT(pieces.chunks, 1000U);
      }
      expect_same(serial, pieces);
    }
  }
}

TEST(CsvCategoricalOrder, SharedPrefixesAndLongTextsSortByByte) {
  // Texts that share their first 8 or 16 bytes (the sort's first key and the dictionaries'
  // inline words), prefixes of one another, longer than 16 bytes, with a zero byte and bytes
  // above 0x7f: the codes are the ranks of the whole texts in byte order, in one piece and in
  // many, on one thread and on several.
  const Texts stems = {"abcdefgh",
                       "abcdefghijklmnop",
                       "abcdefghijklmnopqrstu",
                       "abcdefg",
                       std::string("abcdefgh\0z", 10),
                       "\xff\xfe",
                       "\xc3\xa9",
                       "b"};
  Texts values;
  std::string text = "t\n";
  std::uint64_t s = 0x9e3779b97f4a7c15ULL;
  for (std::size_t r = 0; r < 30000; ++r) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    std::string v = stems[s % stems.size()];
    if ((s >> 8) % 3 != 0) v += numbered("", (s >> 16) % 500);
    values.push_back(v);
    text += v + "\n";
  }
  std::set<std::string> distinct(values.begin(), values.end());
  const Texts sorted(distinct.begin(), distinct.end());
  ASSERT_GT(sorted.size(), 2000U);
  CsvOptions o = with_categorical({Column::name("t")});
  o.label = Column::none();
  for (const std::size_t chunk : {~std::size_t{0}, std::size_t{0}, std::size_t{977}}) {
    for (const bool parallel : {false, true}) {
      SCOPED_TRACE(std::to_string(chunk) + (parallel ? " parallel" : " serial"));
      const auto t = ferry::detail::parse_csv(text, o, "order.csv", {chunk, parallel});
      ASSERT_EQ(t.categorical.size(), 1U);
      EXPECT_EQ(t.categorical[0].categories, sorted);
      ASSERT_EQ(t.categorical[0].codes.size(), values.size());
      std::size_t wrong = 0;
      for (std::size_t r = 0; r < values.size(); ++r) {
        const auto rank =
            std::lower_bound(sorted.begin(), sorted.end(), values[r]) - sorted.begin();
        wrong += t.categorical[0].codes[r] != rank ? 1U : 0U;
      }
      EXPECT_EQ(wrong, 0U);
    }
  }
}

TEST(CsvCategoricalMemory, AMillionDistinctTexts) {
  // Every row's text distinct, written in an order unlike the sorted one: the dictionaries hold
  // views of the text, and the codes are the ranks.
  // A quarter under TSan (test_util.hpp): still far more than the parser's pieces.
  constexpr std::size_t kRows = ferry::testing::scaled_for_tsan<std::size_t>(1000000, 4);
  std::string text = "id\n";
  text.reserve(kRows * 12);
  for (std::size_t r = 0; r < kRows; ++r) {
    text += numbered("u", (r * 7919) % kRows);
    text += '\n';
  }
  CsvOptions o = with_categorical({Column::name("id")});
  o.label = Column::none();
  for (const bool parallel : {false, true}) {
    const auto t = ferry::detail::parse_csv(text, o, "ids.csv", {0, parallel});
    ASSERT_EQ(t.categorical.size(), 1U);
    const ferry::detail::CsvCategorical& c = t.categorical[0];
    ASSERT_EQ(c.categories.size(), kRows);
    EXPECT_TRUE(std::is_sorted(c.categories.begin(), c.categories.end()));
    ASSERT_EQ(c.codes.size(), kRows);
    for (std::size_t r = 0; r < kRows; r += 9973) {
      EXPECT_EQ(c.categories[static_cast<std::size_t>(c.codes[r])],
                numbered("u", (r * 7919) % kRows));
    }
    EXPECT_EQ(t.num_features, 0U);
  }
}

TEST_F(CsvCategorical, MovesBetweenDevicesWithItsCodes) {
  CsvOptions o = with_categorical({Column::name("c")});
  std::string text = "a,c,label\n";
  for (int i = 0; i < 40; ++i) {
    text += std::to_string(i) + numbered(",k", static_cast<std::size_t>(i % 6)) + "," +
            std::to_string(i % 2) + "\n";
  }
  const auto ds = open(text, o);
  const auto same = ds->to(ferry::Device::cpu());
  EXPECT_EQ(same->codes("c").data(), ds->codes("c").data());
  EXPECT_EQ(same->categories("c"), ds->categories("c"));
  EXPECT_EQ(ferry::testing::epoch_bytes(same, 8, 5, 2, false),
            ferry::testing::epoch_bytes(ds, 8, 5, 2, false));
  EXPECT_EQ(ferry::testing::epoch_bytes(ds, 8, 5, 2, true),
            ferry::testing::epoch_bytes(ds, 8, 5, 2, false));
  if (!ferry::cuda_is_available()) GTEST_SKIP() << "no usable GPU for the round trip";
  const auto gpu = ds->to(ferry::Device::cuda());
  EXPECT_THROW((void)gpu->codes("c"), ConfigError);
  EXPECT_EQ(gpu->categories("c"), ds->categories("c"));
  const auto back = gpu->to(ferry::Device::cpu());
  EXPECT_EQ(back->codes("c"), ds->codes("c"));
  EXPECT_EQ(back->labels(), ds->labels());
  EXPECT_EQ(back->features(), ds->features());
  EXPECT_EQ(back->fields(), ds->fields());
}

// Debian's python3-statsmodels ships tables with columns of text.
const fs::path kStatsmodels = "/usr/lib/python3/dist-packages/statsmodels";

TEST(CsvCategoricalRealData, GrunfeldFirms) {
  const fs::path file = kStatsmodels / "datasets/grunfeld/grunfeld.csv";
  if (!fs::exists(file)) GTEST_SKIP() << "python3-statsmodels is not installed";
  CsvOptions o = with_categorical({Column::name("firm")});
  o.label = Column::none();
  const auto ds = CsvDataset::open(file, o);
  ASSERT_EQ(ds->size(), 220U);
  EXPECT_EQ(ds->feature_names(), (Texts{"invest", "value", "capital", "year"}));
  EXPECT_EQ(
      ds->categories("firm"),
      (Texts{"American Steel", "Atlantic Refining", "Chrysler", "Diamond Match", "General Electric",
             "General Motors", "Goodyear", "IBM", "US Steel", "Union Oil", "Westinghouse"}));
  // 20 years of each firm, General Motors first.
  std::map<std::int64_t, std::size_t> counts;
  for (const std::int64_t c : ds->codes("firm")) ++counts[c];
  EXPECT_EQ(counts.size(), 11U);
  for (const auto& [code, n] : counts) EXPECT_EQ(n, 20U) << code;
  EXPECT_EQ(ds->codes("firm")[0], 5);
  EXPECT_EQ(std::vector<float>(ds->features().begin(), ds->features().begin() + 4),
            (std::vector<float>{317.6F, 3078.5F, 2.8F, 1935}));
}

TEST(CsvCategoricalRealData, StatecrimeAndFertility) {
  const fs::path crime = kStatsmodels / "datasets/statecrime/statecrime.csv";
  const fs::path fertility = kStatsmodels / "datasets/fertility/fertility.csv";
  if (!fs::exists(crime)) GTEST_SKIP() << "python3-statsmodels is not installed";
  CsvOptions o = with_categorical({Column::name("state")});
  o.label = Column::none();
  const auto states = CsvDataset::open(crime, o);
  ASSERT_EQ(states->size(), 51U);
  EXPECT_EQ(states->num_features(), 7U);
  ASSERT_EQ(states->categories("state").size(), 51U);  // one row per state
  EXPECT_EQ(states->categories("state").front(), "Alabama");
  EXPECT_EQ(states->codes("state")[0], 0);
  for (std::size_t r = 0; r < 51; ++r) {  // the file lists them in order
    EXPECT_EQ(states->codes("state")[r], static_cast<std::int64_t>(r));
  }

  // Country names and codes, an indicator of one value, and years with missing values.
  o = with_categorical({Column::name("Country Name"), Column::name("Country Code"),
                        Column::name("Indicator Name"), Column::name("Indicator Code")});
  o.label = Column::none();
  o.missing = Missing::nan;
  const auto f = CsvDataset::open(fertility, o);
  ASSERT_EQ(f->size(), 219U);
  EXPECT_EQ(f->num_features(), 54U);  // 1960 .. 2013
  EXPECT_EQ(f->categories("Country Name").size(), 219U);
  EXPECT_EQ(f->categories("Country Code").size(), 219U);
  EXPECT_EQ(f->categories("Indicator Name"), Texts{"Fertility rate, total (births per woman)"});
  EXPECT_EQ(f->categories("Country Name")[static_cast<std::size_t>(f->codes("Country Name")[0])],
            "Aruba");
  EXPECT_EQ(f->categories("Country Code")[static_cast<std::size_t>(f->codes("Country Code")[0])],
            "ABW");
}

TEST(CsvCategoricalRealData, AutosWithMissingDoors) {
  const fs::path file = kStatsmodels / "gam/tests/results/autos.csv";
  if (!fs::exists(file)) GTEST_SKIP() << "python3-statsmodels is not installed";
  CsvOptions o;
  o.label = Column::name("drive");
  o.categorical = {Column::name("make"),     Column::name("fuel"),      Column::name("aspir"),
                   Column::name("doors"),    Column::name("style"),     Column::name("eng_loc"),
                   Column::name("eng_type"), Column::name("cylinders"), Column::name("fuel.sys")};
  o.missing = Missing::nan;
  const auto ds = CsvDataset::open(file, o);
  ASSERT_EQ(ds->size(), 205U);
  EXPECT_EQ(ds->classes(), (Texts{"4wd", "fwd", "rwd"}));
  EXPECT_EQ(ds->num_features(), 16U);
  EXPECT_EQ(ds->categories("make").size(), 22U);
  EXPECT_EQ(ds->categories("fuel"), (Texts{"diesel", "gas"}));
  EXPECT_EQ(ds->categories("doors"), (Texts{"four", "two"}));
  EXPECT_EQ(std::count(ds->codes("doors").begin(), ds->codes("doors").end(), -1), 2);
  EXPECT_EQ(ds->categories("make")[static_cast<std::size_t>(ds->codes("make")[0])], "alfa-romero");
  EXPECT_EQ(
      std::count(ds->codes("make").begin(), ds->codes("make").end(),
                 std::find(ds->categories("make").begin(), ds->categories("make").end(), "toyota") -
                     ds->categories("make").begin()),
      32);
}

}  // namespace
