// ArrowDataset over URLs, read by ranges: nginx started here on 127.0.0.1 serves the Arrow files
// tests/table/write_arrow.js writes (apache-arrow, from npm), and every row read through it is
// compared, byte for byte, with the same file read locally (arrow_dataset_test checks those
// row by row); the wide files' values are checked here against what the writer wrote. nginx's
// access log counts the bytes sent: reading 2 of a file's 50 columns fetches the file's tail,
// each record batch's metadata and those columns' buffers, nothing else. Skips (saying why)
// where nginx, node or apache-arrow are missing.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
using ferry::ArrowDataset;
using ferry::DataError;
using ferry::TableOptions;
using ferry::testing::expect_error;
using ferry::testing::Nginx;
using ferry::testing::serve_written_tables;
using ferry::testing::settled;

constexpr std::uint64_t kTail = 64 << 10;  // what open() reads first of a URL
constexpr std::uint64_t kHead = 4 << 10;   // a stream message's first read

std::vector<char> bytes_of(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const fs::path& p, const std::vector<char>& b) {
  std::ofstream(p, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

// One record batch of a wide file, as wide_arrow.txt lists it: where its message and its body
// start, and each column's buffers' [first, end) in the file.
struct WideBatch {
  std::uint64_t message = 0;
  std::uint64_t body = 0;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> columns;
};

class ArrowRemote : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry_arrow_remote_" + std::to_string(::getpid()));
    skip_ =
        serve_written_tables(FERRY_SOURCE_DIR, "write_arrow.js", {"apache-arrow"}, dir_, nginx_);
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

  static std::vector<WideBatch> wide_batches(const std::string& file) {
    std::vector<WideBatch> out;
    const std::vector<char> text = bytes_of(local("wide_arrow.txt"));
    std::istringstream in(std::string(text.data(), text.size()));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string name;
      WideBatch b;
      words >> name >> b.message >> b.body;
      if (name != file) continue;
      std::string column;
      std::uint64_t first = 0, end = 0;
      while (words >> column >> first >> end) b.columns[column] = {first, end};
      out.push_back(std::move(b));
    }
    return out;
  }

  static std::string skip_;
  static fs::path dir_;
  static inline Nginx* nginx_ = nullptr;
};
std::string ArrowRemote::skip_;
fs::path ArrowRemote::dir_;

ferry::LoaderOptions loader_options(bool shuffle, int workers) {
  return ferry::testing::table_loader_options(7, shuffle, workers, 11);
}

