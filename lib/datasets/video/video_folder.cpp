#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <system_error>
#include <utility>

#include "datasets/video/video_av.hpp"
#include "datasets/video/video_index.hpp"
#include "ferry/error.hpp"
#include "ferry/video.hpp"

namespace ferry {
namespace fs = std::filesystem;

namespace {

bool video_folder_hidden(const fs::path& p) {
  const std::string name = p.filename().native();
  return name.empty() || name.front() == '.';
}

bool video_folder_extension(const fs::path& p) {
  std::string ext = p.extension().native();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".mp4" || ext == ".mkv" || ext == ".webm" || ext == ".avi" || ext == ".mov";
}

// The entries of `dir` that pass `keep`, sorted by name.
template <class Keep>
std::vector<fs::path> video_folder_list(const fs::path& dir, Keep keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!video_folder_hidden(it->path()) && keep(*it)) out.push_back(it->path());
  }
  if (ec) throw DataError("VideoFolder: " + dir.string() + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().native() < b.filename().native();
  });
  return out;
}

std::string video_folder_name(const fs::path& file) { return "VideoFolder: " + file.string(); }

}  // namespace

VideoFolder::~VideoFolder() = default;

std::shared_ptr<VideoFolder> VideoFolder::open(const fs::path& root, VideoOptions options) {
  detail::video::check_video_options(options, "VideoFolder");
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (!fs::exists(status)) throw DataError("VideoFolder: " + root.string() + ": no such folder");
  if (!fs::is_directory(status))
    throw DataError("VideoFolder: " + root.string() + ": not a folder");

  std::shared_ptr<VideoFolder> ds(new VideoFolder());
  ds->options_ = options;
  ds->clips_ = static_cast<std::size_t>(options.clips_per_video);
  const std::vector<fs::path> class_dirs =
      video_folder_list(root, [](const fs::directory_entry& e) {
        std::error_code ignored;
        return e.is_directory(ignored);
      });
  for (const fs::path& dir : class_dirs) {
    const auto label = static_cast<std::int64_t>(ds->classes_.size());
    ds->classes_.push_back(dir.filename().string());
    for (fs::path& file : video_folder_list(dir, [](const fs::directory_entry& e) {
           std::error_code ignored;
           return e.is_regular_file(ignored) && video_folder_extension(e.path());
         })) {
      ds->files_.push_back(std::move(file));
      ds->labels_.push_back(label);
    }
  }
  if (ds->files_.empty()) {
    throw DataError("VideoFolder: " + root.string() +
                    ": no videos (.mp4, .mkv, .webm, .avi or .mov files in class folders "
                    "root/<class>/)");
  }
  // Every video indexed, side by side; a bad one keeps its error for its samples.
  const std::size_t n = ds->files_.size();
  ds->indexes_.resize(n);
  ds->errors_.resize(n);
  const auto index_one = [&](std::size_t v) {
    const std::string name = video_folder_name(ds->files_[v]);
    try {
      ds->indexes_[v] = std::make_shared<const detail::VideoIndex>(
          detail::video::load_video_index(ds->files_[v], name, options));
    } catch (const DataError& e) {
      ds->errors_[v] = e.what();
    } catch (const std::bad_alloc&) {
      ds->errors_[v] = name + ": out of memory while indexing";
    }
  };
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot see oneTBB's hand-off of this loop's body to its threads (libtbb is
  // not instrumented, and a lambda's frames are only "operator()" to a suppression), and reports
  // the body's reads of this function's locals as races: one by one there.
  for (std::size_t v = 0; v < n; ++v) index_one(v);
#else
  tbb::parallel_for(std::size_t{0}, n, index_one);
#endif
  return ds;
}

std::vector<FieldSpec> VideoFolder::fields() const {
  return {{"video", DType::u8, {options_.frames, options_.height, options_.width, 3}},
          {"label", DType::i64, {}}};
}

const fs::path& VideoFolder::path(std::size_t video) const {
  if (video >= files_.size()) {
    throw ConfigError("VideoFolder: video " + std::to_string(video) + " out of range (" +
                      std::to_string(files_.size()) + " videos)");
  }
  return files_[video];
}

std::int64_t VideoFolder::label(std::size_t video) const {
  static_cast<void>(path(video));
  return labels_[video];
}

std::int64_t VideoFolder::frame_count(std::size_t video) const {
  static_cast<void>(path(video));
  if (!errors_[video].empty()) throw DataError(errors_[video]);
  return static_cast<std::int64_t>(indexes_[video]->pts.size());
}

std::vector<std::int64_t> VideoFolder::clip_frames(std::size_t index, std::uint64_t seed) const {
  if (index >= size()) {
    throw ConfigError("VideoFolder: sample index " + std::to_string(index) + " out of range (" +
                      std::to_string(size()) + " samples)");
  }
  return detail::video::clip_frame_numbers(frame_count(index / clips_), options_, seed);
}

void VideoFolder::read(std::size_t index, SampleRef out) const {
  const std::vector<std::int64_t> frames = clip_frames(index, out.seed());
  const std::size_t video = index / clips_;
  const std::string name = video_folder_name(files_[video]);
  detail::video::AvInput in = detail::video::AvInput::open_file(files_[video], name);
  detail::video::decode_clip(in, *indexes_[video], frames, options_, out.as<std::uint8_t>(0), name);
  *out.as<std::int64_t>(1) = labels_[video];
}

}  // namespace ferry
