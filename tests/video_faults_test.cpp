// VideoFolder and bad videos: truncated, garbage, empty, no video stream, longer than
// max_seconds, damaged in the middle. Each is a DataError naming the file, raised for that
// video's samples (never by open()), promptly; the folder's good videos still read. And the
// index sidecar: written at open, reused while the video is unchanged, rebuilt when it is not.

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "datasets/video/video_av.hpp"
#include "datasets/video/video_index.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"
#include "test_util.hpp"
#include "video/video_fixtures.hpp"

namespace fs = std::filesystem;
using ferry::ClipStart;
using ferry::DataError;
using ferry::VideoFolder;
using ferry::VideoOptions;
using ferry::testing::expect_error;

namespace {

const fs::path& fixtures() { return ferry::testing::video_fixtures(); }
using ferry::testing::slurp;

class VideoFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_video_faults_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& rel, const std::string& bytes) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }
  std::string fixture(const std::string& name) { return slurp(fixtures() / name); }

  static VideoOptions options() {
    VideoOptions o;
    o.frames = 4;
    o.stride = 2;
    o.start = ClipStart::random;
    o.height = 8;
    o.width = 8;
    o.index_files = false;
    return o;
  }

  static std::vector<std::uint8_t> read_clip(const VideoFolder& ds, std::size_t i,
                                             std::uint64_t seed = 0) {
    const std::vector<ferry::FieldSpec> fields = ds.fields();
    const ferry::detail::SlotLayout layout(fields, 1);
    std::vector<std::byte> slot(layout.bytes);
    ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, seed));
    const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data() + layout.offsets[0]);
    return {p, p + layout.sample_bytes[0]};
  }

  fs::path dir_;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

TEST_F(VideoFaultsTest, EachBadVideoIsADataErrorNamingItForItsSamplesOnly) {
  const std::string bf = fixture("bf.mp4");
  const std::string fast = fixture("fast.mp4");
  const std::string mkv = fixture("long.mkv");
  write("a/good.mp4", bf);
  write("b/cut_index_at_end.mp4", bf.substr(0, bf.size() / 2));
  write("b/cut_data.mp4", fast.substr(0, fast.size() * 6 / 10));
  write("b/cut.mkv", mkv.substr(0, mkv.size() * 4 / 10));
  std::string junk(5000, '\0');
  for (std::size_t i = 0; i < junk.size(); ++i) junk[i] = static_cast<char>((i * 7919U) >> 3);
  write("b/garbage.webm", junk);
  write("b/empty.avi", "");
  write("b/sound.mkv", fixture("audio.mkv"));
  const auto t0 = Clock::now();
  VideoOptions o = options();
  o.clips_per_video = 2;
  const auto ds = VideoFolder::open(dir_, o);  // never throws for a bad video
  ASSERT_EQ(ds->videos(), 7U);
  ASSERT_EQ(ds->size(), 14U);
  EXPECT_EQ(read_clip(*ds, 0).size(), 4U * 8 * 8 * 3);  // a/good.mp4
  EXPECT_EQ(ds->frame_count(0), 40);
  // Sorted by name: cut.mkv, cut_data.mp4, cut_index_at_end.mp4, empty.avi, garbage.webm,
  // sound.mkv.
  const std::vector<std::string> why = {
      "", "truncated", "truncated", "cannot open", "cannot open", "cannot open", "no video stream"};
  for (std::size_t v = 1; v < ds->videos(); ++v) {
    const std::string file = ds->path(v).filename().string();
    for (const std::size_t i : {2 * v, 2 * v + 1}) {
      const std::string m = expect_error<DataError>([&] { read_clip(*ds, i); },
                                                    {"VideoFolder: ", ds->path(v).string()});
      if (!why[v].empty()) {
        EXPECT_NE(m.find(why[v]), std::string::npos) << m;
      }
    }
    expect_error<DataError>([&] { (void)ds->frame_count(v); }, {file});
  }
  EXPECT_LT(seconds_since(t0), 20.0);
}

TEST_F(VideoFaultsTest, AVideoLongerThanMaxSecondsIsRefusedByItsHeader) {
  write("a/long.mp4", fixture("long.mp4"));  // 3.6 s
  write("a/short.mp4", fixture("bf.mp4"));   // 1.6 s
  VideoOptions o = options();
  o.max_seconds = 2;
  const auto ds = VideoFolder::open(dir_, o);
  expect_error<DataError>([&] { read_clip(*ds, 0); }, {"long.mp4", "max_seconds", "3.6"});
  EXPECT_EQ(ds->frame_count(1), 40);
  o.max_seconds = 4;
  EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 90);
}

