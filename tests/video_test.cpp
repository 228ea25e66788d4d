// VideoFolder: exact frames (by presentation timestamps) in every container and codec of the
// fixtures, each clip mode, clips_per_video, the last frame repeated, determinism across worker
// counts, the index sidecar, and bad videos (each a DataError naming the file, under a time
// limit). The fixtures come from tests/video/make_fixtures.sh (the ffmpeg program): frame n
// shows n in binary as 8 vertical bars, so any decoded frame says which frame it is.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"
#include "video/video_fixtures.hpp"

namespace fs = std::filesystem;
using ferry::ClipStart;
using ferry::ConfigError;
using ferry::DataError;
using ferry::VideoFolder;
using ferry::VideoOptions;
using ferry::testing::expect_error;

namespace {

using Bytes = std::vector<std::uint8_t>;

const fs::path& fixtures() { return ferry::testing::video_fixtures(); }
using ferry::testing::slurp;

struct Fixture {
  const char* file;
  std::int64_t frames;
};
const Fixture kFixtures[] = {{"ffv1.mkv", 30}, {"bf.mp4", 40},   {"long.mp4", 90},
                             {"vfr.mkv", 36},  {"vp9.webm", 24}, {"mpeg4.avi", 20}};

class VideoFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_video_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // root/<cls>/<as>: a link to fixture `file`.
  fs::path link(const std::string& cls, const std::string& file, std::string as = "") {
    if (as.empty()) as = file;
    fs::create_directories(dir_ / cls);
    const fs::path p = dir_ / cls / as;
    fs::create_symlink(fixtures() / file, p);
    return p;
  }
  // root/<cls>/<as>: `bytes`.
  fs::path write(const std::string& cls, const std::string& as, const std::string& bytes) {
    fs::create_directories(dir_ / cls);
    const fs::path p = dir_ / cls / as;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  static VideoOptions options(int frames, int stride, ClipStart start, int size = 16) {
    VideoOptions o;
    o.frames = frames;
    o.stride = stride;
    o.start = start;
    o.height = size;
    o.width = size;
    o.index_files = false;
    return o;
  }

  // Sample i's clip as read() writes it (with the loader's layout), and its label.
  static Bytes read_clip(const VideoFolder& ds, std::size_t i, std::uint64_t seed = 0,
                         std::int64_t* label = nullptr) {
    const std::vector<ferry::FieldSpec> fields = ds.fields();
    const ferry::detail::SlotLayout layout(fields, 1);
    std::vector<std::byte> slot(layout.bytes);
    ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, seed));
    const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data() + layout.offsets[0]);
    if (label != nullptr) std::memcpy(label, slot.data() + layout.offsets[1], sizeof *label);
    return {p, p + layout.sample_bytes[0]};
  }

  // The frame numbers a clip shows: each frame's 8 bars read at the middle row.
  static std::vector<std::int64_t> shown(const Bytes& clip, const VideoOptions& o) {
    const auto h = static_cast<std::size_t>(o.height);
    const auto w = static_cast<std::size_t>(o.width);
    const std::size_t frame = h * w * 3;
    std::vector<std::int64_t> out;
    for (std::size_t t = 0; t * frame < clip.size(); ++t) {
      std::int64_t n = 0;
      for (std::size_t b = 0; b < 8; ++b) {
        const std::size_t x = (b * 8 + 4) * w / 64;
        if (clip[t * frame + ((h / 2) * w + x) * 3 + 1] > 128) n |= std::int64_t{1} << b;
      }
      out.push_back(n);
    }
    return out;
  }

  fs::path dir_;
};

std::vector<std::int64_t> iota(std::int64_t from, std::int64_t count, std::int64_t step = 1) {
  std::vector<std::int64_t> v;
  for (std::int64_t k = 0; k < count; ++k) v.push_back(from + k * step);
  return v;
}

// ---- exact frames --------------------------------------------------------------------------

