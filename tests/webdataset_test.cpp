#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "datasets/webdataset/webdataset_internal.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "pipeline/staging.hpp"
#include "source_dir.hpp"
#include "webdataset/tar_bytes.hpp"
// The packer of samples/make_shards, tested here.
#include "../samples/make_shards/pack.hpp"

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::WebDataset;
using ferry::WebDatasetOptions;
using ferry::testing::expect_error;
using ferry::testing::tar_header;
using ferry::testing::tar_member;
using ferry::testing::within;
using namespace std::chrono_literals;

namespace {

bool have(const char* tool) {
  const std::string cmd = std::string("command -v ") + tool + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

// A fresh folder per test, removed after it.
class WebDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("ferry-wds-") + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The fixtures of tests/webdataset/make_fixtures.py, written by Python's tarfile.
  bool python_fixtures() {
    if (!have("python3")) return false;
    const fs::path script =
        fs::path(FERRY_SOURCE_DIR) / "tests" / "webdataset" / "make_fixtures.py";
    const std::string cmd = "python3 " + script.string() + " " + dir_.string();
    return std::system(cmd.c_str()) == 0;
  }

  fs::path write(const std::string& name, const std::string& bytes) const {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes(static_cast<std::size_t>(fs::file_size(p)), '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }

  fs::path dir_;
};

ferry::LoaderOptions cpu_options(ferry::ErrorPolicy policy = ferry::ErrorPolicy::raise) {
  ferry::LoaderOptions o;
  o.batch_size = 1;
  o.workers = 1;
  o.prefetch = 2;
  o.device = ferry::Device::cpu();
  o.pin_memory = false;
  o.ragged = ferry::RaggedBatch::pack;
  o.on_error = policy;
  return o;
}

template <class T>
std::vector<T> values(const ferry::Tensor& t) {
  const auto* p = static_cast<const T*>(t.data());
  return {p, p + t.numel()};
}

std::string bytes_of(const ferry::Tensor& t) {
  return {static_cast<const char*>(t.data()), t.nbytes()};
}

}  // namespace

TEST_F(WebDatasetTest, PythonTarfileShardsInEveryFormatReadAsWritten) {
  if (!python_fixtures()) GTEST_SKIP() << "python3 is not installed";
  WebDatasetOptions options;
  options.image.height = 4;
  options.image.width = 5;
  options.image.channels = 1;
  options.image.geometry = ferry::Geometry::resize;
  const auto ds =
      WebDataset::open({dir_ / "gnu.tar", dir_ / "pax.tar", dir_ / "ustar.tar"}, options);
  ASSERT_EQ(ds->size(), 12U);
  const auto starts = ds->shard_starts();
  EXPECT_EQ(std::vector<std::size_t>(starts.begin(), starts.end()),
            (std::vector<std::size_t>{0, 4, 8, 12}));
  const std::string long_dir = std::string(120, 'd') + "/";
  EXPECT_EQ(ds->key(0), long_dir + "s0000");
  EXPECT_EQ(ds->key(11), long_dir + "s0011");
  EXPECT_EQ(ds->shard_of(5), 1U);
  const auto fields = ds->fields();
  ASSERT_EQ(fields.size(), 4U);
  EXPECT_EQ(fields[0], (ferry::FieldSpec{"cls", ferry::DType::i64, {}}));
  EXPECT_EQ(fields[1], (ferry::FieldSpec{"npy", ferry::DType::i32, {ferry::ragged}}));
  EXPECT_EQ(fields[2], ferry::image_field(options.image, "png"));
  EXPECT_EQ(fields[3], (ferry::FieldSpec{"txt", ferry::DType::u8, {ferry::ragged}}));

  // The same PNG bytes decode to ImageFolder's pixels for the same sample.
  const auto folder = ferry::ImageFolder::open(dir_ / "folder", options.image);
  ASSERT_EQ(folder->size(), 12U);
  ferry::Loader shards(ds, cpu_options());
  ferry::Loader loose(folder, cpu_options());
  auto loose_epoch = loose.epoch(0);
  auto it = loose_epoch.begin();
  std::size_t i = 0;
  for (const ferry::Batch& b : shards.epoch(0)) {
    ASSERT_EQ(b.indices()[0], i);
    EXPECT_EQ(values<std::int64_t>(b["cls"]), std::vector<std::int64_t>{std::int64_t(i % 4)});
    std::vector<std::int32_t> npy;
    for (std::size_t v = i; v < i + 1 + i % 4; ++v) npy.push_back(static_cast<std::int32_t>(v));
    EXPECT_EQ(values<std::int32_t>(b["npy"]), npy) << i;
    std::string txt;
    for (std::size_t r = 0; r < 1 + i % 3; ++r) {
      txt += "text of sample ";
      txt += std::to_string(i);
    }
    EXPECT_EQ(bytes_of(b["txt"]), txt) << i;
    EXPECT_EQ(bytes_of(b["png"]), bytes_of((*it)["image"])) << i;
    ++it;
    ++i;
  }
  EXPECT_EQ(i, 12U);
}

TEST_F(WebDatasetTest, GnuTarShardsInGnuAndPosixFormats) {
  if (!have("tar")) GTEST_SKIP() << "GNU tar is not installed";
  const fs::path src = dir_ / "src";
  const std::string long_name = std::string(110, 'n');
  fs::create_directories(src / "part");
  std::ofstream(src / "part" / (long_name + ".cls")) << "7";
  std::ofstream(src / "part" / (long_name + ".bin"), std::ios::binary) << std::string("\0\1\2", 3);
  std::ofstream(src / "part" / "z.cls") << " -3 \n";
  std::ofstream(src / "part" / "z.bin") << "zz";
  for (const char* format : {"gnu", "posix"}) {
    const fs::path shard = dir_ / (std::string(format) + ".tar");
    const std::string cmd = "tar --format=" + std::string(format) + " --sort=name -C " +
                            src.string() + " -cf " + shard.string() + " part";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    const auto ds = WebDataset::open({shard});
    ASSERT_EQ(ds->size(), 2U) << format;
    EXPECT_EQ(ds->key(0), "part/" + long_name);
    EXPECT_EQ(ds->key(1), "part/z");
    ferry::Loader loader(ds, cpu_options());
    std::vector<std::string> got;
    for (const ferry::Batch& b : loader.epoch(0)) {
      got.push_back(std::to_string(values<std::int64_t>(b["cls"])[0]) + ":" + bytes_of(b["bin"]));
    }
    EXPECT_EQ(got, (std::vector<std::string>{"7:" + std::string("\0\1\2", 3), "-3:zz"}));
  }
}

TEST_F(WebDatasetTest, CutShortShardsNameShardAndByte) {
  const std::string whole = tar_member("k.txt", std::string(1000, 'x')) + std::string(1024, '\0');
  const fs::path mid_data = write("mid.tar", whole.substr(0, 700));
  expect_error<DataError>([&] { WebDataset::open({mid_data}); },
                          {"WebDataset", mid_data.string(), "byte 0", "'k.txt'", "runs past"});
  const fs::path mid_header = write("hdr.tar", whole.substr(0, 1536 + 100));
  expect_error<DataError>([&] { WebDataset::open({mid_header}); },
                          {mid_header.string(), "byte 1536", "cut short inside a header"});
  const fs::path no_end = write("noend.tar", whole.substr(0, 1536));
  expect_error<DataError>([&] { WebDataset::open({no_end}); },
                          {no_end.string(), "byte 1536", "end-of-archive"});
  const fs::path empty = write("empty.tar", "");
  expect_error<DataError>([&] { WebDataset::open({empty}); }, {empty.string(), "byte 0"});
}

TEST_F(WebDatasetTest, HostileSizesAndCorruptHeadersAreRefused) {
  const std::string end(1024, '\0');
  // An octal size far beyond the file, a huge base-256 one, a negative base-256 one, garbage.
  const fs::path octal = write("octal.tar", tar_header("a.txt", "77777777777") + end);
  expect_error<DataError>([&] { WebDataset::open({octal}); },
                          {octal.string(), "byte 0", "8589934591 bytes", "runs past"});
  std::string b256(12, '\xff');
  b256[0] = '\x80';
  const fs::path big = write("b256.tar", tar_header("a.txt", b256) + end);
  expect_error<DataError>([&] { WebDataset::open({big}); }, {big.string(), "beyond 2^64"});
  std::fill(b256.begin() + 1, b256.begin() + 4, '\0');  // 2^64 - 1: fits, but not the file
  const fs::path huge = write("huge.tar", tar_header("a.txt", b256) + end);
  expect_error<DataError>([&] { WebDataset::open({huge}); },
                          {huge.string(), "18446744073709551615 bytes", "runs past"});
  b256.assign(12, '\xff');
  const fs::path neg = write("neg.tar", tar_header("a.txt", b256) + end);
  expect_error<DataError>([&] { WebDataset::open({neg}); }, {neg.string(), "byte 124", "negative"});
  const fs::path junk = write("junk.tar", tar_header("a.txt", "12x") + end);
  expect_error<DataError>([&] { WebDataset::open({junk}); }, {junk.string(), "not octal"});
  std::string bad_sum = tar_member("a.txt", "abc") + end;
  bad_sum[10] = 'Q';
  const fs::path sum = write("sum.tar", bad_sum);
  expect_error<DataError>([&] { WebDataset::open({sum}); },
                          {sum.string(), "byte 0", "not a tar file", "checksum"});
  // A long name (type L) claiming more than 1 MiB.
  const fs::path longname =
      write("long.tar", tar_header("././@LongLink", "7777777", 'L') + std::string(4096, 'a') + end);
  expect_error<DataError>([&] { WebDataset::open({longname}); }, {longname.string(), "runs past"});
}

TEST_F(WebDatasetTest, DuplicateKeysNameShardAndKey) {
  if (!python_fixtures()) GTEST_SKIP() << "python3 is not installed";
  expect_error<DataError>([&] { WebDataset::open({dir_ / "dup.tar"}); },
                          {(dir_ / "dup.tar").string(), "duplicate key 'a0000'", "byte "});
  expect_error<DataError>([&] { WebDataset::open({dir_ / "apart.tar"}); },
                          {(dir_ / "apart.tar").string(), "duplicate key 'k1'", "k1.txt"});
  expect_error<DataError>([&] { WebDataset::open({dir_ / "bigpax.tar"}); },
                          {(dir_ / "bigpax.tar").string(), "99999999999 bytes", "runs past"});
  expect_error<DataError>([&] { WebDataset::open({dir_ / "f32.tar"}); },
                          {(dir_ / "f32.tar").string(), "b.npy", "i32", "f32"});
}

TEST_F(WebDatasetTest, MissingFieldRaisesOrIsSkippedAndCounted) {
  if (!python_fixtures()) GTEST_SKIP() << "python3 is not installed";
  const fs::path shard = dir_ / "missing.tar";
  const auto ds = WebDataset::open({shard});
  ASSERT_EQ(ds->size(), 4U);
  EXPECT_EQ(ds->length(2, 1), 0);
  // Each ragged field's longest sample, from the index alone (the loader sizes its slots by it).
  const std::vector<ferry::FieldSpec> fields = ds->fields();
  for (std::size_t f = 0; f < fields.size(); ++f) {
    if (!fields[f].is_ragged()) {
      EXPECT_THROW((void)ds->max_length(f), ferry::ConfigError);
      continue;
    }
    std::int64_t longest = 0;
    for (std::size_t i = 0; i < ds->size(); ++i) longest = std::max(longest, ds->length(i, f));
    EXPECT_GT(longest, 0);
    EXPECT_EQ(ds->max_length(f), longest) << fields[f].name;
  }
  {
    ferry::Loader loader(ds, cpu_options());
    expect_error<DataError>(
        [&] {
          for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
        },
        {"sample 2", shard.string(), "sample 'm2' has no 'txt' member"});
  }
  ferry::LoaderOptions o = cpu_options(ferry::ErrorPolicy::skip);
  o.batch_size = 4;
  ferry::Loader loader(ds, o);
  std::vector<std::uint64_t> seen;
  std::string txt;
  for (const ferry::Batch& b : loader.epoch(0)) {
    seen.insert(seen.end(), b.indices().begin(), b.indices().end());
    txt += bytes_of(b["txt"]);
    EXPECT_EQ(values<std::int64_t>(b["cls"]), (std::vector<std::int64_t>{0, 1, 3}));
  }
  EXPECT_EQ(seen, (std::vector<std::uint64_t>{0, 1, 3}));
  EXPECT_EQ(txt,
            "t"
            "tt"
            "tttt");
  EXPECT_EQ(loader.stats().skipped, 1U);
}

TEST_F(WebDatasetTest, ShardThatShrinksOrVanishesAfterOpen) {
  const std::string bytes = tar_member("a.txt", std::string(600, 'a')) +
                            tar_member("b.txt", std::string(700, 'b')) + std::string(1024, '\0');
  const fs::path shard = write("s.tar", bytes);
  WebDatasetOptions options;
  options.index_files = false;
  const auto ds = WebDataset::open({shard}, options);
  ASSERT_EQ(ds->size(), 2U);
  // Removed: the open descriptor still reads what was indexed.
  fs::remove(shard);
  {
    ferry::Loader loader(ds, cpu_options());
    std::string got;
    for (const ferry::Batch& b : loader.epoch(0)) got += bytes_of(b["txt"]);
    EXPECT_EQ(got, std::string(600, 'a') + std::string(700, 'b'));
  }
  // Cut short under the open descriptor.
  const auto ds2 = WebDataset::open({write("t.tar", bytes)}, options);
  ASSERT_EQ(::truncate((dir_ / "t.tar").c_str(), 1536), 0);
  ferry::Loader loader(ds2, cpu_options());
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
      },
      {"sample 1", (dir_ / "t.tar").string(), "byte 2048", "'b.txt'", "shrank"});
}

