#include "datasets/remote/cache_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <ctime>
#include <map>
#include <system_error>
#include <utility>

#include "datasets/remote/curl_transfer.hpp"
#include "datasets/remote/s3_request.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

namespace {

constexpr std::uint64_t kDefaultCacheBytes = 50ULL << 30;
constexpr std::int64_t kStaleTemporarySeconds = std::int64_t{24} * 3600;

std::uint64_t fnv1a(std::string_view s) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return h;
}

// Whether `name` is of an entry's form, "<16 hex>-<name>" (its own files and its companions
// "<entry>.meta" and "<entry>.idx"): exactly those count against the bound. The cache's own
// files (locks, temporaries) start with '.', which no entry does.
bool is_entry_name(std::string_view name) {
  if (name.size() < 18 || name[16] != '-') return false;
  return std::all_of(name.begin(), name.begin() + 16,
                     [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

std::optional<FileDescriptor> open_held(const fs::path& path, const FileLabel& label) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return std::nullopt;
    throw DataError(label.prefix() + "cannot open the cached file " + path.string() + ": " +
                    errno_text(errno));
  }
  while (::flock(fd.get(), LOCK_SH) != 0) {
    if (errno != EINTR) {
      throw DataError(label.prefix() + "cannot lock the cached file " + path.string() + ": " +
                      errno_text(errno));
    }
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw DataError(label.prefix() + "the cached file " + path.string() + " is not a regular file");
  }
  if (st.st_nlink == 0) return std::nullopt;  // evicted between our open and our lock
  const struct timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};  // used now: atime
  static_cast<void>(::futimens(fd.get(), times));
  return fd;
}

FileDescriptor lock_download(const fs::path& target, const FileLabel& label,
                             const std::function<void()>& before_wait) {
  // ".<entry>.lock": a file of the cache's own (a leading '.'), never counted as an entry.
  std::string lock_name = target.filename().string();
  lock_name.insert(0, 1, '.');
  lock_name += ".lock";
  const fs::path lock = target.parent_path() / lock_name;
  FileDescriptor fd(
      ::open(lock.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
  if (!fd) {
    throw DataError(label.prefix() + "cannot open the lock file " + lock.string() + ": " +
                    errno_text(errno));
  }
  int flags = LOCK_EX | LOCK_NB;
  while (::flock(fd.get(), flags) != 0) {
    if (errno == EWOULDBLOCK && flags != LOCK_EX) {
      before_wait();
      flags = LOCK_EX;
    } else if (errno != EINTR) {
      throw DataError(label.prefix() + "cannot lock " + lock.string() + ": " + errno_text(errno));
    }
  }
  return fd;
}

fs::path cache_dir(const RemoteOptions& options) {
  fs::path dir = options.cache_dir;
  if (dir.empty()) dir = getenv_or("FERRY_CACHE_DIR");
  if (dir.empty()) {
    const std::string home = getenv_or("HOME");
    if (home.empty()) {
      throw ConfigError(
          "RemoteOptions::cache_dir is empty, and neither $FERRY_CACHE_DIR nor $HOME is set");
    }
    dir = fs::path(home) / ".cache" / "ferry";
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    throw DataError("cannot make the cache folder " + dir.string() + ": " +
                    (ec ? ec.message() : "not a folder"));
  }
  return dir;
}

fs::path entry_path(const fs::path& dir, std::string_view url) {
  std::string_view tail = url.substr(0, url.find_first_of("?#"));
  while (!tail.empty() && tail.back() == '/') tail.remove_suffix(1);
  tail = tail.substr(tail.rfind('/') + 1);
  std::string base;
  for (const char c : tail.substr(0, 80)) {
    base +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ? c : '_';
  }
  if (base.empty() || base[0] == '.') base = "f" + base;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hash(16, '0');
  std::uint64_t h = fnv1a(url);
  for (int i = 15; i >= 0; --i, h >>= 4) hash[static_cast<std::size_t>(i)] = kHex[h & 15];
  return dir / (hash + "-" + base);
}

std::uint64_t cache_bound(const RemoteOptions& options) noexcept {
  return options.cache_bytes == 0 ? kDefaultCacheBytes : options.cache_bytes;
}

std::uint64_t cache_size(const fs::path& dir) noexcept {
  std::uint64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_regular_file(e2) || !is_entry_name(it->path().filename().string())) {
      continue;
    }
    const auto size = it->file_size(e2);
    if (!e2) total += size;
  }
  return total;
}

std::uint64_t evict(const fs::path& dir, std::uint64_t bound) noexcept {
  try {
    // Entries by their 16-hex prefix: the file itself (the shortest name) and its companions.
    struct Entry {
      std::string main;
      std::vector<std::pair<fs::path, std::uint64_t>> files;
      std::uint64_t bytes = 0;
      std::int64_t used_ns = 0;
    };
    std::map<std::string, Entry> entries;
    std::uint64_t total = 0;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      struct stat st {};
      if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (name.starts_with('.') && name.ends_with(".tmp")) {
        // A download's temporary file, left by a process that died: none lives this long
        // without writing (a transfer without progress stops after timeout_seconds).
        if (::time(nullptr) - st.st_mtim.tv_sec > kStaleTemporarySeconds) {
          static_cast<void>(::unlink(it->path().c_str()));
        }
        continue;
      }
      if (!is_entry_name(name)) continue;
      Entry& e = entries[name.substr(0, 16)];
      const auto bytes = static_cast<std::uint64_t>(st.st_size);
      e.files.emplace_back(it->path(), bytes);
      e.bytes += bytes;
      total += bytes;
      if (e.main.empty() || name.size() < e.main.size()) {
        e.main = name;
        e.used_ns =
            static_cast<std::int64_t>(st.st_atim.tv_sec) * 1'000'000'000 + st.st_atim.tv_nsec;
      }
    }
    if (total <= bound) return total;
    std::vector<Entry*> order;
    order.reserve(entries.size());
    for (auto& [key, e] : entries) order.push_back(&e);
    std::sort(order.begin(), order.end(),
              [](const Entry* a, const Entry* b) { return a->used_ns < b->used_ns; });
    for (Entry* e : order) {
      if (total <= bound) break;
      const FileDescriptor fd(
          ::open((dir / e->main).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
      if (!fd || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // in use
      for (const auto& [path, bytes] : e->files) {
        if (::unlink(path.c_str()) == 0) total -= bytes;
      }
    }
    return total;
  } catch (...) {
    return 0;
  }
}

}  // namespace ferry::detail::remote