TEST_F(VideoFolderTest, EveryContainerAndCodecGivesExactFramesInEachClipMode) {
  for (const Fixture& f : kFixtures) link("v", f.file);
  struct Case {
    int frames, stride;
    ClipStart start;
  };
  const Case cases[] = {{4, 3, ClipStart::start},
                        {5, 2, ClipStart::center},
                        {6, 1, ClipStart::uniform},
                        {3, 4, ClipStart::random}};
  for (const Case& c : cases) {
    const VideoOptions o = options(c.frames, c.stride, c.start);
    const auto ds = VideoFolder::open(dir_, o);
    ASSERT_EQ(ds->size(), std::size(kFixtures));
    for (std::size_t v = 0; v < ds->videos(); ++v) {
      const std::string file = ds->path(v).filename().string();
      const std::int64_t n =
          std::find_if(std::begin(kFixtures), std::end(kFixtures), [&](const Fixture& f) {
            return file == f.file;
          })->frames;
      ASSERT_EQ(ds->frame_count(v), n) << file;
      const std::int64_t span = (c.frames - 1) * c.stride + 1;
      for (std::uint64_t seed : {1ULL, 2ULL, 99ULL}) {
        std::vector<std::int64_t> want;
        switch (c.start) {
          case ClipStart::start:
            want = iota(0, c.frames, c.stride);
            break;
          case ClipStart::center:
            want = iota((n - span) / 2, c.frames, c.stride);
            break;
          case ClipStart::uniform:
            for (std::int64_t k = 0; k < c.frames; ++k)
              want.push_back((2 * k * (n - 1) + (c.frames - 1)) / (2 * (c.frames - 1)));
            break;
          case ClipStart::random: {
            want = ds->clip_frames(v, seed);
            ASSERT_GE(want[0], 0);
            ASSERT_LE(want[0], n - span);
            EXPECT_EQ(want, iota(want[0], c.frames, c.stride)) << file;
            break;
          }
        }
        EXPECT_EQ(ds->clip_frames(v, seed), want) << file;
        EXPECT_EQ(shown(read_clip(*ds, v, seed), o), want) << file << " seed " << seed;
      }
    }
  }
}

TEST_F(VideoFolderTest, RandomStartsCoverTheVideoFromTheSeed) {
  link("v", "bf.mp4");
  const VideoOptions o = options(8, 2, ClipStart::random);  // span 15, starts in [0, 25]
  const auto ds = VideoFolder::open(dir_, o);
  std::set<std::int64_t> starts;
  for (std::uint64_t seed = 0; seed < 200; ++seed) starts.insert(ds->clip_frames(0, seed)[0]);
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 25);
  EXPECT_GE(starts.size(), 24U);
  EXPECT_EQ(ds->clip_frames(0, 5), ds->clip_frames(0, 5));
}

TEST_F(VideoFolderTest, ClipsAreTheFramesADecodeFromTheFirstFrameGives) {
  // Byte for byte, lossy codecs included: a seek to a keyframe, then decoding forward, gives
  // the same pictures as decoding the whole video.
  for (const char* file : {"bf.mp4", "long.mp4", "vfr.mkv", "vp9.webm", "mpeg4.avi", "trim.mp4"}) {
    fs::remove_all(dir_);
    link("v", file);
    const VideoOptions whole_o = options(90, 1, ClipStart::start);
    const Bytes whole = read_clip(*VideoFolder::open(dir_, whole_o), 0);
    const VideoOptions o = options(5, 3, ClipStart::random);
    const auto ds = VideoFolder::open(dir_, o);
    const std::size_t frame = 16 * 16 * 3;
    for (std::uint64_t seed = 0; seed < 6; ++seed) {
      const Bytes clip = read_clip(*ds, 0, seed);
      const std::vector<std::int64_t> frames = ds->clip_frames(0, seed);
      for (std::size_t t = 0; t < frames.size(); ++t) {
        const auto at = static_cast<std::size_t>(frames[t]) * frame;
        EXPECT_TRUE(std::equal(clip.begin() + static_cast<std::ptrdiff_t>(t * frame),
                               clip.begin() + static_cast<std::ptrdiff_t>((t + 1) * frame),
                               whole.begin() + static_cast<std::ptrdiff_t>(at)))
            << file << " frame " << frames[t];
      }
    }
  }
}

TEST_F(VideoFolderTest, AnEditListsDiscardedFramesAreDecodedButNotCounted) {
  // trim.mp4: bf.mp4's packets from 0.5 s on; its first keyframe lies before the edit list's
  // start, flagged discard: decoded (later frames refer to it), never a frame of the video.
  link("v", "trim.mp4");
  VideoOptions o = options(27, 1, ClipStart::start);
  const auto ds = VideoFolder::open(dir_, o);
  ASSERT_EQ(ds->frame_count(0), 27);
  const std::vector<std::int64_t> frames = shown(read_clip(*ds, 0), o);
  EXPECT_EQ(frames, iota(frames[0], 27));
  EXPECT_EQ(frames.back(), 39);  // bf.mp4's last frame
  o = options(3, 5, ClipStart::center);
  EXPECT_EQ(shown(read_clip(*VideoFolder::open(dir_, o), 0), o),
            (std::vector<std::int64_t>{21, 26, 31}));  // frame 8 of 27 shows 13 + 8
}

