// ParquetDataset over URLs, read by ranges: nginx started here on 127.0.0.1 serves the Parquet
// files tests/table/write_tables.js and write_lists.js write (apache-arrow and parquet-wasm, from
// npm), and every row read through it is compared, byte for byte, with the same file read locally.
// nginx's access log counts the bytes sent: reading 2 of a file's 50 columns fetches the footer and
// those columns' chunks, nothing else. Skips (saying why) where nginx, node or the npm packages
// are missing.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "remote/nginx.hpp"
#include "source_dir.hpp"
#include "table_writer.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::ParquetDataset;
using ferry::TableOptions;
using ferry::testing::expect_error;
using ferry::testing::Nginx;
using ferry::testing::serve_written_tables;
using ferry::testing::settled;

constexpr std::uint64_t kTail = 64 << 10;  // what open() reads first of a URL

std::vector<char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

class ParquetRemote : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry_parquet_remote_" + std::to_string(::getpid()));
    skip_ = serve_written_tables(FERRY_SOURCE_DIR, "write_tables.js",
                                 {"parquet-wasm", "apache-arrow"}, dir_, nginx_);
  }
  static void TearDownTestSuite() {
    delete nginx_;
    nginx_ = nullptr;
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  static fs::path local(const std::string& name) { return dir_ / "www" / name; }
  static std::string url(const std::string& name) { return nginx_->url(name); }

  // Each column's chunk sizes in wide.parquet, per row group, as write_tables.js's Parquet
  // library gives them ("file": the file's size).
  static std::map<std::string, std::vector<std::uint64_t>> wide_sizes() {
    std::map<std::string, std::vector<std::uint64_t>> out;
    const std::vector<char> text = bytes_of(local("wide.txt"));
    std::istringstream in(std::string(text.data(), text.size()));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string name;
      words >> name;
      std::uint64_t v = 0;
      while (words >> v) out[name].push_back(v);
    }
    return out;
  }

  static std::string skip_;
  static fs::path dir_;
  static inline Nginx* nginx_ = nullptr;
};
std::string ParquetRemote::skip_;
fs::path ParquetRemote::dir_;

ferry::LoaderOptions loader_options(bool shuffle, int workers) {
  return ferry::testing::table_loader_options(7, shuffle, workers, 11);
}

// Every sample an epoch delivers: its fields' bytes (a ragged field's `length` values alone),
// by sample index. A sample delivered twice fails.
using Rows = std::map<std::uint64_t, std::vector<std::string>>;
Rows rows_of(const std::shared_ptr<ParquetDataset>& ds, bool shuffle, int workers) {
  const std::vector<ferry::FieldSpec> fields = ds->fields();
  ferry::Loader loader(ds, loader_options(shuffle, workers));
  Rows rows;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) {
      std::vector<std::string> values;
      for (const ferry::FieldSpec& f : fields) {
        const ferry::Tensor& t = b[f.name];
        const auto* p = static_cast<const char*>(t.data());
        const std::size_t per = t.nbytes() / b.size();
        std::size_t n = per;
        if (!f.shape.empty() && f.shape[0] == ferry::ragged) {
          n = static_cast<std::size_t>(b.lengths(f.name).data<std::int64_t>()[j]) *
              ferry::dtype_size(f.dtype);
        }
        values.emplace_back(p + j * per, n);
      }
      EXPECT_TRUE(rows.emplace(b.indices()[j], std::move(values)).second)
          << "sample " << b.indices()[j] << " twice";
    }
  }
  return rows;
}

// The same fields, categories and rows from the URLs (a shuffled epoch on 3 threads) as from
// the local files (in order).
void expect_same_as_local(const std::vector<fs::path>& locals, const std::vector<fs::path>& urls,
                          const TableOptions& o, const std::string& what) {
  SCOPED_TRACE(what);
  const auto near = ParquetDataset::open(locals, o);
  const auto far = ParquetDataset::open(urls, o);
  ASSERT_EQ(far->size(), near->size());
  ASSERT_EQ(far->num_row_groups(), near->num_row_groups());
  const auto fields = near->fields();
  ASSERT_EQ(far->fields().size(), fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) {
    EXPECT_EQ(far->fields()[f].name, fields[f].name);
    EXPECT_EQ(far->fields()[f].dtype, fields[f].dtype);
    EXPECT_EQ(far->fields()[f].shape, fields[f].shape);
    EXPECT_EQ(far->max_length(f), near->max_length(f));
  }
  for (const auto& c : o.categorical) EXPECT_EQ(far->categories(c), near->categories(c)) << c;
  const Rows want = rows_of(near, false, 1);
  ASSERT_EQ(want.size(), near->size());
  const double waited = far->network_wait_seconds();
  const Rows got = rows_of(far, true, 3);
  const bool over_network = !urls[0].string().starts_with("file://");
  EXPECT_EQ(far->network_wait_seconds() > waited, over_network);
  EXPECT_EQ(near->network_wait_seconds(), 0.0);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [index, values] : want) {
    const auto it = got.find(index);
    ASSERT_NE(it, got.end()) << "sample " << index;
    for (std::size_t f = 0; f < values.size(); ++f) {
      ASSERT_EQ(it->second[f], values[f]) << "sample " << index << ", field " << fields[f].name;
    }
  }
}