TEST_F(WebDatasetTest, SidecarIndexIsWrittenReusedAndRebuiltWhenStale) {
  std::string bytes = tar_member("a.cls", "1") + tar_member("b.cls", "2") + std::string(1024, 0);
  const fs::path shard = write("s.tar", bytes);
  const fs::path idx = dir_ / "s.tar.idx";
  EXPECT_EQ(WebDataset::open({shard})->size(), 2U);
  ASSERT_TRUE(fs::exists(idx));
  const std::string first = slurp(idx);
  EXPECT_EQ(first.substr(0, 8), "FERRYTAR");
  const auto written = fs::last_write_time(idx);
  EXPECT_EQ(WebDataset::open({shard})->size(), 2U);
  EXPECT_EQ(fs::last_write_time(idx), written);  // reused, not rewritten
  // A corrupt index is ignored and rewritten.
  std::string corrupt = first;
  corrupt[corrupt.size() / 2] ^= 0x55;
  write("s.tar.idx", corrupt);
  EXPECT_EQ(WebDataset::open({shard})->key(1), "b");
  EXPECT_EQ(slurp(idx), first);
  // The shard changed: the stale index is not used.
  bytes = tar_member("c.cls", "3") + std::string(1024, 0);
  write("s.tar", bytes);
  const auto ds = WebDataset::open({shard});
  ASSERT_EQ(ds->size(), 1U);
  EXPECT_EQ(ds->key(0), "c");
  EXPECT_NE(slurp(idx), first);
}

