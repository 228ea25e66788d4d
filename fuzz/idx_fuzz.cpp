// IdxDataset::open on arbitrary bytes: the input is split in two files (images, labels) at a
// point its first byte picks, each handed over as an in-memory file, gzipped or not as its bytes
// say, with a decompression limit of 16 MiB. Only DataError may come out; every sample of a
// dataset that opens must be readable.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/idx_dataset.hpp"
#include "pipeline/staging.hpp"

namespace {

// A file in memory, named by its /proc/self/fd path.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("idx", 0)) {
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
  if (size == 0) return 0;
  const std::size_t split = 1 + (data[0] * (size - 1)) / 255;
  const MemFile images(data + 1, split - 1);
  const MemFile labels(data + split, size - split);
  try {
    ferry::IdxOptions options;
    options.max_decompressed_bytes = std::uint64_t{16} << 20;
    const auto ds = ferry::IdxDataset::open(images.path(), labels.path(), options);
    const auto fields = ds->fields();
    const std::size_t n = ds->size() < 4 ? ds->size() : 4;
    if (n == 0) return 0;
    const ferry::detail::SlotLayout layout(fields, n);
    std::vector<std::byte> batch(layout.bytes);
    for (std::size_t i = 0; i < n; ++i) {
      ds->read(ds->size() - 1 - i, ferry::detail::SampleRefs::make(&layout, batch.data(), i, 0));
    }
  } catch (const ferry::DataError&) {
  }
  return 0;
}
