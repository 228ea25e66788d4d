#include "ferry/idx_dataset.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <sstream>
#include <string>

#include "ferry/error.hpp"

namespace ferry {
namespace {

// The whole file, decompressed when it is gzip (zlib reads plain files as they are).
std::vector<std::uint8_t> slurp(const std::filesystem::path& path) {
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    throw DataError(
        "IdxDataset: " + path.string() + ": cannot open: " +
        (errno != 0 ? std::strerror(errno) : "out of memory"));  // NOLINT(concurrency-mt-unsafe)
  }
  std::vector<std::uint8_t> out;
  std::uint8_t chunk[1 << 16];
  for (;;) {
    const int n = gzread(file, chunk, sizeof chunk);
    if (n < 0) {
      int code = 0;
      const std::string why = gzerror(file, &code);
      gzclose(file);
      throw DataError("IdxDataset: " + path.string() + ": byte " + std::to_string(out.size()) +
                      ": cannot read: " + why);
    }
    if (n == 0) break;
    out.insert(out.end(), chunk, chunk + n);
  }
  gzclose(file);
  return out;
}

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

struct Idx {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> bytes;  // header included
  std::size_t data_offset = 0;
};

// Reads an IDX file of unsigned bytes in `ndims` dimensions, checking its header and size.
Idx read_idx(const std::filesystem::path& path, std::uint8_t ndims, const char* what) {
  Idx idx;
  idx.bytes = slurp(path);
  const std::uint32_t expected_magic = 0x00000800u | ndims;
  if (idx.bytes.size() < 4) {
    throw DataError("IdxDataset: " + path.string() + ": byte 0: the file has " +
                    std::to_string(idx.bytes.size()) + " bytes, not even an IDX header");
  }
  const std::uint32_t magic = big_endian(idx.bytes.data());
  if (magic != expected_magic) {
    throw DataError("IdxDataset: " + path.string() + ": byte 0: magic number " + hex(magic) +
                    ", expected " + hex(expected_magic) + " (" + what + ": unsigned bytes in " +
                    std::to_string(ndims) + " dimension" + (ndims == 1 ? "" : "s") + ")");
  }
  idx.data_offset = 4 + 4 * std::size_t{ndims};
  if (idx.bytes.size() < idx.data_offset) {
    throw DataError("IdxDataset: " + path.string() + ": byte " + std::to_string(idx.bytes.size()) +
                    ": the header ends early");
  }
  std::size_t expected = 1;
  std::string shape;
  for (std::size_t d = 0; d < ndims; ++d) {
    const std::uint32_t n = big_endian(idx.bytes.data() + 4 + 4 * d);
    idx.dims.push_back(n);
    expected *= n;
    shape += (d ? " x " : "") + std::to_string(n);
  }
  const std::size_t found = idx.bytes.size() - idx.data_offset;
  if (found != expected) {
    throw DataError("IdxDataset: " + path.string() + ": byte " + std::to_string(idx.data_offset) +
                    ": the header says " + shape + " = " + std::to_string(expected) +
                    " bytes of data, the file has " + std::to_string(found));
  }
  return idx;
}

}  // namespace

std::shared_ptr<IdxDataset> IdxDataset::open(const std::filesystem::path& images,
                                             const std::filesystem::path& labels) {
  Idx im = read_idx(images, 3, "images");
  Idx lb = read_idx(labels, 1, "labels");
  if (im.dims[0] != lb.dims[0]) {
    throw DataError("IdxDataset: " + std::to_string(im.dims[0]) + " images in " + images.string() +
                    " but " + std::to_string(lb.dims[0]) + " labels in " + labels.string());
  }
  std::shared_ptr<IdxDataset> ds(new IdxDataset());
  ds->count_ = im.dims[0];
  ds->rows_ = im.dims[1];
  ds->cols_ = im.dims[2];
  ds->pixels_.assign(im.bytes.begin() + static_cast<std::ptrdiff_t>(im.data_offset),
                     im.bytes.end());
  ds->labels_.assign(lb.bytes.begin() + static_cast<std::ptrdiff_t>(lb.data_offset),
                     lb.bytes.end());
  return ds;
}

std::vector<FieldSpec> IdxDataset::fields() const {
  return {{"image", DType::u8, {rows_, cols_}}, {"label", DType::i64, {}}};
}

void IdxDataset::read(std::size_t index, SampleRef out) const {
  const auto n = static_cast<std::size_t>(rows_ * cols_);
  std::memcpy(out.data(0), pixels_.data() + index * n, n);
  *out.as<std::int64_t>(1) = labels_[index];
}

void IdxDataset::prefetch(std::size_t index) const noexcept {
  const auto n = static_cast<std::size_t>(rows_ * cols_);
  for (std::size_t at = 0; at < n && at < 1024; at += 64)
    __builtin_prefetch(pixels_.data() + index * n + at);
}

}  // namespace ferry
