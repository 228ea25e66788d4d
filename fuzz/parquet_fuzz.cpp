// ParquetDataset on arbitrary bytes: the first byte picks the options (Missing::nan, and
// whether every text column is read as categorical), the rest is the file, handed over as an
// in-memory file. The footer, the schema, and every row group's columns are decoded (as a read
// of any of its rows does), then the rows (up to 4096) of the columns of a fixed shape are read.
// Only DataError, or ConfigError for a column of a type not read, may come out.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "datasets/table/parquet_table.hpp"
#include "ferry/error.hpp"
#include "ferry/table.hpp"
#include "pipeline/staging.hpp"

namespace {

class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("parquet", 0)) {
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
  const std::uint8_t o = data[0];
  const MemFile file(data + 1, size - 1);
  ferry::TableOptions options;
  options.missing = (o & 1) != 0 ? ferry::Missing::nan : ferry::Missing::error;
  try {
    if ((o & 2) != 0) {
      // Every text column categorical: its names from a first open.
      const auto first = ferry::detail::open_parquet({file.path()}, options);
      for (const auto& c : first->columns) {
        if (c.kind == ferry::detail::TableField::bytes) options.categorical.push_back(c.name);
      }
    }
    const auto table = ferry::detail::open_parquet({file.path()}, options);
    for (std::size_t g = 0; g < table->groups.size(); ++g) (void)table->decode(g);
    // Then the first rows read, through read(), of the columns of a fixed shape (numbers,
    // codes, fixed-size lists).
    ferry::TableOptions fixed = options;
    fixed.columns.clear();
    for (const auto& f : table->fields) {
      if (!f.is_ragged()) fixed.columns.push_back(f.name);
    }
    fixed.categorical.clear();
    for (const auto& c : options.categorical) {
      if (std::find(fixed.columns.begin(), fixed.columns.end(), c) != fixed.columns.end()) {
        fixed.categorical.push_back(c);
      }
    }
    if (fixed.columns.empty()) return 0;
    const auto ds = ferry::ParquetDataset::open({file.path()}, fixed);
    const ferry::detail::SlotLayout layout(ds->fields(), 1);
    // A sample's bytes come from the schema, and a fixed-size list may claim billions: a loader
    // refuses that by its memory budget (ConfigError); this harness reads samples of at most
    // 64 MiB.
    if (layout.bytes > (std::size_t{64} << 20)) return 0;
    std::vector<std::byte> batch(layout.bytes);
    for (std::size_t i = 0; i < ds->size() && i < 4096; ++i) {
      try {
        ds->read(i, ferry::detail::SampleRefs::make(&layout, batch.data(), 0, 0));
      } catch (const ferry::DataError&) {
      }
    }
  } catch (const ferry::DataError&) {
  } catch (const ferry::ConfigError& e) {
    const std::string text = e.what();
    // A type not read; an Array extension's metadata in the stored Arrow schema not a shape.
    if (text.find("which ferry does not read") == std::string::npos &&
        text.find("ARROW:schema: ") == std::string::npos) {
      const std::string what = e.what();
      std::fprintf(stderr, "unexpected ConfigError: ");
      std::fwrite(what.data(), 1, what.size(), stderr);
      std::fprintf(stderr, "\n");
      __builtin_trap();
    }
  }
  return 0;
}
