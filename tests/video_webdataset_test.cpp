// Video members of WebDataset shards (.mp4, .mkv, .webm, .avi): decoded from memory by
// decode_video(), clip for clip the same bytes as VideoFolder gives for the same file and seed;
// a bad member is a DataError naming the shard and the member.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"
#include "video/video_fixtures.hpp"

namespace fs = std::filesystem;
using ferry::ClipStart;
using ferry::DataError;
using ferry::VideoOptions;
using ferry::testing::expect_error;

namespace {

using Bytes = std::vector<std::uint8_t>;

class VideoWebDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_video_wds_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "m");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A shard of members `names` (files in dir_/m), written by tar.
  fs::path shard(const std::vector<std::string>& names) {
    std::string cmd = "tar -cf " + (dir_ / "shard.tar").string() + " -C " + (dir_ / "m").string();
    for (const std::string& n : names) cmd += " " + n;
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return dir_ / "shard.tar";
  }
  void member(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / "m" / name, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

  // Field f of sample i, as read() writes it with `seed`.
  static Bytes read_field(const ferry::Dataset& ds, std::size_t i, std::size_t f,
                          std::uint64_t seed) {
    const std::vector<ferry::FieldSpec> fields = ds.fields();
    const ferry::detail::SlotLayout layout(fields, 1);
    std::vector<std::byte> slot(layout.bytes);
    ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, seed));
    const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data() + layout.offsets[f]);
    return {p, p + layout.sample_bytes[f]};
  }

  fs::path dir_;
};

TEST_F(VideoWebDatasetTest, VideoMembersAreTheClipsVideoFolderGives) {
  const fs::path fx = ferry::testing::video_fixtures();
  const char* files[] = {"bf.mp4", "long.mp4", "fast.mp4"};
  std::vector<std::string> names;
  for (int k = 0; k < 3; ++k) {
    const std::string key = "00" + std::to_string(k);
    member(key + ".cls", std::to_string(k));
    member(key + ".mp4", ferry::testing::slurp(fx / files[k]));
    names.push_back(key + ".cls");
    names.push_back(key + ".mp4");
    fs::create_directories(dir_ / "folder" / key);
    fs::create_symlink(fx / files[k], dir_ / "folder" / key / files[k]);
  }
  ferry::WebDatasetOptions o;
  o.video.frames = 5;
  o.video.stride = 2;
  o.video.height = 12;
  o.video.width = 16;
  o.index_files = false;
  const auto wds = ferry::WebDataset::open({shard(names)}, o);
  ASSERT_EQ(wds->size(), 3U);
  const std::vector<ferry::FieldSpec> fields = wds->fields();
  ASSERT_EQ(fields.size(), 2U);
  EXPECT_EQ(fields[1].name, "mp4");
  EXPECT_EQ(fields[1].shape, (std::vector<std::int64_t>{5, 12, 16, 3}));
  VideoOptions vo = o.video;
  vo.index_files = false;
  const auto folder = ferry::VideoFolder::open(dir_ / "folder", vo);
  for (std::size_t i = 0; i < 3; ++i) {
    for (const std::uint64_t seed : {1ULL, 2ULL, 3ULL}) {
      const Bytes clip = read_field(*wds, i, 1, seed);
      EXPECT_EQ(clip, read_field(*folder, i, 0, seed)) << i << " " << seed;
      EXPECT_EQ(clip.size(), 5U * 12 * 16 * 3);
    }
  }
}

TEST_F(VideoWebDatasetTest, ABadVideoMemberIsADataErrorNamingShardAndMember) {
  member("a.mkv", ferry::testing::slurp(ferry::testing::video_fixtures() / "ffv1.mkv"));
  member("b.mkv", std::string(2000, 'z'));
  ferry::WebDatasetOptions o;
  o.video.frames = 2;
  o.video.height = o.video.width = 8;
  o.index_files = false;
  const auto wds = ferry::WebDataset::open({shard({"a.mkv", "b.mkv"})}, o);
  EXPECT_EQ(read_field(*wds, 0, 0, 0).size(), 2U * 8 * 8 * 3);
  expect_error<DataError>([&] { read_field(*wds, 1, 0, 0); }, {"WebDataset", "shard.tar", "b.mkv"});
  const Bytes bytes(100, 0);
  std::vector<std::uint8_t> out(2 * 8 * 8 * 3);
  expect_error<DataError>(
      [&] { ferry::decode_video(std::as_bytes(std::span(bytes)), o.video, 0, out, "mine"); },
      {"mine"});
  expect_error<ferry::ConfigError>(
      [&] {
        ferry::decode_video(std::as_bytes(std::span(bytes)), o.video, 0, std::span(out).first(10),
                            "mine");
      },
      {"mine"});
}

}  // namespace