// Every sample an epoch delivers: its fields' bytes (a ragged field's `length` values alone),
// by sample index. A sample delivered twice fails.
using Rows = std::map<std::uint64_t, std::vector<std::string>>;
Rows rows_of(const std::shared_ptr<ArrowDataset>& ds, bool shuffle, int workers) {
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
          std::size_t inner = ferry::dtype_size(f.dtype);
          for (std::size_t k = 1; k < f.shape.size(); ++k) {
            inner *= static_cast<std::size_t>(f.shape[k]);
          }
          n = static_cast<std::size_t>(b.lengths(f.name).data<std::int64_t>()[j]) * inner;
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
  const auto near = ArrowDataset::open(locals, o);
  const auto far = ArrowDataset::open(urls, o);
  ASSERT_EQ(far->size(), near->size());
  ASSERT_EQ(far->num_record_batches(), near->num_record_batches());
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
  const Rows got = rows_of(far, true, 3);
  EXPECT_EQ(far->network_wait_seconds() > 0, !urls[0].string().starts_with("file://"));
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

TableOptions every_readable_column() {
  TableOptions o;
  o.columns = {"b",   "i8",   "i16", "i32",  "i64", "u8",   "u16",  "u32", "u64", "f16",
               "f32", "f64",  "fsl", "fsl2", "lst", "llst", "lfsl", "lb",  "s",   "ls",
               "bin", "lbin", "d",   "d8",   "nf",  "nf32", "nf16", "ns",  "nd"};
  o.categorical = {"s", "ns"};
  o.missing = ferry::Missing::nan;
  return o;
}

// Rows 0..1999 of c05 and text, as write_arrow.js wrote them.
void expect_wide_values(const Rows& rows) {
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

TEST_F(ArrowRemote, EveryValueOverHttpIsTheLocalFilesValue) {
  for (const std::string name : {"all.arrow", "all_file.arrow", "all_lz4.arrow", "all_zstd.arrow",
                                 "all_file_lz4.arrow", "dict_replaced.arrow"}) {
    expect_same_as_local({local(name)}, {url(name)}, every_readable_column(), name);
  }
  for (const std::string name : {"dict_delta.arrow", "dict_delta_file.arrow"}) {
    expect_same_as_local({local(name)}, {url(name)}, {}, name);
  }
  TableOptions nested;
  nested.columns = {"a2", "a3", "nfsl"};
  nested.missing = ferry::Missing::nan;
  for (const std::string name : {"nested.arrow", "nested_file.arrow"}) {
    expect_same_as_local({local(name)}, {url(name)}, nested, name);
  }
  std::vector<fs::path> locals, urls;
  for (const std::string name : {"part0.arrow", "part1.arrow", "part2.arrow"}) {
    locals.push_back(local(name));
    urls.emplace_back(url(name));
  }
  expect_same_as_local(locals, urls, every_readable_column(), "part0..2");
  for (const std::string name : {"wide.arrow", "wide_file.arrow", "wide_lz4.arrow"}) {
    expect_same_as_local({local(name)}, {url(name)}, {}, name);
  }
}

TEST_F(ArrowRemote, TwoOfFiftyColumnsFetchTheFooterMetadataAndTheirBuffersAlone) {
  const std::string name = "wide_file.arrow";
  const auto batches = wide_batches(name);
  ASSERT_EQ(batches.size(), 4U);
  const std::uint64_t file_size = fs::file_size(local(name));
  std::uint64_t metadata = 0, buffers = 0, offsets = 0;
  for (const WideBatch& b : batches) {
    metadata += b.body - b.message;
    const auto [c05, c05_end] = b.columns.at("c05");
    const auto [text, text_end] = b.columns.at("text");
    ASSERT_GT(text, c05_end + (8 << 10));  // two ranges: 43 columns lie between them
    buffers += (c05_end - c05) + (text_end - text);
    const auto [first, end] = b.columns.at("text.offsets");
    ASSERT_LT(end - first, (text_end - text) / 2);
    offsets += end - first;
  }
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c05", "text"};
  const auto ds = ArrowDataset::open({url(name)}, o);
  // open(): the tail (the footer), each record batch's metadata, and of each batch the text
  // column's offsets alone (its lengths), not its values nor c05's.
  const std::uint64_t opened = kTail + metadata + offsets;
  EXPECT_EQ(settled<std::uint64_t>([&] { return nginx_->bytes_sent(name) - before; }, opened),
            opened);
  EXPECT_EQ(nginx_->requests(name) - requests_before, 1 + 4 + 4);
  EXPECT_EQ(ds->batches_decoded(), 0U);
  const Rows rows = rows_of(ds, true, 2);
  expect_wide_values(rows);
  // Then the reads: each batch's two ranges once.
  const std::uint64_t total = opened + buffers;
  const std::uint64_t sent =
      settled<std::uint64_t>([&] { return nginx_->bytes_sent(name) - before; }, total);
  EXPECT_EQ(sent, total);
  EXPECT_EQ(nginx_->requests(name) - requests_before, 1 + 4 + 4 + 4 * 2);
  EXPECT_EQ(ds->batches_decoded(), 4U);
  EXPECT_LT(sent * 4, file_size);
  std::cout << "[ figures  ] " << name << ", 2 of 50 columns (c05, text) over HTTP: " << sent
            << " bytes sent of a " << file_size << "-byte file (tail " << kTail << ", metadata "
            << metadata << ", the text column's offsets at open " << offsets << ", buffers "
            << buffers << ")\n";
}

TEST_F(ArrowRemote, TheStreamFormatIsReadMessageByMessage) {
  const std::string name = "wide.arrow";
  const auto batches = wide_batches(name);
  ASSERT_EQ(batches.size(), 4U);
  const std::uint64_t file_size = fs::file_size(local(name));
  // The tail; the first 4 KiB (the schema); then a read from each message whose head and
  // metadata the last read did not hold: after a message of at most 64 KiB (the schema) twice
  // as long as it or the last read, after a larger one 4 KiB; the text column's offsets (its
  // lengths); then each batch's two ranges.
  const auto next_ahead = [](std::uint64_t length, std::uint64_t ahead) {
    return length <= (64U << 10) ? std::min(2 * std::max(ahead, length), std::uint64_t{256} << 10)
                                 : kHead;
  };
  std::uint64_t want = kTail + kHead;
  int requests = 2;
  std::uint64_t window_end = kHead;
  std::uint64_t ahead = next_ahead(batches[0].message, kHead);
  for (std::size_t k = 0; k < batches.size(); ++k) {
    const WideBatch& b = batches[k];
    if (b.body > window_end) {
      const std::uint64_t n = std::min(ahead, file_size - b.message);
      want += n;
      window_end = b.message + n;
      ++requests;
    }
    const std::uint64_t end = k + 1 < batches.size() ? batches[k + 1].message : file_size - 8;
    ahead = next_ahead(end - b.message, ahead);
    want += b.columns.at("text.offsets").second - b.columns.at("text.offsets").first;
    ++requests;
    for (const std::string c : {"c05", "text"}) {
      want += b.columns.at(c).second - b.columns.at(c).first;
      ++requests;
    }
  }
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c05", "text"};
  const auto ds = ArrowDataset::open({url(name)}, o);
  expect_wide_values(rows_of(ds, true, 2));
  const std::uint64_t sent =
      settled<std::uint64_t>([&] { return nginx_->bytes_sent(name) - before; }, want);
  EXPECT_EQ(sent, want);
  EXPECT_EQ(nginx_->requests(name) - requests_before, requests);
  EXPECT_LT(sent * 4, file_size);
  std::cout << "[ figures  ] " << name << " (stream), 2 of 50 columns over HTTP: " << sent
            << " bytes sent of a " << file_size << "-byte file in " << requests << " requests\n";

  // Compressed: decompressed once per record batch, and far from the whole file either way.
  const std::string lz4 = "wide_lz4.arrow";
  const std::uint64_t lz4_before = nginx_->bytes_sent(lz4);
  const auto packed = ArrowDataset::open({url(lz4)}, o);
  expect_wide_values(rows_of(packed, true, 2));
  EXPECT_EQ(packed->batches_decoded(), 4U);
  EXPECT_LT((nginx_->bytes_sent(lz4) - lz4_before) * 3, fs::file_size(local(lz4)));
}

TEST_F(ArrowRemote, AStreamOfSmallMessagesIsIndexedInAFewReads) {
  // 125 record batches of 2 rows: each message is a few KiB. Reads from the stream's start double
  // while the messages are small (4, 8 or more, 16 or more, ... KiB), so the open takes a few
  // GETs besides the tail, not one a message, and reads no byte twice but where a read reaches
  // the tail.
  const std::string name = "small_batches.arrow";
  const std::uint64_t file_size = fs::file_size(local(name));
  ASSERT_GT(file_size, kTail + 32 * kHead);  // more than the tail holds
  expect_same_as_local({local(name)}, {url(name)}, every_readable_column(), name);
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"i32", "f64"};  // nothing to scan at open
  const auto ds = ArrowDataset::open({url(name)}, o);
  EXPECT_EQ(ds->num_record_batches(), 125U);
  EXPECT_EQ(ds->size(), 250U);
  // The tail, then 4 + 8 + 16 + ... KiB from the start until they reach it.
  int reads = 1;
  std::uint64_t covered = 0;
  for (std::uint64_t n = kHead; covered < file_size - kTail; n *= 2) {
    covered += n;
    ++reads;
  }
  EXPECT_LE(settled<int>([&] { return nginx_->requests(name) - requests_before; }, reads),
            reads + 1);
  EXPECT_LE(nginx_->bytes_sent(name) - before, file_size + kTail);
  std::cout << "[ figures  ] " << name << " (stream, 125 record batches, " << file_size
            << " bytes) opened over HTTP in " << nginx_->requests(name) - requests_before
            << " requests\n";
}

TEST_F(ArrowRemote, TheNextRecordBatchesInTheLoadersOrderAreFetchedAhead) {
  const std::string name = "wide_file.arrow";
  const auto batches = wide_batches(name);
  std::uint64_t metadata = 0;
  for (const WideBatch& b : batches) metadata += b.body - b.message;
  const auto c07 = [&](std::size_t b) {
    return batches[b].columns.at("c07").second - batches[b].columns.at("c07").first;
  };
  const std::uint64_t before = nginx_->bytes_sent(name);
  const int requests_before = nginx_->requests(name);
  TableOptions o;
  o.columns = {"c07"};
  const auto ds = ArrowDataset::open({url(name)}, o);
  {
    ferry::LoaderOptions lo = loader_options(false, 1);
    lo.batch_size = 1;
    ferry::Loader loader(ds, lo);
    for (const ferry::Batch& b : loader.epoch(0)) {
      ASSERT_EQ(b.indices()[0], 0U);
      break;  // row 0 alone read: record batch 0 (rows 0 to 499)
    }
  }
  // The tail, the 4 batches' metadata, record batch 0, and the two after it in the loader's
  // order, read ahead though no row of theirs was read; each once.
  const int want = 1 + 4 + 1 + 2;
  EXPECT_EQ(settled<int>([&] { return nginx_->requests(name) - requests_before; }, want), want);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(nginx_->requests(name) - requests_before, want);  // and no more
  EXPECT_EQ(nginx_->bytes_sent(name) - before, kTail + metadata + c07(0) + c07(1) + c07(2));
  EXPECT_TRUE(ds->wants_read_order());
  // A second epoch in order reads all 4 batches, 0 to 2 from the cache: batch 3 alone fetched.
  ferry::Loader loader(ds, loader_options(false, 1));
  std::size_t rows = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j, ++rows) {
      double v = 0;
      std::memcpy(&v, static_cast<const char*>(b["c07"].data()) + 8 * j, 8);
      ASSERT_EQ(v, static_cast<double>(b.indices()[j]) * 50 + 7 + 0.5);
    }
  }
  EXPECT_EQ(rows, 2000U);
  EXPECT_EQ(settled<int>([&] { return nginx_->requests(name) - requests_before; }, want + 1),
            want + 1);
  EXPECT_EQ(ds->batches_decoded(), 4U);
}

