// TokenDataset::open on arbitrary bytes: the first byte picks the options (seq_len 1..4, stride
// 0..3, output i32 or i64, and the raw token type), the rest is the file, handed over as an
// in-memory file (so its format is told by its bytes: an llm.c header, NumPy's magic, or raw
// tokens). Only DataError, or ConfigError for a file too short for one window, may come out;
// the first and last windows of a dataset that opens are read.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ferry/error.hpp"
#include "ferry/token_dataset.hpp"
#include "pipeline/staging.hpp"

namespace {

// A file in memory, named by its /proc/self/fd path.
class MemFile {
 public:
  MemFile(const std::uint8_t* data, std::size_t size) : fd_(memfd_create("tokens", 0)) {
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

constexpr ferry::DType kRaw[] = {ferry::DType::u8, ferry::DType::u16, ferry::DType::u32,
                                 ferry::DType::i32, ferry::DType::i64};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t o = data[0];
  ferry::TokenOptions options;
  options.seq_len = 1 + (o & 3);
  options.stride = (o >> 2) & 3;
  options.dtype = (o & 0x10) != 0 ? ferry::DType::i32 : ferry::DType::i64;
  options.raw_dtype = kRaw[(o >> 5) % 5];
  const MemFile file(data + 1, size - 1);
  try {
    const auto ds = ferry::TokenDataset::open({file.path()}, options);
    const ferry::detail::SlotLayout layout(ds->fields(), 2);
    std::vector<std::byte> batch(layout.bytes);
    ds->read(0, ferry::detail::SampleRefs::make(&layout, batch.data(), 0, 0));
    ds->read(ds->size() - 1, ferry::detail::SampleRefs::make(&layout, batch.data(), 1, 0));
  } catch (const ferry::DataError&) {
  } catch (const ferry::ConfigError& e) {
    if (std::string(e.what()).find("no window") == std::string::npos) __builtin_trap();
  }
  return 0;
}
