// bench/video: random clips of videos through ferry (VideoFolder + Loader) and the limit they
// are measured against, FFmpeg's own decode of exactly the packets each clip needs. Run by
// bench/video_compare, which makes the videos and runs the Python anchors beside it
// (BENCHMARKS.md, "Video").
//
//   video ferry --dir DIR --clips N [--workers W] [--batch B] [--seed S] [--frames T] [--size P]
//               [--rss-every K]
//   video limit --dir DIR --clips N [--threads W] [--seed S] [--frames T] [--size P]
//               [--clip-list FILE]
//   video clips --dir DIR --clips N [--seed S] [--frames T] > FILE
//
// ferry: VideoFolder::open(DIR) (class folders; T frames, stride 1, P x P, start random) with
// clips_per_video chosen so that the dataset holds at least N clips, and one epoch of its first
// N samples of a shuffled order through a Loader (W workers, batches of B, device cpu), the
// consumer reading one byte of each batch. The index files are written at open, before the
// timer. With --rss-every K it also prints the process's resident set every K clips.
//
// clips: the clips ferry's side decodes with the same --dir, --clips, --seed and --frames, one
// line each, "<path>\t<first frame>", in the epoch's order: the samples of the same loader over
// a dataset that decodes nothing and writes down each sample's clip_frames(index, seed). The
// other sides read this list (--clip-list), so that every side decodes the same clips.
//
// limit: the clips of --clip-list, or else the same kind of clips (a video uniform among the
// files, its first frame uniform in [0, frames - T]) decoded by W threads, each with every video
// open and its own decoder: an index of each video made once, untimed (presentation timestamps
// sorted, keyframes), then for each clip one av_seek_frame to the keyframe at or before its first
// frame, a flush, and avcodec_send_packet / avcodec_receive_frame of the packets from there until
// its T frames are out, each scaled by libswscale to P x P RGB (bilinear, as ferry). No loader, no
// batches, no file opens (every video is opened by every thread before the timer): what the decoder
// allows.
//
// Each prints one JSON line: {"clips": N, "seconds": S, "clips_per_s": R, "peak_rss_mib": M}.

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.hpp"
#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string mode;
  fs::path dir, clip_list;
  std::size_t clips = 100, batch = 8, rss_every = 0;
  int workers = 2, frames = 16, size = 112;
  std::uint64_t seed = 1;
};

Options parse(int argc, char** argv) {
  if (argc < 2) throw std::invalid_argument("usage: video ferry|limit --dir DIR --clips N ...");
  Options o;
  o.mode = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    const auto n =
        flag == "--dir" || flag == "--clip-list" ? 0 : static_cast<std::size_t>(std::stoull(value));
    if (flag == "--dir") {
      o.dir = value;
    } else if (flag == "--clip-list") {
      o.clip_list = value;
    } else if (flag == "--clips") {
      o.clips = n;
    } else if (flag == "--workers" || flag == "--threads") {
      o.workers = static_cast<int>(n);
    } else if (flag == "--batch") {
      o.batch = n;
    } else if (flag == "--seed") {
      o.seed = n;
    } else if (flag == "--frames") {
      o.frames = static_cast<int>(n);
    } else if (flag == "--size") {
      o.size = static_cast<int>(n);
    } else if (flag == "--rss-every") {
      o.rss_every = n;
    } else {
      throw std::invalid_argument("unknown option " + flag);
    }
  }
  if (o.dir.empty()) throw std::invalid_argument("--dir is required");
  return o;
}

using ferry::bench::peak_rss_mib;
using ferry::bench::rss_mib;
using ferry::bench::seconds_since;

void report(std::size_t clips, double seconds) {
  std::printf(
      "{\"clips\": %zu, \"seconds\": %.4f, \"clips_per_s\": %.3f, \"peak_rss_mib\": %.1f}\n", clips,
      seconds, static_cast<double>(clips) / seconds, peak_rss_mib());
}

std::shared_ptr<ferry::VideoFolder> open_folder(const Options& o) {
  ferry::VideoOptions v;
  v.frames = o.frames;
  v.height = v.width = o.size;
  v.start = ferry::ClipStart::random;
  std::size_t videos = 0;
  for (const auto& e : fs::recursive_directory_iterator(o.dir)) {
    const std::string ext = e.path().extension().string();
    videos += e.is_regular_file() && (ext == ".mp4" || ext == ".mkv") ? 1u : 0u;
  }
  if (videos == 0) throw std::runtime_error("no videos under " + o.dir.string());
  v.clips_per_video = static_cast<int>((o.clips + videos - 1) / videos);
  return ferry::VideoFolder::open(o.dir, v);
}

ferry::LoaderOptions loader_options(const Options& o) {
  ferry::LoaderOptions lo;
  lo.batch_size = o.batch;
  lo.shuffle = true;
  lo.seed = o.seed;
  lo.workers = o.workers;
  lo.device = ferry::Device::cpu();
  lo.autotune = false;
  return lo;
}