TEST_F(VideoFaultsTest, DamagedDataNeverHangsAClip) {
  // Bytes in the middle of each video overwritten: every clip either decodes or is a
  // DataError naming the file, and promptly.
  const auto t0 = Clock::now();
  for (const char* name : {"ffv1.mkv", "bf.mp4", "long.mp4", "vp9.webm", "mpeg4.avi"}) {
    std::string bytes = fixture(name);
    for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 400; ++i)
      bytes[i] = static_cast<char>(i * 131U);
    write(std::string("a/") + name, bytes);
  }
  VideoOptions o = options();
  o.clips_per_video = 6;
  const auto ds = VideoFolder::open(dir_, o);
  int errors = 0;
  for (std::size_t i = 0; i < ds->size(); ++i) {
    try {
      EXPECT_EQ(read_clip(*ds, i, i).size(), 4U * 8 * 8 * 3);
    } catch (const DataError& e) {
      ++errors;
      EXPECT_NE(std::string(e.what()).find(ds->path(i / 6).string()), std::string::npos)
          << e.what();
    }
  }
  EXPECT_LT(seconds_since(t0), 20.0);
  EXPECT_GT(errors, 0);  // the damage is reported, not passed over in silence everywhere
}

TEST_F(VideoFaultsTest, TheLoaderRaisesOrSkipsABadVideoAndDeliversTheRest) {
  write("a/good.mp4", fixture("bf.mp4"));
  write("a/junk.mp4", std::string(3000, 'x'));
  write("b/good.mkv", fixture("ffv1.mkv"));
  const auto ds = VideoFolder::open(dir_, options());
  ferry::LoaderOptions lo;
  lo.batch_size = 1;
  lo.device = ferry::Device::cpu();
  lo.workers = 2;
  {
    ferry::Loader loader(ds, lo);
    expect_error<DataError>(
        [&] {
          for (const ferry::Batch& b : loader.epoch(0)) static_cast<void>(b);
        },
        {"junk.mp4"});
  }
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader loader(ds, lo);
  std::vector<std::uint64_t> got;
  for (const ferry::Batch& b : loader.epoch(0))
    for (const std::uint64_t i : b.indices()) got.push_back(i);
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 2}));  // a/good.mp4, (a/junk.mp4), b/good.mkv
}

TEST_F(VideoFaultsTest, ASeekThatLandsPastTheClipTriesTheKeyframeBeforeThenTheStart) {
  // An index whose keyframe flags lie (as some containers' do): it claims frame 10 of long.mp4
  // is a keyframe and seeks there with frame 60's timestamp, so the seek lands on the real
  // keyframe 50, past the clip's first frame 20. The decode goes back to the keyframe before
  // (frame 0, from the start: the container opened afresh), and the clip is exact.
  namespace video = ferry::detail::video;
  const fs::path file = fixtures() / "long.mp4";
  video::AvInput probe = video::AvInput::open_file(file, "long.mp4");
  ferry::detail::VideoIndex index = video::index_video(probe, "long.mp4", 100);
  ASSERT_EQ(index.keyframes, (std::vector<std::int64_t>{0, 50}));
  index.keyframes = {0, 10, 50};
  index.seek_ts = {index.seek_ts[0], index.pts[60], index.seek_ts[1]};
  VideoOptions o = options();
  o.frames = 3;
  o.stride = 5;
  const std::vector<std::int64_t> frames = {20, 25, 30};
  std::vector<std::uint8_t> lied(3 * 8 * 8 * 3);
  {
    video::AvInput in = video::AvInput::open_file(file, "long.mp4");
    video::decode_clip(in, index, frames, o, lied.data(), "long.mp4");
  }
  index.keyframes = {0, 50};
  index.seek_ts = {index.seek_ts[0], index.seek_ts[2]};
  std::vector<std::uint8_t> truth(lied.size());
  video::AvInput in = video::AvInput::open_file(file, "long.mp4");
  video::decode_clip(in, index, frames, o, truth.data(), "long.mp4");
  EXPECT_EQ(lied, truth);
  // And the clip shows frames 20, 25, 30: bars read from the 8 x 8 frames' middle row.
  for (std::size_t t = 0; t < 3; ++t) {
    std::int64_t n = 0;
    for (std::size_t b = 0; b < 8; ++b) {
      if (truth[t * 192 + (4 * 8 + b) * 3 + 1] > 128) n |= std::int64_t{1} << b;
    }
    EXPECT_EQ(n, frames[t]);
  }
}