TEST_F(WebDatasetTest, ReadOnlyFolderBuildsTheIndexInMemorySilently) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  const fs::path shard = write("s.tar", tar_member("c.cls", "3") + std::string(1024, 0));
  const fs::path idx = dir_ / "s.tar.idx";
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  EXPECT_EQ(WebDataset::open({shard})->key(0), "c");
  fs::permissions(dir_, fs::perms::owner_all);
  EXPECT_FALSE(fs::exists(idx));
}

// The same fallback where even root cannot write the sidecar: its name is taken by a folder.
TEST_F(WebDatasetTest, AnUnwritableSidecarLeavesTheIndexInMemory) {
  const fs::path shard = write("s.tar", tar_member("c.cls", "3") + std::string(1024, 0));
  const fs::path idx = dir_ / "s.tar.idx";
  fs::create_directories(idx / "taken");
  const auto dataset = WebDataset::open({shard});
  EXPECT_EQ(dataset->key(0), "c");
  EXPECT_TRUE(fs::is_directory(idx / "taken"));
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++entries;
  EXPECT_EQ(entries, 2U) << "a temporary sidecar was left behind";
}

TEST_F(WebDatasetTest, CompressedShardsAreRefusedWithAdvice) {
  const fs::path gz = write("s.tar.gz", std::string("\x1f\x8b\x08\x00", 4) + std::string(600, 0));
  expect_error<DataError>([&] { WebDataset::open({gz}); },
                          {gz.string(), "gzip-compressed", "uncompressed"});
}

