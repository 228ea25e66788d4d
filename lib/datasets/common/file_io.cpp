#include "datasets/common/file_io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <system_error>

#include "core/checked.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
std::string errno_text(int code) { return std::system_category().message(code); }

std::string FileLabel::prefix() const {
  std::string out;
  out.reserve(who.size() + name.size() + 4);
  append_prefix(out);
  return out;
}

void FileLabel::append_prefix(std::string& out) const {
  if (!who.empty()) {
    out += who;
    out += ": ";
  }
  out += name;
  out += ": ";
}

std::string FileLabel::at(std::uint64_t byte) const {
  std::string out = prefix();
  out += "byte ";
  out += std::to_string(byte);
  out += ": ";
  return out;
}

// ---- a whole file --------------------------------------------------------------------

void FileDescriptor::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

OpenFile::OpenFile(const std::filesystem::path& path, FileLabel label) : label_(label) {
  // O_NONBLOCK: a FIFO put where a file was expected must not block the open (it is refused
  // below); it changes nothing for a regular file. What is checked is the descriptor opened,
  // so nothing can swap the name between a check and the open.
  fd_.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd_) {
    const int code = errno;
    throw DataError(label_.prefix() + "cannot open: " + errno_text(code));
  }
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) {
    const int code = errno;
    throw DataError(label_.prefix() + "cannot read: " + errno_text(code));
  }
  if (S_ISDIR(st.st_mode)) throw DataError(label_.prefix() + "cannot read: it is a folder");
  if (!S_ISREG(st.st_mode)) throw DataError(label_.prefix() + "cannot read: not a regular file");
  size_ = static_cast<std::size_t>(std::max<off_t>(st.st_size, 0));
  mtime_ns_ = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

void OpenFile::check_size(std::size_t max_bytes, std::string_view what_fits) const {
  if (size_ <= max_bytes) return;
  throw DataError(label_.prefix() + "file of " + std::to_string(size_) + " bytes, more than the " +
                  std::to_string(max_bytes) + " " + std::string(what_fits));
}

std::size_t OpenFile::read_all(std::span<std::byte> out) const {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::read(fd_.get(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw DataError(label_.prefix() + "cannot read: " + errno_text(errno));
    }
    if (n == 0) break;  // shorter than it was: the reader tells whether what came is whole
    got += static_cast<std::size_t>(n);
  }
  return got;
}

// ---- a mapped file -------------------------------------------------------------------

MappedFile::MappedFile(const std::filesystem::path& path, FileLabel label, bool populate) {
  const OpenFile file(path, label);
  if (file.size() == 0) return;
  void* at = ::mmap(nullptr, file.size(), PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0),
                    file.descriptor(), 0);
  if (at == MAP_FAILED) throw DataError(label.prefix() + "cannot map: " + errno_text(errno));
  data_ = static_cast<const std::byte*>(at);
  size_ = file.size();
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

// ---- gzip ----------------------------------------------------------------------------

bool is_gzip(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 2 && bytes[0] == std::byte{0x1f} && bytes[1] == std::byte{0x8b};
}

void GzipReader::EndInflate::operator()(z_stream_s* z) const noexcept {
  inflateEnd(z);
  delete z;  // NOLINT(cppcoreguidelines-owning-memory): the unique_ptr's deleter
}

GzipReader::GzipReader(std::span<const std::byte> compressed, FileLabel label,
                       DecompressedLimit limit)
    : in_(compressed), prefix_(label.prefix()), limit_(limit.bytes), option_(limit.option) {
  auto z = std::make_unique<z_stream>();
  if (inflateInit2(z.get(), 15 + 16) != Z_OK) {  // gzip only
    throw DataError(prefix_ + "cannot decompress: out of memory");
  }
  z_.reset(z.release());
}

GzipReader::~GzipReader() = default;

