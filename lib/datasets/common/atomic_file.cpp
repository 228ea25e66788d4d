#include "datasets/common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <system_error>
#include <utility>

#include "datasets/common/file_io.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

// 64 bits nobody can predict: the kernel's random bytes, or, where getrandom() fails, a mix of
// the clock, the process and a counter (the exclusive create still keeps the name ours).
std::uint64_t random_bits() noexcept {
  std::uint64_t bits = 0;
  if (::getrandom(&bits, sizeof bits, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof bits)) {
    return bits;
  }
  static std::atomic<std::uint64_t> counter{0};
  std::uint64_t x =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      (static_cast<std::uint64_t>(::getpid()) << 32) ^
      counter.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed);
  x ^= x >> 30;  // splitmix64's finalizer
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::string hex16(std::uint64_t v) {
  constexpr const char* kHex = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = kHex[v & 15];
  return out;
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path target, FileLabel label)
    : target_(std::move(target)), label_(label) {
  const std::filesystem::path folder = target_.parent_path();
  const std::string base = "." + target_.filename().native() + ".";
  constexpr int kTries = 16;
  int code = EEXIST;
  for (int i = 0; i < kTries && code == EEXIST; ++i) {
    std::filesystem::path name = folder / (base + hex16(random_bits()) + ".tmp");
    // O_EXCL with O_CREAT: whatever already has the name (a planted symbolic link, even a
    // dangling one, or a FIFO) is not opened, and EEXIST tries another name.
    const int fd =
        ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
    if (fd >= 0) {
      fd_.reset(fd);
      temporary_ = std::move(name);
      return;
    }
    code = errno;
  }
  throw DataError(label_.prefix() + "cannot write: " + errno_text(code));
}

AtomicFileWriter::~AtomicFileWriter() {
  fd_.reset();
  if (!committed_ && !temporary_.empty()) ::unlink(temporary_.c_str());
}

void AtomicFileWriter::write(std::span<const std::byte> bytes) {
  if (!fd_ || committed_) throw DataError(label_.prefix() + "cannot write: the file is closed");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : ENOSPC;
      throw DataError(label_.prefix() + "cannot write: " + errno_text(code));
    }
    done += static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
  if (!fd_ || committed_) throw DataError(label_.prefix() + "cannot write: the file is closed");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done,
                               static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int code = n < 0 ? errno : ENOSPC;
      throw DataError(label_.prefix() + "cannot write: " + errno_text(code));
    }
    done += static_cast<std::size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (!fd_ || committed_) throw DataError(label_.prefix() + "cannot write: the file is closed");
  // close() reports what a delayed write could not do (a full disk on NFS).
  // (EINTR: Linux has closed the descriptor all the same.)
  const int fd = fd_.release();
  int code = ::close(fd) == 0 || errno == EINTR ? 0 : errno;
  if (code == 0 && ::rename(temporary_.c_str(), target_.c_str()) != 0) code = errno;
  if (code != 0) throw DataError(label_.prefix() + "cannot write: " + errno_text(code));
  committed_ = true;
}

void write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes,
                           FileLabel label) {
  AtomicFileWriter writer(target, label);
  writer.write(bytes);
  writer.commit();
}

}  // namespace ferry::detail