TEST_F(VideoFolderTest, LongGopClipsSeekToTheKeyframeBefore) {
  link("v", "long.mp4");  // keyframes at 0 and 50; B-frames
  for (const std::int64_t first : {49, 50, 51, 70, 82}) {
    VideoOptions o = options(8, 1, ClipStart::center);
    // center: floor((90 - span) / 2) = first for span = 90 - 2 first (+ 1 when odd)
    o.frames = static_cast<int>(90 - 2 * first);
    if (o.frames < 1) o.frames = 1;
    const auto ds = VideoFolder::open(dir_, o);
    const std::vector<std::int64_t> want = ds->clip_frames(0, 0);
    EXPECT_EQ(shown(read_clip(*ds, 0), o), want);
  }
  VideoOptions o = options(3, 1, ClipStart::uniform);
  EXPECT_EQ(shown(read_clip(*VideoFolder::open(dir_, o), 0), o),
            (std::vector<std::int64_t>{0, 45, 89}));
}

TEST_F(VideoFolderTest, FramesPastTheEndRepeatTheLastFrame) {
  link("v", "mpeg4.avi");                              // 20 frames
  VideoOptions o = options(10, 3, ClipStart::center);  // span 28 > 20: from frame 0
  const auto ds = VideoFolder::open(dir_, o);
  EXPECT_EQ(shown(read_clip(*ds, 0), o),
            (std::vector<std::int64_t>{0, 3, 6, 9, 12, 15, 18, 19, 19, 19}));
  o = options(30, 1, ClipStart::uniform);  // more frames than the video: each taken once or twice
  const Bytes clip = read_clip(*VideoFolder::open(dir_, o), 0);
  std::vector<std::int64_t> want;
  for (std::int64_t k = 0; k < 30; ++k) want.push_back((2 * k * 19 + 29) / 58);
  EXPECT_EQ(shown(clip, o), want);
  o = options(1, 1, ClipStart::uniform);
  EXPECT_EQ(shown(read_clip(*VideoFolder::open(dir_, o), 0), o), std::vector<std::int64_t>{9});
}

TEST_F(VideoFolderTest, FramesAreResizedToTheSizeAsked) {
  link("v", "ffv1.mkv");
  VideoOptions o = options(2, 1, ClipStart::start);
  o.height = 5;
  o.width = 40;
  const auto ds = VideoFolder::open(dir_, o);
  EXPECT_EQ(ds->fields()[0].shape, (std::vector<std::int64_t>{2, 5, 40, 3}));
  EXPECT_EQ(ds->fields()[0].dtype, ferry::DType::u8);
  const Bytes clip = read_clip(*ds, 0);
  ASSERT_EQ(clip.size(), 2U * 5 * 40 * 3);
  EXPECT_EQ(shown(clip, o), (std::vector<std::int64_t>{0, 1}));
  // Frame 0 is all black bars: luma 16, RGB 0 (limited range), within rounding.
  for (std::size_t i = 0; i < 5 * 40 * 3; ++i) ASSERT_LE(clip[i], 2) << i;
}

TEST_F(VideoFolderTest, FFmpegsThreadsInsideADecodeGiveTheSameBytes) {
  link("v", "long.mp4");
  link("v", "vp9.webm");
  VideoOptions o = options(6, 2, ClipStart::random);
  const auto one = VideoFolder::open(dir_, o);
  o.decode_threads = 3;
  const auto three = VideoFolder::open(dir_, o);
  o.decode_threads = 0;  // FFmpeg's choice
  const auto any = VideoFolder::open(dir_, o);
  for (std::size_t i = 0; i < 2; ++i) {
    for (const std::uint64_t seed : {4ULL, 5ULL}) {
      const Bytes clip = read_clip(*one, i, seed);
      EXPECT_EQ(read_clip(*three, i, seed), clip);
      EXPECT_EQ(read_clip(*any, i, seed), clip);
      EXPECT_EQ(shown(clip, o), one->clip_frames(i, seed));
    }
  }
}