void GzipReader::fail(int code) const {
  std::string why;
  if (code == Z_BUF_ERROR) {
    why = "the gzip stream ends early";
  } else {
    why = "the gzip stream is corrupt: ";
    why += z_->msg != nullptr ? z_->msg : "zlib error " + std::to_string(code);
  }
  throw DataError(prefix_ + "byte " + std::to_string(consumed_) + ": cannot read: " + why +
                  " (cannot decompress past byte " + std::to_string(produced_) + " of the data)");
}

std::size_t GzipReader::read(void* out, std::size_t n) {
  // Room for one byte past the limit at most: enough to tell that the stream passes it.
  const std::uint64_t left = limit_ - produced_;  // produced_ <= limit_ (below)
  const std::size_t want =
      left >= n ? n : static_cast<std::size_t>(try_add<std::uint64_t>(left, 1).value_or(left));
  auto* const to = static_cast<unsigned char*>(out);
  std::size_t got = 0;
  while (got < want && !ended_) {
    if (member_ended_) {
      // Another member follows, or the end (anything else after the last member is ignored).
      if (!is_gzip(in_.subspan(consumed_))) {
        ended_ = true;
        break;
      }
      inflateReset(z_.get());
      member_ended_ = false;
    }
    const std::size_t in_now = std::min<std::size_t>(in_.size() - consumed_, UINT_MAX);
    const std::size_t out_now = std::min<std::size_t>(want - got, UINT_MAX);
    // zlib does not write through next_in; its type is not const.
    z_->next_in = const_cast<Bytef*>(reinterpret_cast<const Bytef*>(in_.data() + consumed_));
    z_->avail_in = static_cast<uInt>(in_now);
    z_->next_out = to + got;
    z_->avail_out = static_cast<uInt>(out_now);
    const int rc = inflate(z_.get(), Z_NO_FLUSH);
    consumed_ += in_now - z_->avail_in;
    const std::size_t made = out_now - z_->avail_out;
    got += made;
    produced_ += made;
    if (rc == Z_STREAM_END) {
      member_ended_ = true;
    } else if (rc != Z_OK) {
      fail(rc);  // Z_BUF_ERROR: no progress with input left to give, so the stream is cut
    }
  }
  if (produced_ > limit_) {
    throw DataError(prefix_ + "byte " + std::to_string(consumed_) +
                    ": decompresses to more than the limit of " + std::to_string(limit_) +
                    " bytes (" + std::string(option_) + ")");
  }
  return got;
}

std::string gunzip(std::span<const std::byte> compressed, FileLabel label,
                   DecompressedLimit limit) {
  GzipReader reader(compressed, label, limit);
  // One byte past the limit is room enough to tell that the limit is passed.
  const std::uint64_t room = std::min<std::uint64_t>(
      try_add<std::uint64_t>(limit.bytes, 1).value_or(UINT64_MAX), SIZE_MAX);
  // The last member's size (mod 2^32) is a good first guess of the whole.
  const std::size_t size = compressed.size();
  std::size_t guess = size * 4;
  if (size >= 4) {
    const auto tail = compressed.last(4);
    const auto byte = [&](std::size_t i) { return std::to_integer<std::size_t>(tail[i]); };
    const std::size_t isize = byte(0) | (byte(1) << 8) | (byte(2) << 16) | (byte(3) << 24);
    if (isize >= size / 2 && isize / 16 <= size) guess = isize + 1;  // plausible
  }
  std::string out;
  out.resize(static_cast<std::size_t>(
      std::min<std::uint64_t>(std::max<std::size_t>(guess, std::size_t{1} << 16), room)));
  std::size_t written = 0;
  for (;;) {
    if (written == out.size()) {
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(out.size() * 2, room)));
    }
    const std::size_t asked = out.size() - written;
    const std::size_t n = reader.read(out.data() + written, asked);
    written += n;
    if (n < asked) break;  // the end (a stream past the limit raised)
  }
  out.resize(written);
  return out;
}

}  // namespace ferry::detail
