#include "ferry/idx_dataset.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/checked.hpp"
#include "datasets/common/file_io.hpp"
#include "datasets/common/host_rows.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

std::uint32_t big_endian(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string hex(std::uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex;
  os.width(8);
  os.fill('0');
  os << v;
  return os.str();
}

// One IDX file of unsigned bytes, plain or gzipped: the constructor reads and checks the
// header, so that nothing is inflated or allocated for data whose size the header gets wrong;
// read_data() then reads exactly the size it gives.
class IdxFile {
 public:
  // `path` as given (for messages), `local` what is read (a URL's copy in the cache).
  IdxFile(const std::filesystem::path& path, const std::filesystem::path& local, std::uint8_t ndims,
          const char* what, const detail::DecompressedLimit& limit)
      : name_(path.string()),
        label_{"IdxDataset", name_},
        file_(local, label_, /*populate=*/false),
        limit_(limit.bytes) {
    const std::span<const std::byte> bytes = file_.bytes();
    if (detail::is_gzip(bytes)) {
      gz_.emplace(bytes, label_, limit);
    } else {
      plain_size_ = bytes.size();
    }
    const std::uint32_t expected_magic = 0x00000800U | ndims;
    std::array<std::uint8_t, 4> word{};
    const std::size_t got = read(word.data(), word.size());
    if (got < word.size()) {
      throw DataError(at(0) + "the file has " + std::to_string(got) +
                      " bytes, not even an IDX header");
    }
    const std::uint32_t magic = big_endian(word.data());
    if (magic != expected_magic) {
      throw DataError(at(0) + "magic number " + hex(magic) + ", expected " + hex(expected_magic) +
                      " (" + what + ": unsigned bytes in " + std::to_string(ndims) + " dimension" +
                      (ndims == 1 ? "" : "s") + ")");
    }
    std::vector<std::int64_t> shape;
    for (std::size_t d = 0; d < ndims; ++d) {
      if (read(word.data(), word.size()) < word.size()) {
        throw DataError(at(done_) + "the header ends early");
      }
      shape.push_back(big_endian(word.data()));
      shape_ += (d != 0 ? " x " : "") + std::to_string(shape.back());
    }
    offset_ = done_;
    dims_ = shape;

    // Sizes from the header, checked before anything is allocated for them.
    const std::string header = at(4) + "the header's dimensions " + shape_;
    bytes_ = static_cast<std::size_t>(detail::checked_numel<DataError>(shape, header));
    if (ndims == 3) {
      // A file of no images still gives their size to the loader, which stages them.
      const std::int64_t image =
          detail::checked_numel<DataError>(std::span<const std::int64_t>(shape).subspan(1), header);
      if (static_cast<std::uint64_t>(image) > limit_) {
        throw DataError(at(8) + "one image of " + std::to_string(shape[1]) + " x " +
                        std::to_string(shape[2]) + " bytes is larger than the limit of " +
                        std::to_string(limit_) + " bytes (IdxOptions::max_decompressed_bytes)");
      }
    }
    const auto total = detail::checked_add<std::uint64_t, DataError>(offset_, bytes_, header);
    if (gz_ && total > limit_) {
      throw DataError(at(4) + "the header says " + shape_ + " = " + std::to_string(bytes_) +
                      " bytes of data, more than a gzipped file may decompress to: the limit is " +
                      std::to_string(limit_) + " bytes (IdxOptions::max_decompressed_bytes)");
    }
    if (plain_size_ && *plain_size_ != total) {
      wrong_size(*plain_size_ >= offset_ ? *plain_size_ - offset_ : 0, false);
    }
  }

  const std::string& name() const noexcept { return name_; }
  /// The header's dimensions, each 0 .. 2^32 - 1, whose product fits in int64.
  const std::vector<std::int64_t>& dims() const noexcept { return dims_; }

  // Reads the data, the size the header gives, into `out`. Memory grows with what the file
  // really holds (geometrically), so a header that promises more than a short file holds costs
  // nothing; one byte past that size is an error, so a stream that would inflate further is
  // not read on.
  void read_data(std::vector<std::uint8_t>& out) {
    constexpr std::size_t kFirst = std::size_t{1} << 20;
    out.clear();
    std::size_t got = 0;
    if (plain_size_) out.resize(bytes_);  // the file's size is known to match
    while (got < bytes_) {
      if (got == out.size()) out.resize(std::min(bytes_, std::max(kFirst, got * 2)));
      const std::size_t n = read(out.data() + got, out.size() - got);
      if (n == 0) break;
      got += n;
    }
    if (got < bytes_) wrong_size(got, false);
    std::uint8_t extra = 0;
    if (read(&extra, 1) != 0) wrong_size(got + 1, true);
  }

 private:
  // "IdxDataset: <file>: byte <offset>: ".
  std::string at(std::uint64_t byte) const { return label_.at(byte); }

  [[noreturn]] void wrong_size(std::uint64_t found, bool more) const {
    throw DataError(at(offset_) + "the header says " + shape_ + " = " + std::to_string(bytes_) +
                    " bytes of data, the file has " + (more ? "more" : std::to_string(found)));
  }

  // Reads up to n bytes (fewer at the end of the file) and counts them in done_.
  // \throws DataError for a corrupt or cut gzip stream.
  std::size_t read(std::uint8_t* to, std::size_t n) {
    std::size_t got = 0;
    if (gz_) {
      got = gz_->read(to, n);
    } else {
      const std::span<const std::byte> bytes = file_.bytes();
      got = std::min<std::size_t>(n, bytes.size() - static_cast<std::size_t>(done_));
      if (got != 0) std::memcpy(to, bytes.data() + done_, got);
    }
    done_ += got;
    return got;
  }

  std::string name_;
  detail::FileLabel label_;
  detail::MappedFile file_;
  std::optional<detail::GzipReader> gz_;  // for a gzipped file
  std::uint64_t limit_;
  std::optional<std::uint64_t> plain_size_;  // a plain file's size
  std::uint64_t done_ = 0;                   // bytes read (decompressed)
  std::string shape_;                        // "5 x 28 x 28"
  std::vector<std::int64_t> dims_;
  std::size_t offset_ = 0;  // of the data
  std::size_t bytes_ = 0;   // of data
};

}  // namespace