// ---- samples, labels, the loader -----------------------------------------------------------

TEST_F(VideoFolderTest, ClipsPerVideoMakeKSamplesOfEachVideoWithTheirOwnSeeds) {
  link("a", "bf.mp4");
  link("b", "ffv1.mkv");
  link("b", "vfr.mkv");
  VideoOptions o = options(4, 1, ClipStart::random);
  o.clips_per_video = 3;
  const auto ds = VideoFolder::open(dir_, o);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(ds->size(), 9U);
  ASSERT_EQ(ds->videos(), 3U);
  const std::int64_t counts[] = {40, 30, 36};
  for (std::size_t i = 0; i < 9; ++i) {
    std::int64_t label = -1;
    const Bytes clip = read_clip(*ds, i, 1000 + i, &label);
    EXPECT_EQ(label, i < 3 ? 0 : 1);
    const std::vector<std::int64_t> frames = shown(clip, o);
    EXPECT_EQ(frames, ds->clip_frames(i, 1000 + i));
    EXPECT_LE(frames.back(), counts[i / 3] - 1);
  }
  // Clips of one video differ by their seeds.
  std::set<std::int64_t> starts;
  for (std::uint64_t s = 0; s < 20; ++s) starts.insert(ds->clip_frames(0, s)[0]);
  EXPECT_GT(starts.size(), 5U);
}

TEST_F(VideoFolderTest, TheLoaderGivesTheSameBatchesWhateverTheWorkerCount) {
  link("a", "bf.mp4");
  link("a", "vp9.webm");
  link("b", "long.mp4");
  link("b", "mpeg4.avi");
  VideoOptions o = options(3, 2, ClipStart::random, 8);
  o.clips_per_video = 2;
  const auto ds = VideoFolder::open(dir_, o);
  auto run = [&](int workers, std::uint64_t seed) {
    ferry::LoaderOptions lo;
    lo.batch_size = 3;
    lo.shuffle = true;
    lo.seed = seed;
    lo.workers = workers;
    lo.device = ferry::Device::cpu();
    lo.autotune = false;
    ferry::Loader loader(ds, lo);
    Bytes all;
    std::vector<std::uint64_t> order;
    for (const ferry::Batch& b : loader.epoch(0)) {
      const ferry::Tensor& t = b["video"];
      EXPECT_EQ(t.shape()[1], 3);
      all.insert(all.end(), t.data<std::uint8_t>(), t.data<std::uint8_t>() + t.numel());
      for (const std::uint64_t i : b.indices()) order.push_back(i);
    }
    EXPECT_EQ(order.size(), 8U);
    EXPECT_EQ(std::set<std::uint64_t>(order.begin(), order.end()).size(), 8U);
    return all;
  };
  const Bytes one = run(1, 3);
  EXPECT_EQ(one.size(), 8U * 3 * 8 * 8 * 3);
  EXPECT_EQ(run(3, 3), one);
  EXPECT_NE(run(2, 4), one);
}

// ---- options ---------------------------------------------------------------------------------

TEST_F(VideoFolderTest, BadOptionsAreConfigErrorsNamingTheMember) {
  link("v", "bf.mp4");
  auto bad = [&](auto change, std::string_view member) {
    VideoOptions o;
    change(o);
    expect_error<ConfigError>([&] { VideoFolder::open(dir_, o); }, {"VideoFolder", member});
  };
  bad([](VideoOptions& o) { o.frames = 0; }, "frames");
  bad([](VideoOptions& o) { o.stride = 0; }, "stride");
  bad([](VideoOptions& o) { o.height = 0; }, "height");
  bad([](VideoOptions& o) { o.width = -3; }, "width");
  bad([](VideoOptions& o) { o.clips_per_video = 0; }, "clips_per_video");
  bad([](VideoOptions& o) { o.max_seconds = 0; }, "max_seconds");
  bad([](VideoOptions& o) { o.decode_threads = -1; }, "decode_threads");
  expect_error<DataError>([&] { VideoFolder::open(dir_ / "missing"); }, {"no such folder"});
  fs::create_directories(dir_ / "empty" / "c");
  expect_error<DataError>([&] { VideoFolder::open(dir_ / "empty"); }, {"no videos"});
}

}  // namespace