// Rows 0..1999 of wide.parquet's c05 and text, as write_tables.js wrote them.
void expect_wide_rows(const Rows& rows) {
  ASSERT_EQ(rows.size(), 2000U);
  for (const auto& [r, values] : rows) {
    double v = 0;
    ASSERT_EQ(values[0].size(), 8U);
    std::memcpy(&v, values[0].data(), 8);
    ASSERT_EQ(v, static_cast<double>(r) * 50 + 5 + 0.5) << "row " << r;
    ASSERT_EQ(values[1], "row " + std::to_string(r) + " " + std::string(r % 13, 'x'))
        << "row " << r;
  }
}

TableOptions every_readable_column() {
  TableOptions o;
  o.columns = {"b",   "i8",  "i16", "i32", "i64", "u8", "u16", "u32",
               "u64", "f32", "f64", "s",   "bin", "nf", "ns"};
  o.categorical = {"s", "ns"};
  o.missing = ferry::Missing::nan;
  return o;
}

TEST_F(ParquetRemote, EveryValueOverHttpIsTheLocalFilesValue) {
  for (const std::string name :
       {"all_zstd_dict_v2.parquet", "all_snappy_plain_v1.parquet", "all_none_delta_v2.parquet",
        "all_zstd_encodings_v1.parquet", "long_footer.parquet"}) {
    expect_same_as_local({local(name)}, {url(name)}, every_readable_column(), name);
  }
  // Three files, one sequence of rows.
  std::vector<fs::path> locals, urls;
  for (const std::string name : {"part0.parquet", "part1.parquet", "part2.parquet"}) {
    locals.push_back(local(name));
    urls.emplace_back(url(name));
  }
  expect_same_as_local(locals, urls, every_readable_column(), "part0..2");
  // All 50 columns of the wide file, its text column ragged.
  expect_same_as_local({local("wide.parquet")}, {url("wide.parquet")}, {}, "wide.parquet");
}

TEST_F(ParquetRemote, AFooterLongerThanTheFirstReadComesInASecondRange) {
  const std::string name = "long_footer.parquet";
  const auto file = bytes_of(local(name));
  std::uint32_t len = 0;
  std::memcpy(&len, file.data() + file.size() - 8, 4);
  ASSERT_GT(len + 8, kTail);  // write_tables.js wrote a row group per row
  const int before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"i32"};
  const auto ds = ParquetDataset::open({url(name)}, o);
  EXPECT_EQ(ds->num_row_groups(), 50U);
  // The last 64 KiB, then the footer's first bytes that they lacked: two requests at open.
  EXPECT_EQ(settled<int>([&] { return nginx_->requests(name); }, before + 2), before + 2);
}

TEST_F(ParquetRemote, TwoOfFiftyColumnsFetchTheFooterAndTheirChunksAlone) {
  const std::string name = "wide.parquet";
  const auto sizes = wide_sizes();
  ASSERT_EQ(sizes.size(), 51U);  // "file" and 50 columns
  const std::uint64_t file_size = sizes.at("file")[0];
  ASSERT_EQ(sizes.at("c05").size(), 4U);  // 4 row groups
  std::uint64_t c05 = 0, text = 0;
  for (const std::uint64_t s : sizes.at("c05")) c05 += s;
  for (const std::uint64_t s : sizes.at("text")) text += s;

  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c05", "text"};
  const auto ds = ParquetDataset::open({url(name)}, o);
  // At open: the footer (in the last 64 KiB) and the text column's chunks (its lengths), kept
  // for the reads.
  const std::uint64_t at_open = kTail + text;
  EXPECT_EQ(settled<std::uint64_t>([&] { return nginx_->bytes_sent(name) - before; }, at_open),
            at_open);
  expect_wide_rows(rows_of(ds, true, 2));
  // Each row group's c05 chunk once; its text chunk, kept from open, not again.
  const std::uint64_t total = at_open + c05;
  const std::uint64_t sent =
      settled<std::uint64_t>([&] { return nginx_->bytes_sent(name) - before; }, total);
  EXPECT_EQ(sent, total);
  EXPECT_EQ(nginx_->requests(name) - requests_before, 1 + 4 + 4);
  EXPECT_LT(sent * 4, file_size);
  std::cout << "[ figures  ] wide.parquet, 2 of 50 columns (c05, text) over HTTP: " << sent
            << " bytes sent of a " << file_size << "-byte file (footer read " << kTail
            << ", chunks c05 " << c05 << ", text " << text << " once, at open)\n";
  // A second epoch: the row groups still decoded in the cache, nothing fetched.
  expect_wide_rows(rows_of(ds, false, 1));
  EXPECT_EQ(nginx_->bytes_sent(name) - before, total);
}

