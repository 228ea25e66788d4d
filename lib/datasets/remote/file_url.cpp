#include "datasets/remote/file_url.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <vector>

#include "datasets/common/atomic_file.hpp"
#include "datasets/remote/curl_transfer.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads out.size() bytes at `offset` of `fd`; fewer only at the end of the file.
std::size_t pread_some(int fd, std::span<std::byte> out, std::uint64_t offset,
                       const FileLabel& label) {
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw DataError(label.prefix() + "cannot read: " + errno_text(errno));
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  return got;
}

// OpenFile of `path` (once, without blocking, a regular file only), its failure said as a
// download's: "<who>: <url>: cannot download: cannot open: ..." / "...: not a regular file".
OpenFile open_url_file(const fs::path& path, const FileLabel& label) {
  try {
    return OpenFile(path, label);
  } catch (const DataError& e) {
    const std::string prefix = label.prefix();
    std::string_view why = e.what();
    if (why.starts_with(prefix)) why.remove_prefix(prefix.size());
    throw DataError(prefix + "cannot download: " + std::string(why) + " (" + path.string() + ")");
  }
}

}  // namespace

fs::path file_url_path(std::string_view url, const FileLabel& label) {
  std::string_view rest = url.substr(7);  // after "file://"
  if (starts_with_ci(rest, "localhost/")) rest.remove_prefix(9);
  if (rest.empty() || rest.front() != '/') {
    throw DataError(label.prefix() +
                    "a file:// URL names a file of this machine by its absolute path "
                    "(file:///path/to/file)");
  }
  rest = rest.substr(0, rest.find_first_of("?#"));
  std::string path;
  for (std::size_t i = 0; i < rest.size(); ++i) {
    if (rest[i] == '%' && i + 2 < rest.size() && hex_value(rest[i + 1]) >= 0 &&
        hex_value(rest[i + 2]) >= 0) {
      path += static_cast<char>(hex_value(rest[i + 1]) * 16 + hex_value(rest[i + 2]));
      i += 2;
    } else {
      path += rest[i];
    }
  }
  return path;
}

bool copy_file_url(const std::string& url, const fs::path& target, bool optional,
                   std::uint64_t limit, bool limit_is_size, const FileLabel& label) {
  const fs::path path = file_url_path(url, label);
  struct stat st {};
  if (optional && ::lstat(path.c_str(), &st) != 0 && errno == ENOENT) return false;
  const OpenFile file = open_url_file(path, label);
  const std::uint64_t size = file.size();
  if (size > limit) {
    throw DataError(label.prefix() + "cannot download: the file (" + std::to_string(size) +
                    " bytes) is larger than " +
                    (limit_is_size ? "its known size of " + std::to_string(limit) + " bytes"
                                   : "the cache's room of " + std::to_string(limit) +
                                         " bytes (RemoteOptions::cache_bytes)") +
                    "; not retried");
  }
  AtomicFileWriter writer(target, label);
  std::vector<std::byte> buffer(static_cast<std::size_t>(std::min<std::uint64_t>(size, 1 << 20)));
  std::uint64_t copied = 0;
  while (copied < size) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - copied));
    const std::size_t got = pread_some(file.descriptor(), {buffer.data(), want}, copied, label);
    if (got == 0) break;
    writer.write({buffer.data(), got});
    copied += got;
  }
  if (copied != size) {
    throw DataError(label.prefix() + "cannot download: the file shrank while it was copied (" +
                    std::to_string(copied) + " of " + std::to_string(size) + " bytes)");
  }
  writer.commit();
  return true;
}

Head file_url_head(const std::string& url, std::uint64_t bytes, const FileLabel& label) {
  const OpenFile file = open_url_file(file_url_path(url, label), label);
  Head out;
  out.size = file.size();
  out.bytes.resize(static_cast<std::size_t>(std::min(bytes, out.size)));
  const std::size_t got = pread_some(file.descriptor(), out.bytes, 0, label);
  out.bytes.resize(got);
  return out;
}

}  // namespace ferry::detail::remote
