#include "ferry/csv_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "core/checked.hpp"
#include "datasets/csv_parse.hpp"
#include "ferry/error.hpp"

namespace ferry {
namespace {

std::string errno_text(int code) {
  return std::strerror(code);  // NOLINT(concurrency-mt-unsafe): messages only
}

// A file's bytes, mapped read-only (an empty file maps nothing).
class Mapping {
 public:
  explicit Mapping(const std::filesystem::path& path) {
    const std::string name = path.string();
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
      throw DataError("CsvDataset: " + name + ": cannot open: " + errno_text(errno));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      const int code = errno;
      ::close(fd_);
      throw DataError("CsvDataset: " + name + ": cannot read: " + errno_text(code));
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw DataError("CsvDataset: " + name + ": cannot read: not a regular file");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    if (size_ == 0) return;
    void* at = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd_, 0);
    if (at == MAP_FAILED) {
      const int code = errno;
      ::close(fd_);
      throw DataError("CsvDataset: " + name + ": cannot map: " + errno_text(code));
    }
    data_ = static_cast<const char*>(at);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data_ != nullptr) {
      ::munmap(const_cast<char*>(data_), size_);
    }
    ::close(fd_);
  }

  std::string_view bytes() const noexcept { return {data_, size_}; }

 private:
  int fd_ = -1;
  const char* data_ = nullptr;
  std::size_t size_ = 0;
};

bool gzipped(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
         static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Decompresses a gzip file (one member or several, one after another) into memory: at most
// `limit` bytes, holding no more than limit + 1 before it gives up.
std::string gunzip(std::string_view in, const std::string& name, std::uint64_t limit) {
  // One byte past the limit is room enough to tell that the limit is passed.
  const std::uint64_t room = std::min<std::uint64_t>(
      detail::try_add<std::uint64_t>(limit, 1).value_or(UINT64_MAX), SIZE_MAX);
  const auto over = [&](std::size_t read) {
    return DataError("CsvDataset: " + name + ": byte " + std::to_string(read) +
                     ": decompresses to more than the limit of " + std::to_string(limit) +
                     " bytes (CsvOptions::max_decompressed_bytes)");
  };
  std::string out;
  // The last member's size (mod 2^32) is a good first guess of the whole.
  std::size_t guess = in.size() * 4;
  if (in.size() >= 4) {
    const auto* tail = reinterpret_cast<const unsigned char*>(in.data() + in.size() - 4);
    const std::size_t isize = std::size_t{tail[0]} | (std::size_t{tail[1]} << 8) |
                              (std::size_t{tail[2]} << 16) | (std::size_t{tail[3]} << 24);
    if (isize >= in.size() / 2 && isize / 16 <= in.size()) guess = isize + 1;  // plausible
  }
  out.resize(static_cast<std::size_t>(
      std::min<std::uint64_t>(std::max<std::size_t>(guess, 1 << 16), room)));
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) {
    throw DataError("CsvDataset: " + name + ": cannot decompress: out of memory");
  }
  std::size_t read = 0;
  std::size_t written = 0;
  for (;;) {
    if (written == out.size()) {
      if (written > limit) {
        inflateEnd(&z);
        throw over(read);
      }
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out.size() * 2, room)));
    }
    const std::size_t in_now = std::min<std::size_t>(in.size() - read, UINT_MAX);
    const std::size_t out_now = std::min<std::size_t>(out.size() - written, UINT_MAX);
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + read));
    z.avail_in = static_cast<uInt>(in_now);
    z.next_out = reinterpret_cast<Bytef*>(out.data() + written);
    z.avail_out = static_cast<uInt>(out_now);
    const int rc = inflate(&z, Z_NO_FLUSH);
    read += in_now - z.avail_in;
    written += out_now - z.avail_out;
    if (rc == Z_STREAM_END) {
      // Another member follows, or the end (anything else after the last member is ignored,
      // as gzip does).
      if (!gzipped(in.substr(read))) break;
      inflateReset(&z);
      continue;
    }
    if (rc == Z_OK || (rc == Z_BUF_ERROR && z.avail_out == 0)) continue;
    const std::string why = rc == Z_BUF_ERROR  ? "the stream ends early"
                            : z.msg != nullptr ? z.msg
                                               : "error " + std::to_string(rc);
    inflateEnd(&z);
    throw DataError("CsvDataset: " + name + ": byte " + std::to_string(read) +
                    ": cannot decompress: " + why);
  }
  inflateEnd(&z);
  if (written > limit) throw over(read);
  out.resize(written);
  return out;
}

}  // namespace

/// Fills a CsvDataset from a parsed table.
struct CsvBuilder {
  static std::shared_ptr<CsvDataset> build(detail::CsvTable t) {
    std::shared_ptr<CsvDataset> ds(new CsvDataset());
    ds->rows_ = t.rows;
    ds->num_features_ = t.num_features;
    ds->has_label_ = t.has_label;
    ds->classes_mode_ = t.classes_mode;
    ds->feature_names_ = std::move(t.feature_names);
    ds->classes_ = std::move(t.classes);
    ds->features_ = std::move(t.features);
    ds->labels_ = std::move(t.labels);
    ds->targets_ = std::move(t.targets);
    return ds;
  }
};

std::shared_ptr<CsvDataset> CsvDataset::open(const std::filesystem::path& path,
                                             const CsvOptions& options) {
  detail::check_csv_options(options);
  const std::string name = path.string();
  const Mapping file(path);
  if (gzipped(file.bytes())) {
    const std::string text =
        gunzip(file.bytes(), name, detail::decompressed_limit(options.max_decompressed_bytes));
    return CsvBuilder::build(detail::parse_csv(text, options, name));
  }
  return CsvBuilder::build(detail::parse_csv(file.bytes(), options, name));
}

std::vector<FieldSpec> CsvDataset::fields() const {
  std::vector<FieldSpec> out = {
      {"features", DType::f32, {static_cast<std::int64_t>(num_features_)}, {}}};
  if (has_label_) out.push_back({"label", classes_mode_ ? DType::i64 : DType::f32, {}, {}});
  return out;
}

void CsvDataset::read(std::size_t index, SampleRef out) const {
  std::memcpy(out.data(0), features_.data() + index * num_features_, num_features_ * sizeof(float));
  if (!has_label_) return;
  if (classes_mode_) {
    *out.as<std::int64_t>(1) = labels_[index];
  } else {
    *out.as<float>(1) = targets_[index];
  }
}

void CsvDataset::prefetch(std::size_t index) const noexcept {
  if (index >= rows_) return;
  const auto* row = reinterpret_cast<const char*>(features_.data() + index * num_features_);
  const std::size_t bytes = num_features_ * sizeof(float);
  for (std::size_t at = 0; at < bytes && at < 1024; at += 64) __builtin_prefetch(row + at);
  if (has_label_) {
    if (classes_mode_) {
      __builtin_prefetch(labels_.data() + index);
    } else {
      __builtin_prefetch(targets_.data() + index);
    }
  }
}

}  // namespace ferry