TEST_F(WebDatasetTest, BadArgumentsAndEmptyShards) {
  expect_error<ferry::ConfigError>([&] { WebDataset::open({}); }, {"WebDataset", "no shards"});
  const fs::path none = write("none.tar", tar_member("README", "x") + std::string(1024, 0));
  expect_error<DataError>([&] { WebDataset::open({none}); }, {none.string(), "no samples"});
  expect_error<DataError>([&] { WebDataset::open({dir_ / "absent.tar"}); },
                          {"absent.tar", "cannot open"});
  const auto ds =
      WebDataset::open({write("a.tar", tar_member("a.cls", "x1") + std::string(1024, 0))});
  expect_error<ferry::ConfigError>([&] { static_cast<void>(ds->key(1)); }, {"out of range"});
  ferry::Loader loader(ds, cpu_options());
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
      },
      {"'a.cls'", "\"x1\" is not a decimal integer"});
}

TEST_F(WebDatasetTest, PackedImageFolderReadsBackAsTheFolderDoes) {
  if (!python_fixtures()) GTEST_SKIP() << "python3 is not installed";
  // Two classes of the fixture PNGs.
  const fs::path root = dir_ / "folder";
  fs::create_directories(root / "d");
  for (int i = 6; i < 12; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "%04d.png", i);
    fs::rename(root / "c" / name, root / "d" / name);
  }
  WebDatasetOptions options;
  options.image.height = 3;
  options.image.width = 3;
  options.image.channels = 1;
  options.image.geometry = ferry::Geometry::resize;
  const auto folder = ferry::ImageFolder::open(root, options.image);
  make_shards::PackOptions pack;
  pack.out = dir_ / "shards";
  pack.shard_bytes = std::uint64_t{6} * 1024;
  pack.seed = 3;
  const auto shards = make_shards::pack(
      folder->size(),
      [&](std::size_t i) {
        return std::vector<make_shards::Member>{
            {make_shards::extension(folder->path(i)), make_shards::file_bytes(folder->path(i))},
            {"cls", std::to_string(folder->label(i))}};
      },
      pack);
  ASSERT_GT(shards.size(), 1U);
  const auto ds = WebDataset::open(shards, options);
  ASSERT_EQ(ds->size(), folder->size());
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < ds->size(); ++i) keys.push_back(ds->key(i));
  EXPECT_FALSE(std::is_sorted(keys.begin(), keys.end()));  // written in a shuffled order
  ferry::Loader loader(ds, cpu_options());
  std::vector<std::string> images(folder->size());
  std::size_t i = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const std::size_t original = std::stoul(ds->key(i++));
    EXPECT_EQ(values<std::int64_t>(b["cls"])[0], folder->label(original));
    images[original] = bytes_of(b["png"]);
  }
  ferry::Loader loose(folder, cpu_options());
  for (const ferry::Batch& b : loose.epoch(0)) {
    EXPECT_EQ(images[b.indices()[0]], bytes_of(b["image"])) << b.indices()[0];
  }
  // GNU tar and Python's tarfile list the same members.
  if (have("tar")) {
    const std::string listed = dir_.string() + "/listed.txt";
    std::string cmd = "tar tf " + shards[0].string() + " > " + listed;
    ASSERT_EQ(std::system(cmd.c_str()), 0);
    cmd =
        "python3 -c \"import sys,tarfile; "
        "print('\\n'.join(tarfile.open(sys.argv[1]).getnames()))\" " +
        shards[0].string() + " | diff - " + listed;
    EXPECT_EQ(std::system(cmd.c_str()), 0);
    EXPECT_EQ(slurp(listed).substr(0, 13), keys[0] + ".png\n");
  }
}