TEST_F(ParquetRemote, AdjacentChunksOfARowGroupComeInOneRange) {
  const std::string name = "wide.parquet";
  const auto sizes = wide_sizes();
  std::uint64_t chunks = 0;
  for (const std::string c : {"c10", "c11", "c12"}) {
    for (const std::uint64_t s : sizes.at(c)) chunks += s;
  }
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c12", "c10", "c11"};  // the order asked is not the file's
  const auto ds = ParquetDataset::open({url(name)}, o);
  const Rows rows = rows_of(ds, false, 1);
  ASSERT_EQ(rows.size(), 2000U);
  for (const auto& [r, values] : rows) {
    for (std::size_t f = 0; f < 3; ++f) {
      double v = 0;
      std::memcpy(&v, values[f].data(), 8);
      ASSERT_EQ(
          v, static_cast<double>(r) * 50 + (f == 0 ? 12 : 10 + static_cast<double>(f - 1)) + 0.5);
    }
  }
  const int requests = 1 + 4;  // the footer's, then one a row group
  EXPECT_EQ(settled<int>([&] { return nginx_->requests(name) - requests_before; }, requests),
            requests);
  EXPECT_EQ(nginx_->bytes_sent(name) - before, kTail + chunks);
}

TEST_F(ParquetRemote, FileUrlsAreReadByRangesToo) {
  const std::string wide = "file://" + local("wide.parquet").string();
  TableOptions o;
  o.columns = {"c05", "text"};
  expect_same_as_local({local("wide.parquet")}, {wide}, o, wide);
  expect_same_as_local({local("all_gzip_dict_v1.parquet")},
                       {"file://" + local("all_gzip_dict_v1.parquet").string()},
                       every_readable_column(), "file:// all_gzip_dict_v1.parquet");
  const auto file = bytes_of(local("all_gzip_dict_v1.parquet"));
  write_bytes(dir_ / "cut.parquet", {file.begin(), file.end() - 100});
  const std::string cut = "file://" + (dir_ / "cut.parquet").string();
  expect_error<DataError>([&] { (void)ParquetDataset::open({cut}, every_readable_column()); },
                          {"ParquetDataset: " + cut, "footer"});
}

TEST_F(ParquetRemote, ListColumnsComeByRangesAsTheyReadLocally) {
  // write_lists.js's files (lists, fixed-size lists, nested ones) beside the others.
  const fs::path lists = dir_ / "www" / "lists";
  const std::string failed = ferry::testing::run_table_writer(
      FERRY_SOURCE_DIR, "write_lists.js", {"parquet-wasm", "apache-arrow"}, {lists.string()});
  ASSERT_TRUE(failed.empty()) << failed;
  TableOptions o;
  o.columns = {"li", "lf", "ll", "f4", "a2", "id"};
  for (const std::string name : {"lists_dict_v1.parquet", "lists_plain_v2.parquet"}) {
    expect_same_as_local({lists / name}, {url("lists/" + name)}, o, name);
  }
}

TEST_F(ParquetRemote, ATruncatedOrGarbledFileIsADataErrorNamingTheUrl) {
  const auto file = bytes_of(local("all_none_plain_v1.parquet"));
  write_bytes(local("cut.parquet"), {file.begin(), file.end() - 100});
  expect_error<DataError>(
      [&] { (void)ParquetDataset::open({url("cut.parquet")}, every_readable_column()); },
      {"ParquetDataset: " + url("cut.parquet"), "footer"});
  // Its data overwritten, its footer intact: the pages' headers are garbage.
  std::uint32_t len = 0;
  std::memcpy(&len, file.data() + file.size() - 8, 4);
  auto garbled = file;
  for (std::size_t i = 4; i < file.size() - 8 - len; ++i) garbled[i] = static_cast<char>(0xA7);
  write_bytes(local("garbled.parquet"), garbled);
  TableOptions o;
  o.columns = {"i32", "f64"};
  const auto ds = ParquetDataset::open({url("garbled.parquet")}, o);
  ferry::Loader loader(ds, loader_options(false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ParquetDataset: " + url("garbled.parquet"), "row group 0", "column \"i32\""});
}

