#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
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
    const fs::path script = fs::path(__FILE__).parent_path() / "webdataset" / "make_fixtures.py";
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
      {"sample 129", shards[129].string(), "cannot open (it vanished since open?)"});
  std::vector<std::int64_t> expected(120);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(got, expected);
}