TEST_F(WebDatasetTest, ShuffleWindowReadsAFewShardsAtATimeDeterministically) {
  // 6 shards of 3 to 8 samples whose "cls" is the sample's index.
  std::vector<fs::path> shards;
  std::size_t n = 0;
  for (int s = 0; s < 6; ++s) {
    std::string bytes;
    for (int j = 0; j < 3 + s; ++j, ++n) {
      std::string name = "k";
      name += std::to_string(n);
      name += ".cls";
      bytes += tar_member(name, std::to_string(n));
    }
    std::string name = "s";
    name += std::to_string(s);
    name += ".tar";
    shards.push_back(write(name, bytes + std::string(1024, 0)));
  }
  const auto ds = WebDataset::open(shards);
  ASSERT_EQ(ds->size(), n);
  ferry::LoaderOptions o = cpu_options();
  o.batch_size = 4;
  o.shuffle = true;
  o.seed = 11;
  o.shuffle_window = 2;
  const auto order = [&](ferry::Loader& loader, std::uint64_t epoch, std::size_t start) {
    std::vector<std::int64_t> got;
    for (const ferry::Batch& b : loader.epoch(epoch, start)) {
      for (const std::int64_t v : values<std::int64_t>(b["cls"])) got.push_back(v);
    }
    return got;
  };
  ferry::Loader loader(ds, o);
  const std::vector<std::int64_t> e0 = order(loader, 0, 0);
  std::vector<std::int64_t> sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);  // every sample once
  EXPECT_NE(e0, all);      // shuffled
  // The epoch reads its shards two at a time: each window's samples come together.
  const auto shard_of = [&](std::int64_t i) { return ds->shard_of(static_cast<std::size_t>(i)); };
  std::size_t at = 0;
  for (int w = 0; w < 3; ++w) {
    const std::size_t a = shard_of(e0[at]);
    std::size_t b = a;
    std::size_t count = 0;
    for (; at < e0.size(); ++at) {
      const std::size_t s = shard_of(e0[at]);
      if (s != a && b == a) b = s;
      if (s != a && s != b) break;
      ++count;
    }
    EXPECT_EQ(count, (3 + a) + (3 + b)) << "window " << w;
  }
  EXPECT_EQ(at, e0.size());
  // Deterministic from (seed, epoch); another epoch differs; resumable mid-epoch.
  ferry::Loader again(ds, o);
  EXPECT_EQ(order(again, 0, 0), e0);
  EXPECT_NE(order(again, 1, 0), e0);
  EXPECT_EQ(order(again, 0, 3), std::vector<std::int64_t>(e0.begin() + 12, e0.end()));
  // Only for datasets of shards, and not with planned batches.
  o.bucket_window = 8;
  expect_error<ferry::ConfigError>([&] { ferry::Loader bad(ds, o); }, {"shuffle_window"});
  o.bucket_window = 0;
  const auto folderless =
      std::make_shared<ferry::TensorDataset>(std::vector<std::pair<std::string, ferry::Tensor>>{
          {"x", ferry::Tensor::empty({4}, ferry::DType::f32)}});
  expect_error<ferry::ConfigError>([&] { ferry::Loader bad(folderless, o); },
                                   {"shuffle_window", "shards"});
}

