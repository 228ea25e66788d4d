#include "ferry/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <system_error>
#include <utility>

#include "datasets/image/image_decode.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace fs = std::filesystem;

namespace {

bool hidden(const fs::path& p) {
  const std::string name = p.filename().native();
  return name.empty() || name.front() == '.';
}

bool image_extension(const fs::path& p) {
  std::string ext = p.extension().native();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The entries of `dir` that pass `keep`, sorted by name.
template <class Keep>
std::vector<fs::path> list_sorted(const fs::path& dir, Keep keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!hidden(it->path()) && keep(*it)) out.push_back(it->path());
  }
  if (ec) throw DataError("ImageFolder: " + dir.string() + ": cannot list: " + ec.message());
  std::sort(out.begin(), out.end(), [](const fs::path& a, const fs::path& b) {
    return a.filename().native() < b.filename().native();
  });
  return out;
}

// `i` when it is a sample of a folder of `size` images.
std::size_t sample_index(std::size_t i, std::size_t size) {
  if (i >= size) {
    throw ConfigError("ImageFolder: sample index " + std::to_string(i) + " out of range (" +
                      std::to_string(size) + " images)");
  }
  return i;
}

}  // namespace

std::shared_ptr<ImageFolder> ImageFolder::open(const fs::path& root, const ImageOptions& options) {
  detail::check_image_options(options, "ImageFolder");
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (!fs::exists(status)) {
    throw DataError("ImageFolder: " + root.string() + ": no such folder" +
                    (ec && ec != std::errc::no_such_file_or_directory ? " (" + ec.message() + ")"
                                                                      : std::string()));
  }
  if (!fs::is_directory(status))
    throw DataError("ImageFolder: " + root.string() + ": not a folder");

  std::shared_ptr<ImageFolder> ds(new ImageFolder());
  ds->options_ = options;
  ds->max_file_bytes_ = detail::max_file_bytes(options);
  // Symbolic links are followed; hidden entries (".name") are skipped.
  const std::vector<fs::path> class_dirs = list_sorted(root, [](const fs::directory_entry& e) {
    std::error_code ignored;
    return e.is_directory(ignored);
  });
  for (const fs::path& dir : class_dirs) {
    const auto label = static_cast<std::int64_t>(ds->classes_.size());
    ds->classes_.push_back(dir.filename().string());
    for (fs::path& file : list_sorted(dir, [](const fs::directory_entry& e) {
           std::error_code ignored;
           return e.is_regular_file(ignored) && image_extension(e.path());
         })) {
      ds->files_.push_back(std::move(file));
      ds->labels_.push_back(label);
    }
  }
  if (ds->files_.empty()) {
    throw DataError("ImageFolder: " + root.string() +
                    ": no images (.jpg, .jpeg or .png files in class folders root/<class>/)");
  }
  return ds;
}

std::vector<FieldSpec> ImageFolder::fields() const {
  return {image_field(options_), {"label", DType::i64, {}}};
}

void ImageFolder::read(std::size_t index, SampleRef out) const {
  const fs::path& file = files_[sample_index(index, files_.size())];
  // Per file: one open, one fstat, one read (into this thread's buffer), the decode. The options
  // were checked by open(), and the name messages start with is built in a buffer this thread
  // keeps, so that a 28 × 28 PNG costs no allocation of its own.
  thread_local std::string name;
  name.assign("ImageFolder: ");
  name += file.native();
  detail::decode_image(detail::read_file_bytes(file, name, max_file_bytes_), options_, out.seed(),
                       out.as<std::uint8_t>(0), name);
  *out.as<std::int64_t>(1) = labels_[index];
}

const fs::path& ImageFolder::path(std::size_t i) const {
  return files_[sample_index(i, files_.size())];
}

std::int64_t ImageFolder::label(std::size_t i) const {
  return labels_[sample_index(i, labels_.size())];
}

std::vector<std::size_t> ImageFolder::class_counts() const {
  std::vector<std::size_t> counts(classes_.size(), 0);
  for (const std::int64_t label : labels_) ++counts[static_cast<std::size_t>(label)];
  return counts;
}

}  // namespace ferry
