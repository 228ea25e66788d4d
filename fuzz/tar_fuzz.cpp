// The tar index on arbitrary bytes: index_tar() over the bytes in memory, then the same bytes
// as a shard file through WebDataset::open (without a sidecar index: grouping by key, "npy"
// headers, fields) and every sample read into a slot of its own (".cls" text, raw members,
// images). Only DataError may come out of any; an index must describe members inside the bytes,
// in order, and every sample must have a key and non-negative lengths. And the integer-text
// rule on the first bytes: what it reads as an integer is what std::to_string writes.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "datasets/common/integer_text.hpp"
#include "datasets/webdataset/tar_index.hpp"
#include "ferry/error.hpp"
#include "ferry/webdataset.hpp"
#include "pipeline/staging.hpp"

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
      std::vector<std::uint64_t> rows(fields.size(), 0);
      std::size_t ragged = 0;
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (!fields[f].is_ragged()) continue;
        const std::int64_t l = ds->length(i, f);
        if (l < 0) __builtin_trap();
        rows[f] = static_cast<std::uint64_t>(l);
        ++ragged;
      }
      // Sample i alone in a slot sized for it: its ragged fields exactly its lengths' rows.
      const ferry::detail::SlotLayout layout(fields, 1, rows);
      ferry::detail::BatchRows places;
      places.reset(ragged, 1);
      for (std::size_t f = 0; f < fields.size(); ++f) {
        if (layout.ragged[f] >= 0) {
          places.lengths[static_cast<std::size_t>(layout.ragged[f])] =
              static_cast<std::int64_t>(rows[f]);
        }
      }
      std::vector<std::byte> slot(layout.bytes);
      try {
        ds->read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, i, &places));
      } catch (const ferry::DataError&) {
      }
    }
  } catch (const ferry::DataError&) {
  }
  const std::string_view head(reinterpret_cast<const char*>(data), std::min<std::size_t>(size, 24));
  const ferry::detail::ParsedInteger v = ferry::detail::parse_integer_text(head);
  if (v.kind == ferry::detail::IntegerText::ok && std::to_string(v.value) != head) {
    __builtin_trap();
  }
  if (v.kind != ferry::detail::IntegerText::ok && v.value != 0) __builtin_trap();
  return 0;
}