TEST_F(WebDatasetTest, ManyShardsAreOpenedPerReadAndAVanishedOneIsADataError) {
  // More shards than are kept open: each read() opens its shard.
  std::vector<fs::path> shards;
  for (int s = 0; s < 130; ++s) {
    std::string name = "s";
    name += std::to_string(s);
    std::string member = name;
    member += ".cls";
    name += ".tar";
    shards.push_back(write(name, tar_member(member, std::to_string(s)) + std::string(1024, 0)));
  }
  WebDatasetOptions options;
  options.index_files = false;
  const auto ds = WebDataset::open(shards, options);
  ASSERT_EQ(ds->size(), 130U);
  fs::remove(shards[129]);
  ferry::LoaderOptions o = cpu_options();
  o.batch_size = 10;
  ferry::Loader loader(ds, o);
  std::vector<std::int64_t> got;
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) {
          for (const std::int64_t v : values<std::int64_t>(b["cls"])) got.push_back(v);
        }
      },
      {"sample 129", shards[129].string(), "cannot open: No such file or directory",
       "reopened for this read, vanished or was replaced"});
  std::vector<std::int64_t> expected(120);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(got, expected);
}

// ---- hostile files: FIFOs, planted links, descriptors, buffers, label text ------------------

namespace {

std::size_t open_descriptors() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Reads sample i of `ds` on this thread, straight into a slot of its own.
void read_here(const WebDataset& ds, std::size_t i) {
  const std::vector<ferry::FieldSpec> fields = ds.fields();
  const ferry::detail::SlotLayout layout(fields, 1);
  std::vector<std::byte> slot(layout.bytes);
  ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, 0));
}

std::int64_t read_cls(const WebDataset& ds, std::size_t i) {
  const std::vector<ferry::FieldSpec> fields = ds.fields();
  const ferry::detail::SlotLayout layout(fields, 1);
  std::vector<std::byte> slot(layout.bytes);
  ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, 0));
  std::int64_t v = 0;
  std::memcpy(&v, slot.data() + layout.offsets[0], sizeof v);
  return v;
}

}  // namespace

TEST_F(WebDatasetTest, FifosAndLinksAtTheShardAndSidecarNamesNeitherBlockNorRedirect) {
  const std::string shard_bytes = tar_member("a.cls", "1") + std::string(1024, '\0');
  const fs::path victim = write("victim", "keep me");
  within(60s, [&] {
    // A FIFO given as a shard: refused, not waited on.
    const fs::path pipe = dir_ / "pipe.tar";
    ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
    expect_error<DataError>([&] { WebDataset::open({pipe}); },
                            {"WebDataset", pipe.string(), "not a regular file"});
    // A FIFO where the sidecar is read: ignored, and replaced by the index written.
    const fs::path s1 = write("s1.tar", shard_bytes);
    ASSERT_EQ(::mkfifo((dir_ / "s1.tar.idx").c_str(), 0600), 0);
    EXPECT_EQ(WebDataset::open({s1})->key(0), "a");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ / "s1.tar.idx")));
    // A link at the sidecar's name is replaced, not written through.
    const fs::path s2 = write("s2.tar", shard_bytes);
    fs::create_symlink(victim, dir_ / "s2.tar.idx");
    EXPECT_EQ(WebDataset::open({s2})->key(0), "a");
    EXPECT_FALSE(fs::is_symlink(dir_ / "s2.tar.idx"));
    EXPECT_EQ(slurp(dir_ / "s2.tar.idx").substr(0, 8), "FERRYTAR");
    // The temporary names a writer could once be predicted to use ("<sidecar>.tmp<pid>"): a
    // FIFO there must not block the write, a link there must not redirect it.
    const std::string pid = std::to_string(::getpid());
    const fs::path s3 = write("s3.tar", shard_bytes);
    ASSERT_EQ(::mkfifo((dir_ / ("s3.tar.idx.tmp" + pid)).c_str(), 0600), 0);
    EXPECT_EQ(WebDataset::open({s3})->key(0), "a");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ / "s3.tar.idx")));
    const fs::path s4 = write("s4.tar", shard_bytes);
    fs::create_symlink(victim, dir_ / ("s4.tar.idx.tmp" + pid));
    EXPECT_EQ(WebDataset::open({s4})->key(0), "a");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir_ / "s4.tar.idx")));
  });
  EXPECT_EQ(slurp(victim), "keep me");
  // No temporary file is left behind: the shards, their sidecars, and what was planted.
  const std::string pid = std::to_string(::getpid());
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
  EXPECT_EQ(names,
            (std::set<std::string>{"victim", "pipe.tar", "s1.tar", "s1.tar.idx", "s2.tar",
                                   "s2.tar.idx", "s3.tar", "s3.tar.idx", "s3.tar.idx.tmp" + pid,
                                   "s4.tar", "s4.tar.idx", "s4.tar.idx.tmp" + pid}));
}

