// The tar index on arbitrary bytes: index_tar() over the bytes in memory, then the same bytes
// as a shard file through WebDataset::open (without a sidecar index: grouping by key, "npy"
// headers, fields). Only DataError may come out of either; an index must describe members
// inside the bytes, in order, and every sample must have a key and non-negative lengths.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "datasets/webdataset/tar_index.hpp"
#include "ferry/error.hpp"
#include "ferry/webdataset.hpp"

namespace {

// A file in memory, named by its /proc/self/fd path.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("shard", 0)) {
    if (fd_ < 0) __builtin_trap();
    std::size_t done = 0;
    while (done < size) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) __builtin_trap();
      done += static_cast<std::size_t>(n);
    }
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ferry::detail::FileLabel label{"fuzz", "bytes"};
  try {
    const auto members = ferry::detail::index_tar(
        size,
        [&](std::uint64_t offset, std::span<std::byte> out) -> std::size_t {
          if (offset >= size) return 0;
          const std::size_t n = std::min<std::size_t>(out.size(), size - offset);
          std::memcpy(out.data(), data + offset, n);
          return n;
        },
        label);
    std::uint64_t after = 0;
    for (const auto& m : members) {
      if (m.header < after || m.offset < m.header + 512 || m.offset + m.size > size) {
        __builtin_trap();
      }
      after = m.offset + m.size;
    }
  } catch (const ferry::DataError&) {
  }
  const MemFile file(data, size);
  try {
    ferry::WebDatasetOptions options;
    options.index_files = false;
    options.image.height = options.image.width = 8;
    options.image.max_pixels = 1 << 16;
    const auto ds = ferry::WebDataset::open({file.path()}, options);
    const auto fields = ds->fields();
    for (std::size_t i = 0; i < ds->size(); ++i) {
      if (ds->key(i).empty()) __builtin_trap();
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (fields[f].is_ragged() && ds->length(i, f) < 0) __builtin_trap();
      }
    }
  } catch (const ferry::DataError&) {
  }
  return 0;
}