int run_ferry(const Options& o) {
  const auto ds = open_folder(o);
  // The first N samples of the shuffled epoch: a Subset would do as well; a smaller dataset
  // with clips_per_video rounded up holds them, so the epoch is cut after N clips.
  ferry::Loader loader(ds, loader_options(o));
  std::size_t clips = 0, next_rss = o.rss_every;
  unsigned sum = 0;
  const auto start = Clock::now();
  for (const ferry::Batch& batch : loader.epoch(0)) {
    sum += batch["video"].data<std::uint8_t>()[0];
    clips += batch.size();
    if (o.rss_every != 0 && clips >= next_rss) {
      std::fprintf(stderr, "rss %zu %.1f\n", clips, rss_mib());
      next_rss += o.rss_every;
    }
    if (clips >= o.clips) break;
  }
  const double seconds = seconds_since(start);
  if (sum == 1u << 31) std::fputc(' ', stderr);  // keeps the reads
  report(clips, seconds);
  return 0;
}

// The folder's samples, each only its index and its clip's first frame: the loader's order and
// per-sample seeds, without a decode.
class ClipList final : public ferry::Dataset {
 public:
  explicit ClipList(std::shared_ptr<const ferry::VideoFolder> folder)
      : folder_(std::move(folder)) {}
  std::size_t size() const override { return folder_->size(); }
  std::vector<ferry::FieldSpec> fields() const override {
    return {{"index", ferry::DType::i64, {}}, {"first", ferry::DType::i64, {}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    const auto i = static_cast<std::int64_t>(index);
    const std::int64_t first = folder_->clip_frames(index, out.seed()).front();
    std::memcpy(out.data(0), &i, sizeof i);
    std::memcpy(out.data(1), &first, sizeof first);
  }

 private:
  std::shared_ptr<const ferry::VideoFolder> folder_;
};

int run_clips(const Options& o) {
  const auto folder = open_folder(o);
  ferry::Loader loader(std::make_shared<ClipList>(folder), loader_options(o));
  std::size_t clips = 0;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const auto* index = batch["index"].data<std::int64_t>();
    const auto* first = batch["first"].data<std::int64_t>();
    for (std::size_t i = 0; i < batch.size() && clips < o.clips; ++i, ++clips) {
      const auto video = static_cast<std::size_t>(index[i]) / (folder->size() / folder->videos());
      std::printf("%s\t%lld\n", folder->path(video).c_str(), static_cast<long long>(first[i]));
    }
    if (clips >= o.clips) break;
  }
  return 0;
}

// ---- the limit -------------------------------------------------------------------------------

struct Video {
  fs::path path;
  std::vector<std::int64_t> pts;      // frame k's presentation timestamp, sorted
  std::vector<std::int64_t> key_pts;  // keyframes' pts, sorted (what av_seek_frame takes in an MP4:
                                      // their dts would land a GOP early)
};

struct FormatCloser {
  void operator()(AVFormatContext* f) const { avformat_close_input(&f); }
};
using Format = std::unique_ptr<AVFormatContext, FormatCloser>;

Format open_format(const fs::path& path, int* stream) {
  AVFormatContext* f = nullptr;
  if (avformat_open_input(&f, path.c_str(), nullptr, nullptr) < 0 ||
      avformat_find_stream_info(f, nullptr) < 0) {
    throw std::runtime_error("cannot open " + path.string());
  }
  Format format(f);
  *stream = av_find_best_stream(f, AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (*stream < 0) throw std::runtime_error("no video stream in " + path.string());
  for (unsigned s = 0; s < f->nb_streams; ++s) {
    if (static_cast<int>(s) != *stream) f->streams[s]->discard = AVDISCARD_ALL;
  }
  return format;
}

Video index_video(const fs::path& path) {
  Video v{path, {}, {}};
  int stream = 0;
  const Format f = open_format(path, &stream);
  AVPacket* pkt = av_packet_alloc();
  while (av_read_frame(f.get(), pkt) >= 0) {
    if (pkt->stream_index == stream) {
      v.pts.push_back(pkt->pts);
      if ((pkt->flags & AV_PKT_FLAG_KEY) != 0) v.key_pts.push_back(pkt->pts);
    }
    av_packet_unref(pkt);
  }
  av_packet_free(&pkt);
  std::sort(v.pts.begin(), v.pts.end());
  std::sort(v.key_pts.begin(), v.key_pts.end());
  return v;
}

struct Clip {
  std::size_t video;
  std::int64_t first;
};

// One thread's decoder state for one video.
struct Open {
  Format format;
  int stream = 0;
  AVCodecContext* codec = nullptr;
};

// Every video open with its decoder, for one thread.
std::vector<Open> open_all(const std::vector<Video>& videos) {
  std::vector<Open> open(videos.size());
  for (std::size_t i = 0; i < videos.size(); ++i) {
    open[i].format = open_format(videos[i].path, &open[i].stream);
    const AVCodecParameters* par = open[i].format->streams[open[i].stream]->codecpar;
    const AVCodec* codec = avcodec_find_decoder(par->codec_id);
    open[i].codec = avcodec_alloc_context3(codec);
    avcodec_parameters_to_context(open[i].codec, par);
    open[i].codec->thread_count = 1;  // as ferry's default decode_threads: the threads run clips
    if (avcodec_open2(open[i].codec, codec, nullptr) < 0) throw std::runtime_error("decoder");
  }
  return open;
}

void decode_clips(const std::vector<Video>& videos, const std::vector<Clip>& clips,
                  const Options& o, std::vector<Open>& open, std::atomic<std::size_t>& next) {
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  SwsContext* sws = nullptr;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(o.frames * o.size * o.size * 3));
  for (std::size_t c = next++; c < clips.size(); c = next++) {
    const Video& v = videos[clips[c].video];
    Open& in = open[clips[c].video];
    const std::int64_t first_pts = v.pts[static_cast<std::size_t>(clips[c].first)];
    const std::int64_t last_pts = v.pts[static_cast<std::size_t>(clips[c].first + o.frames - 1)];
    const auto k = static_cast<std::size_t>(
        std::upper_bound(v.key_pts.begin(), v.key_pts.end(), first_pts) - v.key_pts.begin() - 1);
    if (av_seek_frame(in.format.get(), in.stream, v.key_pts[k], AVSEEK_FLAG_BACKWARD) < 0) {
      throw std::runtime_error("seek failed in " + v.path.string());
    }
    avcodec_flush_buffers(in.codec);
    int got = 0;
    bool eof = false;
    while (got < o.frames) {
      int r = avcodec_receive_frame(in.codec, frame);
      if (r == 0) {
        const std::int64_t ts = frame->best_effort_timestamp;
        if (ts >= first_pts && ts <= last_pts) {
          sws = sws_getCachedContext(sws, frame->width, frame->height,
                                     static_cast<AVPixelFormat>(frame->format), o.size, o.size,
                                     AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr);
          std::uint8_t* dst[1] = {out.data() + static_cast<std::size_t>(got * o.size * o.size * 3)};
          const int stride[1] = {o.size * 3};
          sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, stride);
          ++got;
        }
        av_frame_unref(frame);
        continue;
      }
      if (r != AVERROR(EAGAIN) || eof) {
        if (eof) break;
        throw std::runtime_error("decode failed in " + v.path.string());
      }
      while (true) {
        r = av_read_frame(in.format.get(), pkt);
        if (r < 0) {
          avcodec_send_packet(in.codec, nullptr);
          eof = true;
          break;
        }
        if (pkt->stream_index == in.stream) {
          avcodec_send_packet(in.codec, pkt);
          av_packet_unref(pkt);
          break;
        }
        av_packet_unref(pkt);
      }
    }
    if (got != o.frames) throw std::runtime_error("short clip in " + v.path.string());
  }
  sws_freeContext(sws);
  av_frame_free(&frame);
  av_packet_free(&pkt);
  for (Open& in : open) avcodec_free_context(&in.codec);
}

