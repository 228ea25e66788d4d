#pragma once

// How the datasets read their files, written once: a whole file into memory under a size
// ceiling (one open and one read), a file mapped, and a gzip stream inflated under the
// decompressed ceiling of include/ferry/limits.hpp. Every DataError starts with the reader's
// class and the file ("IdxDataset: t10k.gz: "), and names the byte where one applies.
//
// OpenFile is the only way ferry opens a file to read it: without blocking (O_NONBLOCK: a FIFO
// never blocks the open, and is then refused), once (what it checks is the descriptor it
// returns, by fstat, never the name a second time), and regular files only. Whatever holds a
// file open for longer takes the descriptor from it (OpenFile::take()). Writing is
// atomic_file.hpp's.
//
// Any thread may use these; an object here is used by one thread at a time.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ferry/limits.hpp"

struct z_stream_s;  // <zlib.h>

namespace ferry::detail {

/// Who reads which file, for messages.
struct FileLabel {
  std::string_view who;   ///< "CsvDataset"; empty: messages start with the name alone
  std::string_view name;  ///< the file, as the user named it

  /// "<who>: <name>: " (or "<name>: ").
  std::string prefix() const;
  /// Appends prefix() to `out` (a reused buffer allocates nothing).
  void append_prefix(std::string& out) const;
  /// "<who>: <name>: byte <byte>: ".
  std::string at(std::uint64_t byte) const;
};

/// A file descriptor that is closed when its owner goes (move-only). Empty: -1.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() { reset(); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  /// Closes the descriptor held, if any, and holds `fd` instead.
  void reset(int fd = -1) noexcept;
  /// The descriptor, no longer held (the caller closes it).
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

/// A regular file, open for reading; closed by the destructor (unless take() took it).
class OpenFile {
 public:
  /// Opens once, without blocking (O_NONBLOCK: a FIFO is refused, not waited on), then checks
  /// what the descriptor is (fstat): a folder, a FIFO, a socket or a device is refused.
  /// A symbolic link is followed (to a regular file only). `label` must outlive the object.
  /// \throws DataError label.prefix() + "cannot open: <why>", "cannot read: it is a folder",
  /// "cannot read: not a regular file" or "cannot read: <why>".
  OpenFile(const std::filesystem::path& path, FileLabel label);
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile() = default;

  /// The file's size when it was opened.
  std::size_t size() const noexcept { return size_; }
  /// Its modification time then, in nanoseconds since the epoch.
  std::int64_t mtime_ns() const noexcept { return mtime_ns_; }
  int descriptor() const noexcept { return fd_.get(); }
  /// The descriptor, for whoever keeps the file open longer; this object holds none after it.
  FileDescriptor take() noexcept { return std::move(fd_); }
  /// \throws DataError label.prefix() + "file of <size> bytes, more than the <max_bytes> " +
  /// `what_fits` when the file is larger than max_bytes.
  void check_size(std::size_t max_bytes, std::string_view what_fits) const;
  /// Reads the file from its start into `out` (room for size() bytes): one read, more only where
  /// the kernel returns less. Fewer bytes than size() when the file shrank since it was opened.
  /// \throws DataError label.prefix() + "cannot read: <why>".
  std::size_t read_all(std::span<std::byte> out) const;

 private:
  FileLabel label_;
  FileDescriptor fd_;
  std::size_t size_ = 0;
  std::int64_t mtime_ns_ = 0;
};

/// The whole of `path`, read with one open and one read into the memory room(n) gives (n >= 1
/// bytes, the file's size; `Room` is callable as std::byte*(std::size_t)), checked against
/// max_bytes before anything is allocated or read. The bytes read: fewer than the file's size
/// when it shrank meanwhile.
/// \throws DataError as OpenFile and its check_size() and read_all() do.
template <class Room>
std::span<const std::byte> read_file(const std::filesystem::path& path, FileLabel label,
                                     std::size_t max_bytes, std::string_view what_fits,
                                     Room&& room) {
  const OpenFile file(path, label);
  file.check_size(max_bytes, what_fits);
  std::byte* const data = room(std::max<std::size_t>(file.size(), 1));
  return {data, file.read_all({data, file.size()})};
}

/// A regular file's bytes, mapped read-only (an empty file maps nothing).
class MappedFile {
 public:
  /// `populate`: read the whole file in now (it is about to be read through); otherwise pages
  /// come in as they are touched.
  /// \throws DataError as OpenFile does, or label.prefix() + "cannot map: <why>".
  MappedFile(const std::filesystem::path& path, FileLabel label, bool populate);
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Whether `bytes` start as a gzip stream does (0x1f 0x8b): that, not the file's name, decides.
bool is_gzip(std::span<const std::byte> bytes) noexcept;

/// The most bytes a gzip stream may decompress to, and the option that sets it (for messages).
struct DecompressedLimit {
  /// detail::decompressed_limit(option_value): the option, or the default when it is 0.
  DecompressedLimit(std::uint64_t option_value, std::string_view option_name) noexcept
      : bytes(decompressed_limit(option_value)), option(option_name) {}
  std::uint64_t bytes;
  std::string_view option;  ///< "CsvOptions::max_decompressed_bytes"
};

/// Inflates a gzip stream held in memory, piece by piece: one member or several one after
/// another (bytes after the last member that do not start another are ignored, as gzip does).
class GzipReader {
 public:
  /// \throws DataError label.prefix() + "cannot decompress: out of memory".
  GzipReader(std::span<const std::byte> compressed, FileLabel label, DecompressedLimit limit);
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;
  ~GzipReader();

  /// Decompresses up to n bytes into `out`; fewer only at the end of the stream.
  /// \throws DataError label.at(<byte of the file>) + "cannot read: the gzip stream ends early"
  /// (or "is corrupt: <zlib's words>") + " (cannot decompress past byte <b> of the data)", or
  /// + "decompresses to more than the limit of <limit> bytes (<option>)" for a stream that goes
  /// on past the limit, having written at most one byte beyond it.
  std::size_t read(void* out, std::size_t n);
  /// Bytes decompressed so far.
  std::uint64_t produced() const noexcept { return produced_; }

 private:
  [[noreturn]] void fail(int code) const;

  struct EndInflate {
    void operator()(z_stream_s* z) const noexcept;
  };
  std::span<const std::byte> in_;
  std::string prefix_;
  std::uint64_t limit_;
  std::string_view option_;
  std::unique_ptr<z_stream_s, EndInflate> z_;
  std::size_t consumed_ = 0;  // compressed bytes read
  std::uint64_t produced_ = 0;
  bool member_ended_ = false;
  bool ended_ = false;
};

/// The whole of a gzip stream, decompressed (GzipReader), holding no more than the limit plus
/// one byte before it gives up.
/// \throws DataError as GzipReader::read().
std::string gunzip(std::span<const std::byte> compressed, FileLabel label, DecompressedLimit limit);

/// The system's text for errno value `code` (strerror's, without its thread-safety problem).
std::string errno_text(int code);

}  // namespace ferry::detail