TEST_F(ArrowRemote, FileUrlsAreReadByRangesToo) {
  for (const std::string name : {"all_file.arrow", "all_zstd.arrow"}) {
    expect_same_as_local({local(name)}, {"file://" + local(name).string()}, every_readable_column(),
                         "file:// " + name);
  }
}

TEST_F(ArrowRemote, TruncatedFilesAreDataErrorsNamingTheUrlAndThePlace) {
  TableOptions o;
  o.columns = {"i32"};
  const auto file = bytes_of(local("all_file.arrow"));
  write_bytes(local("cut_file.arrow"), {file.begin(), file.end() - 100});
  expect_error<DataError>([&] { (void)ArrowDataset::open({url("cut_file.arrow")}, o); },
                          {"ArrowDataset: " + url("cut_file.arrow"), "footer"});
  const auto stream = bytes_of(local("all.arrow"));
  write_bytes(local("cut.arrow"),
              {stream.begin(), stream.begin() + static_cast<std::ptrdiff_t>(stream.size() / 2)});
  expect_error<DataError>([&] { (void)ArrowDataset::open({url("cut.arrow")}, o); },
                          {"ArrowDataset: " + url("cut.arrow"), "message", "truncated"});
  // A buffer that points past its body: the batch's read names the record batch.
  TableOptions c;
  c.columns = {"c05"};
  write_bytes(local("empty.arrow"), {});
  expect_error<DataError>([&] { (void)ArrowDataset::open({url("empty.arrow")}, c); },
                          {url("empty.arrow")});
}