TEST_F(ParquetRemote, AFileThatChangesBetweenRangesIsADataErrorNamingTheUrl) {
  const auto file = bytes_of(local("all_none_plain_v1.parquet"));
  write_bytes(local("changing.parquet"), file);
  TableOptions o;
  o.columns = {"i32"};
  const auto ds = ParquetDataset::open({url("changing.parquet")}, o);
  auto longer = file;
  longer.insert(longer.begin() + 4, 16, '\0');
  write_bytes(local("changing.parquet"), longer);
  ferry::Loader loader(ds, loader_options(false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ParquetDataset: " + url("changing.parquet"), "changed on the server"});
}

TEST_F(ParquetRemote, AServerThatIgnoresRangeIsReadUpToTheBytesAsked) {
  // max_ranges 0: nginx answers every ranged GET with the whole file (HTTP 200).
  Nginx whole(dir_ / "nginx_whole", dir_ / "www", "max_ranges 0;");
  ASSERT_TRUE(whole.up()) << whole.error_log();
  const std::string name = "all_zstd_dict_v1.parquet";
  expect_same_as_local({local(name)}, {whole.url(name)}, every_readable_column(), name);
  // Each answer was the whole file's (status 200), read up to the bytes asked.
  const std::string log = ferry::testing::read_text(dir_ / "nginx_whole/access.log");
  int whole_answers = 0;
  for (const std::string& line : ferry::testing::lines_of(log)) {
    if (line.find("\"GET /" + name + " ") == std::string::npos) continue;
    EXPECT_NE(line.find("\" 200 "), std::string::npos) << line;
    ++whole_answers;
  }
  EXPECT_GT(whole_answers, 0);
}

TEST_F(ParquetRemote, S3UrlsGoToTheEndpointPathStyleSigned) {
  // nginx as the endpoint: s3://bucket/key is <endpoint>/bucket/key, signed (SigV4) with the
  // key given (nginx ignores the signature).
  fs::create_directories(local("bucket"));
  fs::copy_file(local("all_snappy_dict_v2.parquet"), local("bucket/t.parquet"),
                fs::copy_options::overwrite_existing);
  struct Env {
    const char* name;
    const char* before;
  };
  std::vector<Env> saved;
  const auto set = [&](const char* name, const std::string& value) {
    const char* v = std::getenv(name);
    saved.push_back({name, v != nullptr ? strdup(v) : nullptr});
    ::setenv(name, value.c_str(), 1);
  };
  set("AWS_ENDPOINT_URL", "http://127.0.0.1:" + std::to_string(nginx_->port()) + "/");
  set("AWS_ACCESS_KEY_ID", "ferrytest");
  set("AWS_SECRET_ACCESS_KEY", "secret");
  set("AWS_REGION", "eu-west-1");
  const int before = nginx_->requests("bucket/t.parquet");
  expect_same_as_local({local("all_snappy_dict_v2.parquet")}, {"s3://bucket/t.parquet"},
                       every_readable_column(), "s3://bucket/t.parquet");
  EXPECT_GT(nginx_->requests("bucket/t.parquet"), before + 1);  // the footer and the chunks
  for (const Env& e : saved) {
    if (e.before != nullptr) {
      ::setenv(e.name, e.before, 1);
      std::free(const_cast<char*>(e.before));
    } else {
      ::unsetenv(e.name);
    }
  }
}

TEST_F(ParquetRemote, TheNextRowGroupsInTheLoadersOrderAreFetchedAhead) {
  const std::string name = "wide.parquet";
  const auto sizes = wide_sizes().at("c07");
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c07"};
  const auto ds = ParquetDataset::open({url(name)}, o);
  {
    ferry::LoaderOptions lo = loader_options(false, 1);
    lo.batch_size = 1;
    ferry::Loader loader(ds, lo);
    for (const ferry::Batch& b : loader.epoch(0)) {
      ASSERT_EQ(b.indices()[0], 0U);
      break;  // row 0 alone read: row group 0 (rows 0 to 499)
    }
  }
  // The footer, row group 0, and the two row groups after it in the loader's order, fetched
  // ahead though no row of theirs was read; each once.
  const int want = 1 + 1 + 2;
  EXPECT_EQ(settled<int>([&] { return nginx_->requests(name) - requests_before; }, want), want);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(nginx_->requests(name) - requests_before, want);  // and no more
  EXPECT_EQ(nginx_->bytes_sent(name) - before, kTail + sizes[0] + sizes[1] + sizes[2]);
}

}  // namespace