TEST_F(VideoFaultsTest, EverySeekLandsOnTheKeyframeItAsksForNotTheOneBefore) {
  // A clip decodes from the keyframe at or before its first frame, and from no earlier one: an
  // MP4's demuxer takes a seek's timestamp as a presentation time, so asking for a B-frame
  // video's keyframe by its dts (earlier by the reordering delay) lands a whole GOP early and
  // decodes it for nothing (twice the work of an average clip; the frames still came out right).
  // For each video with B-frames or several keyframes, in each container: every keyframe's seek
  // reads that keyframe's packet first.
  namespace video = ferry::detail::video;
  std::size_t checked = 0;
  for (const char* name :
       {"bf.mp4", "long.mp4", "long.mkv", "vfr.mkv", "trim.mp4", "fast.mp4", "opengopcut.mkv"}) {
    SCOPED_TRACE(name);
    const fs::path file = fixtures() / name;
    video::AvInput probe = video::AvInput::open_file(file, name);
    const ferry::detail::VideoIndex index = video::index_video(probe, name, 100);
    ASSERT_FALSE(index.counted);
    ASSERT_GE(index.keyframes.size(), 2u);
    for (std::size_t k = 1; k < index.keyframes.size(); ++k) {
      video::AvInput in = video::AvInput::open_file(file, name);
      ASSERT_GE(av_seek_frame(in.get(), index.stream, index.seek_ts[k], AVSEEK_FLAG_BACKWARD), 0);
      AVPacket* pkt = av_packet_alloc();
      std::int64_t landed = AV_NOPTS_VALUE;
      while (landed == AV_NOPTS_VALUE && av_read_frame(in.get(), pkt) >= 0) {
        if (pkt->stream_index == index.stream) landed = pkt->pts;
        av_packet_unref(pkt);
      }
      av_packet_free(&pkt);
      EXPECT_EQ(landed, index.pts[static_cast<std::size_t>(index.keyframes[k])])
          << "keyframe " << k << " (frame " << index.keyframes[k] << ")";
      ++checked;
    }
  }
  EXPECT_GE(checked, 10u);
}