TEST_F(ArrowRemote, AFileThatChangesBetweenRangesIsADataErrorNamingTheUrl) {
  const auto file = bytes_of(local("wide_file.arrow"));
  write_bytes(local("changing.arrow"), file);
  TableOptions o;
  o.columns = {"c07"};  // no ragged column: nothing but metadata is read at open
  const auto ds = ArrowDataset::open({url("changing.arrow")}, o);
  auto longer = file;
  longer.insert(longer.end() - 10, 16, '\0');
  write_bytes(local("changing.arrow"), longer);
  ferry::Loader loader(ds, loader_options(false, 1));
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"ArrowDataset: " + url("changing.arrow") + ": record batch 0 (rows 0 to 499): cannot read",
       "changed on the server"});
}

TEST_F(ArrowRemote, AServerThatIgnoresRangeIsReadUpToTheBytesAsked) {
  Nginx whole(dir_ / "nginx_whole", dir_ / "www", "max_ranges 0;");
  ASSERT_TRUE(whole.up()) << whole.error_log();
  for (const std::string name : {"all_file_lz4.arrow", "all.arrow"}) {
    expect_same_as_local({local(name)}, {whole.url(name)}, every_readable_column(), name);
  }
}

TEST_F(ArrowRemote, S3UrlsGoToTheEndpointPathStyleSigned) {
  // nginx as the endpoint: s3://bucket/key is <endpoint>/bucket/key, signed (SigV4) with the
  // key given (nginx ignores the signature).
  fs::create_directories(local("bucket"));
  fs::copy_file(local("all_file_lz4.arrow"), local("bucket/t.arrow"),
                fs::copy_options::overwrite_existing);
  struct Env {
    const char* name;
    char* before;
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
  const int before = nginx_->requests("bucket/t.arrow");
  expect_same_as_local({local("all_file_lz4.arrow")}, {"s3://bucket/t.arrow"},
                       every_readable_column(), "s3://bucket/t.arrow");
  EXPECT_GT(nginx_->requests("bucket/t.arrow"), before + 1);  // the tail and the batches
  for (const Env& e : saved) {
    if (e.before != nullptr) {
      ::setenv(e.name, e.before, 1);
      std::free(e.before);
    } else {
      ::unsetenv(e.name);
    }
  }
}

}  // namespace