TEST_F(WebDatasetTest, AShardSwappedAfterOpenIsADataErrorNotAHang) {
  // More shards than are kept open, so that each read() opens its shard by name again.
  std::vector<fs::path> shards;
  for (int s = 0; s < 130; ++s) {
    std::string name = "s";  // built by += (GCC 12 warns, falsely, on "s" + std::to_string)
    name += std::to_string(s);
    shards.push_back(
        write(name + ".tar", tar_member(name + ".cls", std::to_string(s)) + std::string(1024, 0)));
  }
  WebDatasetOptions options;
  options.index_files = false;
  const auto ds = WebDataset::open(shards, options);
  ASSERT_EQ(ds->size(), 130U);
  // Shard 5 becomes a FIFO (no writer will ever come); shard 7 another file.
  fs::remove(shards[5]);
  ASSERT_EQ(::mkfifo(shards[5].c_str(), 0600), 0);
  write("s7.tar", tar_member("s7.cls", "77") + std::string(2048, 0));
  ferry::LoaderOptions o = cpu_options();
  o.batch_size = 10;
  within(60s, [&] {
    {
      ferry::Loader loader(ds, o);
      expect_error<DataError>(
          [&] {
            for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
          },
          {"sample 5", shards[5].string(), "not a regular file", "reopened for this read"});
    }
    expect_error<DataError>([&] { read_here(*ds, 7); },
                            {shards[7].string(), "the shard changed since the dataset was opened"});
    // Skipped like any failing sample.
    o.on_error = ferry::ErrorPolicy::skip;
    ferry::Loader loader(ds, o);
    std::vector<std::int64_t> got;
    for (const ferry::Batch& b : loader.epoch(0)) {
      for (const std::int64_t v : values<std::int64_t>(b["cls"])) got.push_back(v);
    }
    EXPECT_EQ(got.size(), 128U);
    EXPECT_EQ(loader.stats().skipped, 2U);
  });
}

TEST_F(WebDatasetTest, ShardsWithoutSamplesGiveTheirDescriptorsBack) {
  // 300 shards (more than are kept open), 9 in 10 without a sample (a member with no key, or
  // no member at all): none of them keeps a descriptor once open() returns, and of fewer
  // shards only those with samples do.
  std::vector<fs::path> shards;
  for (int s = 0; s < 300; ++s) {
    std::string name = "s";
    name += std::to_string(s);
    const std::string bytes = s % 10 == 0  ? tar_member(name + ".cls", std::to_string(s))
                              : s % 2 == 0 ? tar_member("README", "no key")
                                           : std::string();
    shards.push_back(write(name + ".tar", bytes + std::string(1024, 0)));
  }
  WebDatasetOptions options;
  options.index_files = false;
  const std::size_t before = open_descriptors();
  {
    const auto ds = WebDataset::open(shards, options);
    EXPECT_EQ(ds->size(), 30U);
    EXPECT_EQ(open_descriptors(), before);
  }
  // Fewer shards, whose descriptors are kept: only those with samples keep one.
  {
    const std::vector<fs::path> few(shards.begin(), shards.begin() + 20);
    const auto ds = WebDataset::open(few, options);
    EXPECT_EQ(ds->size(), 2U);
    EXPECT_EQ(open_descriptors(), before + 2);
    EXPECT_EQ(read_cls(*ds, 1), 10);
  }
  EXPECT_EQ(open_descriptors(), before);
  // Under a limit of 64 descriptors, in a child process: open() still succeeds and reads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const auto under_a_low_limit = [&] {
    rlimit low{};
    low.rlim_cur = 64;
    low.rlim_max = 64;
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) std::_Exit(2);
    int code = 0;
    try {
      const auto ds = WebDataset::open(shards, options);
      code = ds->size() == 30 && read_cls(*ds, 29) == 290 ? 0 : 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      code = 1;
    }
    fs::remove_all(dir_);  // the child's own folder: its TearDown does not run
    std::_Exit(code);
  };
  EXPECT_EXIT(under_a_low_limit(), ::testing::ExitedWithCode(0), "");
}