TEST_F(VideoFaultsTest, MemoryStaysFlatOverHundredsOfClips) {
  // Each clip opens the file, a decoder and a scaler, and decodes from its keyframe: whatever it
  // makes goes when it ends. After 60 clips to settle, 240 more of a 320 x 240 video with
  // B-frames (random starts, each decode up to a GOP of 50 frames) leave the resident set where
  // it was, within 3 MiB: a decoder's context, its frame pool or a demuxer left behind at each
  // clip would cost several times that.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's own bookkeeping (ASan's quarantine) grows the resident set";
#endif
  if (std::system("command -v ffmpeg >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffmpeg";
  fs::create_directories(dir_ / "a");
  ASSERT_EQ(std::system(("ffmpeg -loglevel error -y -f lavfi -i testsrc2=s=320x240:r=25 "
                         "-frames:v 150 -c:v libx264 -preset ultrafast -bf 2 -g 50 "
                         "-x264-params b-adapt=0:scenecut=0 '" +
                         (dir_ / "a" / "v.mp4").string() + "'")
                            .c_str()),
            0);
  VideoOptions o = options();
  o.frames = 4;
  o.stride = 3;
  const auto ds = VideoFolder::open(dir_, o);
  ASSERT_EQ(ds->frame_count(0), 150);
  std::uint64_t seed = 0;
  for (; seed < 60; ++seed) ASSERT_EQ(read_clip(*ds, 0, seed).size(), 4u * 8 * 8 * 3);
  const auto before = static_cast<std::int64_t>(ferry::testing::resident_bytes());
  if (before == 0) GTEST_SKIP() << "no VmRSS in /proc/self/status";
  for (; seed < 300; ++seed) ASSERT_EQ(read_clip(*ds, 0, seed).size(), 4u * 8 * 8 * 3);
  const auto after = static_cast<std::int64_t>(ferry::testing::resident_bytes());
  EXPECT_LT(after - before, std::int64_t{3} << 20) << before << " -> " << after << " bytes";
}

// ---- the index sidecar ------------------------------------------------------------------------

TEST_F(VideoFaultsTest, TheIndexIsKeptBesideTheVideoAndReusedWhileItIsUnchanged) {
  const fs::path video = write("a/v.mp4", fixture("long.mp4"));
  const fs::path sidecar = video.string() + ".ferryidx";
  VideoOptions o = options();
  o.index_files = true;
  EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 90);
  ASSERT_TRUE(fs::exists(sidecar));
  const std::string kept = slurp(sidecar);
  // The same bytes count as the same video: overwrite it with junk of its size and keep its
  // modification time; the folder opens from the sidecar and still counts 90 frames.
  const auto mtime = fs::last_write_time(video);
  std::string junk(fs::file_size(video), 'j');
  write("a/v.mp4", junk);
  fs::last_write_time(video, mtime);
  EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 90);
  o.index_files = false;  // without sidecars, the junk is indexed: an error
  expect_error<DataError>([&] { (void)VideoFolder::open(dir_, o)->frame_count(0); }, {"v.mp4"});
  // Another video in its place: the stale sidecar is rebuilt.
  o.index_files = true;
  write("a/v.mp4", fixture("bf.mp4"));
  const auto ds = VideoFolder::open(dir_, o);
  EXPECT_EQ(ds->frame_count(0), 40);
  EXPECT_NE(slurp(sidecar), kept);
  EXPECT_EQ(read_clip(*ds, 0).size(), 4U * 8 * 8 * 3);
  // A damaged sidecar is ignored and rewritten.
  std::string bad = slurp(sidecar);
  bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x55);
  write("a/v.mp4.ferryidx", bad);
  EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 40);
  EXPECT_NE(slurp(sidecar), bad);
  // A folder that cannot be written: the index stays in memory, silently.
  if (::geteuid() != 0) {
    fs::remove(sidecar);
    fs::permissions(dir_ / "a", fs::perms::owner_write, fs::perm_options::remove);
    EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 40);
    EXPECT_FALSE(fs::exists(sidecar));
    fs::permissions(dir_ / "a", fs::perms::owner_write, fs::perm_options::add);
  }
}

TEST_F(VideoFaultsTest, ASidecarStillObeysMaxSeconds) {
  write("a/v.mp4", fixture("long.mp4"));
  VideoOptions o = options();
  o.index_files = true;
  EXPECT_EQ(VideoFolder::open(dir_, o)->frame_count(0), 90);
  o.max_seconds = 1;
  expect_error<DataError>([&] { (void)VideoFolder::open(dir_, o)->frame_count(0); },
                          {"v.mp4", "max_seconds"});
}

}  // namespace

// A stream copy cut from the middle: the frames before its first keyframe, and the leading ones
// shown before it (an open GOP's B-frames without timestamps; in AVI, B-frames that refer to
// frames cut away), are no frames, in the index and in every clip; frame 0 is the keyframe.
TEST_F(VideoFaultsTest, AStreamCutFromTheMiddleCountsItsFramesFromItsFirstKeyframe) {
  for (const auto& [name, first] : {std::pair<std::string, int>{"opengopcut.mkv", 20},
                                    std::pair<std::string, int>{"pcut.avi", 24}}) {
    SCOPED_TRACE(name);
    write("a/" + name, fixture(name));
    VideoOptions o = options();
    o.height = 48;
    o.width = 64;
    o.frames = 1;
    const std::int64_t n = VideoFolder::open(dir_, o)->frame_count(0);
    EXPECT_EQ(n, 60 - first);
    o.frames = static_cast<int>(n);
    o.stride = 1;
    o.start = ClipStart::start;
    const std::vector<std::uint8_t> clip = read_clip(*VideoFolder::open(dir_, o), 0);
    // Frame t shows its source's number in binary: bar b (8 pixels wide) white when bit b is set.
    const std::size_t row = 64 * 3;
    for (std::int64_t t = 0; t < n; ++t) {
      const std::uint8_t* mid = clip.data() + static_cast<std::size_t>(t) * 48 * row + 24 * row;
      int shown = 0;
      for (int b = 0; b < 8; ++b)
        shown |= mid[static_cast<std::size_t>(b * 8 + 4) * 3 + 1] > 128 ? 1 << b : 0;
      EXPECT_EQ(shown, first + t) << "frame " << t;
    }
    fs::remove_all(dir_ / "a");
  }
}