std::shared_ptr<IdxDataset> IdxDataset::open(const std::filesystem::path& images,
                                             const std::filesystem::path& labels,
                                             const IdxOptions& options) {
  const detail::DecompressedLimit limit(options.max_decompressed_bytes,
                                        "IdxOptions::max_decompressed_bytes");
  // URLs are fetched into the cache first (both at once), then read from there.
  std::vector<detail::remote::Request> requests;
  for (const auto* p : {&images, &labels}) {
    if (detail::remote::is_url(p->native())) requests.push_back({p->string(), {}, false});
  }
  std::vector<std::optional<detail::remote::CachedFile>> held;
  if (!requests.empty()) held = detail::remote::fetch_files(requests, options.remote, "IdxDataset");
  std::size_t next = 0;
  const auto local = [&](const std::filesystem::path& p) {
    return detail::remote::is_url(p.native()) ? held[next++]->path() : p;
  };
  const std::filesystem::path images_local = local(images);
  const std::filesystem::path labels_local = local(labels);
  IdxFile im(images, images_local, 3, "images", limit);
  IdxFile lb(labels, labels_local, 1, "labels", limit);
  if (im.dims()[0] != lb.dims()[0]) {
    throw DataError("IdxDataset: " + std::to_string(im.dims()[0]) + " images in " + im.name() +
                    " but " + std::to_string(lb.dims()[0]) + " labels in " + lb.name());
  }
  const std::int64_t count = im.dims()[0];
  std::shared_ptr<IdxDataset> ds(new IdxDataset());
  ds->rows_ = im.dims()[1];
  ds->cols_ = im.dims()[2];
  auto pixels = std::make_shared<std::vector<std::uint8_t>>();
  im.read_data(*pixels);
  auto read_labels = std::make_shared<std::vector<std::uint8_t>>();
  lb.read_data(*read_labels);
  auto ids = std::make_shared<std::vector<std::int64_t>>(read_labels->begin(), read_labels->end());
  ds->table_ = std::make_shared<TensorDataset>(std::vector<std::pair<std::string, Tensor>>{
      {"image", detail::view_rows(pixels, {count, ds->rows_, ds->cols_})},
      {"label", detail::view_rows(std::move(ids), {count})}});
  ds->pixels_ = std::move(pixels);
  ds->labels_ = std::move(read_labels);
  return ds;
}

std::shared_ptr<IdxDataset> IdxDataset::to(Device device) const {
  std::shared_ptr<IdxDataset> ds(new IdxDataset());
  ds->rows_ = rows_;
  ds->cols_ = cols_;
  ds->labels_ = labels_;
  if (device == this->device()) {
    ds->table_ = table_;
    ds->pixels_ = pixels_;
  } else if (device.is_cpu()) {
    // Back from a GPU: into host vectors again, which the tensors view.
    const std::vector<Tensor>& t = table_->tensors();
    auto pixels = detail::host_values<std::uint8_t>(t[0]);
    ds->table_ = std::make_shared<TensorDataset>(std::vector<std::pair<std::string, Tensor>>{
        {"image", detail::view_rows(pixels, t[0].shape())},
        {"label", detail::view_rows(detail::host_values<std::int64_t>(t[1]), t[1].shape())}});
    ds->pixels_ = std::move(pixels);
  } else {
    ds->table_ = table_->to(device);
  }
  return ds;
}

const std::vector<std::uint8_t>& IdxDataset::pixels() const {
  if (!pixels_) {
    throw ConfigError("IdxDataset: pixels() are host memory, and the images are on " +
                      device().str() + " (to(Device::cpu()) brings them back)");
  }
  return *pixels_;
}

}  // namespace ferry