TEST_F(WebDatasetTest, AnImageBufferGrownByALargeImageIsReleasedWhenTheImageFails) {
  using ferry::detail::wds::image_buffer_bytes;
  // Not images at all: each fails to decode, after its bytes were read into this thread's
  // buffer. A small one's buffer is kept for the next image; one over 16 MiB is not.
  const std::size_t big = (std::size_t{16} << 20) + 4096;
  const fs::path shard =
      write("s.tar", tar_member("a.png", std::string(100, 'x')) +
                         tar_member("b.png", std::string(big, 'y')) +
                         tar_member("c.png", std::string(big, 'z')) + std::string(1024, '\0'));
  WebDatasetOptions options;
  options.index_files = false;
  options.image.height = 4;
  options.image.width = 4;
  const auto ds = WebDataset::open({shard}, options);
  ASSERT_EQ(ds->size(), 3U);
  expect_error<DataError>([&] { read_here(*ds, 0); }, {"'a.png'", "not a JPEG or PNG"});
  EXPECT_EQ(image_buffer_bytes(), 100U);
  expect_error<DataError>([&] { read_here(*ds, 1); }, {"'b.png'", "not a JPEG or PNG"});
  EXPECT_EQ(image_buffer_bytes(), 0U);
  // A read cut short (the shard shrank under its descriptor) releases it too.
  ASSERT_EQ(::truncate(shard.c_str(), static_cast<off_t>(fs::file_size(shard) - big / 2)), 0);
  expect_error<DataError>([&] { read_here(*ds, 2); }, {"'c.png'", "cut short"});
  EXPECT_EQ(image_buffer_bytes(), 0U);
}

TEST_F(WebDatasetTest, ClsMembersAreIntegersWrittenAsToStringWritesThem) {
  // Valid: '-' and digits, ASCII white space around them allowed.
  const std::vector<std::pair<std::string, std::int64_t>> good = {
      {"7", 7},
      {"-3", -3},
      {"7\n", 7},
      {" 7 \r\n", 7},
      {"\t0\n\n", 0},
      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775808", INT64_MIN}};
  const std::vector<std::string> bad = {"+7",
                                        "07",
                                        "-0",
                                        "+-7",
                                        "7.0",
                                        "0x7",
                                        "",
                                        "\n",
                                        "7 7",
                                        "7a",
                                        "1e3",
                                        "9223372036854775808",
                                        "-9223372036854775809"};
  std::string bytes;
  std::size_t k = 0;
  const auto key = [](std::size_t i) {
    std::string name = "k";
    name += std::to_string(i);
    return name;
  };
  for (const auto& [text, v] : good) bytes += tar_member(key(k++) + ".cls", text);
  for (const std::string& text : bad) bytes += tar_member(key(k++) + ".cls", text);
  WebDatasetOptions options;
  options.index_files = false;
  const auto ds = WebDataset::open({write("s.tar", bytes + std::string(1024, '\0'))}, options);
  ASSERT_EQ(ds->size(), good.size() + bad.size());
  for (std::size_t i = 0; i < good.size(); ++i) {
    EXPECT_EQ(read_cls(*ds, i), good[i].second) << '"' << good[i].first << '"';
  }
  for (std::size_t i = 0; i < bad.size(); ++i) {
    const std::string message =
        expect_error<DataError>([&] { read_cls(*ds, good.size() + i); },
                                {key(good.size() + i) + ".cls'", "is not a decimal integer label"});
    EXPECT_FALSE(message.empty()) << '"' << bad[i] << '"';
  }
  expect_error<DataError>([&] { read_cls(*ds, ds->size() - 1); }, {"beyond the range of i64"});
  expect_error<DataError>([&] { read_cls(*ds, good.size() + 1); },
                          {"\"07\"", "no '+' or leading zero"});
}