int run_limit(const Options& o) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(o.dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".mp4" || ext == ".mkv")) paths.push_back(e.path());
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Video> videos;
  for (const fs::path& p : paths) videos.push_back(index_video(p));
  std::vector<Clip> clips;
  if (!o.clip_list.empty()) {
    std::ifstream in(o.clip_list);
    std::string line;
    while (std::getline(in, line) && clips.size() < o.clips) {
      const auto tab = line.find('\t');
      const fs::path path = fs::weakly_canonical(line.substr(0, tab));
      const auto it = std::find_if(paths.begin(), paths.end(), [&](const fs::path& p) {
        return fs::weakly_canonical(p) == path;
      });
      if (tab == std::string::npos || it == paths.end()) {
        throw std::runtime_error("clip list: not a video under --dir: " + line);
      }
      clips.push_back(
          {static_cast<std::size_t>(it - paths.begin()), std::stoll(line.substr(tab + 1))});
    }
  }
  std::mt19937_64 rng(o.seed);
  for (std::size_t i = 0; i < o.clips && o.clip_list.empty(); ++i) {
    const std::size_t v = std::uniform_int_distribution<std::size_t>(0, videos.size() - 1)(rng);
    const auto span = static_cast<std::int64_t>(videos[v].pts.size()) - o.frames;
    clips.push_back({v, std::uniform_int_distribution<std::int64_t>(0, span)(rng)});
  }
  std::vector<std::vector<Open>> open;  // opened before the timer
  for (int t = 0; t < o.workers; ++t) open.push_back(open_all(videos));
  std::atomic<std::size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < o.workers; ++t) {
    threads.emplace_back(
        [&, t] { decode_clips(videos, clips, o, open[static_cast<std::size_t>(t)], next); });
  }
  for (std::thread& t : threads) t.join();
  report(clips.size(), seconds_since(start));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    if (o.mode == "ferry") return run_ferry(o);
    if (o.mode == "limit") return run_limit(o);
    if (o.mode == "clips") return run_clips(o);
    throw std::invalid_argument("mode must be ferry, limit or clips");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "video: %s\n", e.what());
    return 1;
  }
}