TEST_F(VideoFaultsTest, SampleTablesClaimingMoreSamplesThanTheFileHoldsAreRefusedBeforeFFmpeg) {
  // bf.mp4 with a sample table forged to claim 10^7 samples: FFmpeg's demuxer made an index
  // entry for each at open (600 MB and a second for a 3 KB file in ffprobe). The tables are
  // checked against the file's size first, so each is a DataError naming the file and the box,
  // for that video's samples; the good copy beside them reads.
  const std::string good = fixture("bf.mp4");
  const auto box = [&](const char* type) {
    const std::size_t at = good.find(type);
    EXPECT_NE(at, std::string::npos) << type;
    return at;
  };
  const auto be32 = [](std::string& s, std::size_t at, std::uint32_t v) {
    for (int k = 0; k < 4; ++k)
      s[at + static_cast<std::size_t>(k)] = static_cast<char>(v >> (24 - 8 * k));
  };
  constexpr std::uint32_t kClaimed = 10'000'000;
  std::string stts = good;  // its first run of samples
  be32(stts, box("stts") + 12, kClaimed);
  std::string stsz = good;  // a constant size of 1 byte, for 10^7 samples
  be32(stsz, box("stsz") + 8, 1);
  be32(stsz, box("stsz") + 12, kClaimed);
  std::string stsc = good;  // samples per chunk
  be32(stsc, box("stsc") + 16, kClaimed);
  std::string sizes = good;  // a table of sizes longer than its box
  be32(sizes, box("stsz") + 12, kClaimed);
  write("a/good.mp4", good);
  write("b/stsc.mp4", stsc);
  write("b/stsz.mp4", stsz);
  write("b/stsz_table.mp4", sizes);
  write("b/stts.mp4", stts);
  const auto t0 = Clock::now();
  const auto ds = VideoFolder::open(dir_, options());
  ASSERT_EQ(ds->videos(), 5U);
  EXPECT_EQ(read_clip(*ds, 0).size(), 4U * 8 * 8 * 3);
  const std::string bytes = " in a file of " + std::to_string(good.size()) + " bytes";
  const std::vector<std::string> why = {"", "its stsc box claims 10000000 samples" + bytes,
                                        "its stsz box claims 10000000 samples" + bytes,
                                        "its stsz box claims 10000000 samples" + bytes,
                                        "its stts box claims 10000000 samples" + bytes};
  for (std::size_t v = 1; v < ds->videos(); ++v) {
    expect_error<DataError>(
        [&] { read_clip(*ds, v); },
        {"VideoFolder: ", ds->path(v).string() + ": cannot open as a video: ", why[v]});
  }
  EXPECT_LT(seconds_since(t0), 5.0);
}

TEST_F(VideoFaultsTest, AFileOfHundredsOfTracksIsRefusedBeforeFFmpegProbesThem) {
  // bf.mp4 with its trak copied to 200 tracks: FFmpeg made, probed and indexed a stream of each
  // (990 tracks in 1 MB cost it 1.5 GB and 6 s at every open). More than 64 tracks: a DataError.
  const std::string good = fixture("bf.mp4");
  const std::size_t moov = good.find("moov") - 4;
  const std::size_t trak = good.find("trak") - 4;
  ASSERT_LT(moov, trak);
  const auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k)
      v = (v << 8) | static_cast<unsigned char>(good[at + static_cast<std::size_t>(k)]);
    return v;
  };
  const std::string track = good.substr(trak, be32(trak));
  std::string many = good.substr(0, trak + track.size());
  for (int k = 1; k < 200; ++k) many += track;
  many += good.substr(trak + track.size());
  const std::uint32_t size = be32(moov) + 199 * static_cast<std::uint32_t>(track.size());
  for (int k = 0; k < 4; ++k)
    many[moov + static_cast<std::size_t>(k)] = static_cast<char>(size >> (24 - 8 * k));
  write("a/good.mp4", good);
  write("b/tracks.mp4", many);
  const auto t0 = Clock::now();
  const auto ds = VideoFolder::open(dir_, options());
  ASSERT_EQ(ds->videos(), 2U);
  EXPECT_EQ(read_clip(*ds, 0).size(), 4U * 8 * 8 * 3);
  expect_error<DataError>([&] { read_clip(*ds, 1); },
                          {ds->path(1).string() + ": cannot open as a video: ",
                           "its trak box makes 65 tracks (ferry reads up to 64)"});
  EXPECT_LT(seconds_since(t0), 5.0);
}
