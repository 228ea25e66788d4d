#include "datasets/remote/remote_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <exception>
#include <mutex>
#include <thread>

#include "datasets/remote/cache_store.hpp"
#include "datasets/remote/downloader.hpp"
#include "datasets/remote/part_download.hpp"
#include "ferry/error.hpp"

namespace ferry::detail::remote {
namespace fs = std::filesystem;

namespace {

std::optional<CachedFile> fetch_one(Downloader& d, const Request& r, const fs::path& dir,
                                    std::uint64_t bound, std::string_view who,
                                    PartBoard* board = nullptr) {
  const fs::path target = r.target.empty() ? entry_path(dir, r.url) : r.target;
  const FileLabel label{who, r.url};
  // An announced download in parts that is not posted after all (found here, failed, waiting
  // for another process) lets those waiting for its parts go.
  const auto withdraw = [&] {
    if (board != nullptr) board->impl().withdraw(r.url);
  };
  struct Withdraw {
    const decltype(withdraw)& f;
    ~Withdraw() { f(); }
  } const withdraw_at_end{withdraw};
  for (int round = 0; round < 4; ++round) {
    if (auto fd = open_held(target, label)) return CachedFile(target, std::move(*fd));
    const FileDescriptor lock = lock_download(target, label, withdraw);
    if (auto fd = open_held(target, label)) return CachedFile(target, std::move(*fd));
    // Room first: what no one holds any more goes now, not after this download.
    if (r.expected_bytes > 0) evict(dir, bound > r.expected_bytes ? bound - r.expected_bytes : 0);
    if (!d.download(r.url, target, r.optional, r.expected_bytes, board)) return std::nullopt;
    auto fd = open_held(target, label);
    if (!fd) continue;  // evicted already by another process: again
    return CachedFile(target, std::move(*fd));
  }
  throw DataError(label.prefix() +
                  "cannot keep the file in the cache: it was evicted after each download "
                  "(RemoteOptions::cache_bytes too small for the files in use?)");
}

// Runs job(downloader, i) for each i in [0, count) on at most options.connections threads, each
// with a Downloader of its own. After a failure no job starts; once every thread has ended, the
// failure of the lowest i is thrown.
template <class Job>
void run_transfers(std::size_t count, const RemoteOptions& options, std::string_view who, Job job) {
  std::vector<std::exception_ptr> errors(count);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&] {
    Downloader d(options, who);
    for (std::size_t i; (i = next.fetch_add(1)) < count;) {
      if (failed.load()) return;  // the first failure is thrown: start nothing more
      try {
        job(d, i);
      } catch (...) {
        errors[i] = std::current_exception();
        failed = true;
      }
    }
  };
  const std::size_t threads =
      std::min<std::size_t>(count, static_cast<std::size_t>(options.connections));
  if (threads <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    pool.reserve(threads);
    try {
      for (std::size_t i = 0; i < threads; ++i) pool.emplace_back(work);
    } catch (...) {
      failed = true;
      for (std::thread& th : pool) th.join();
      throw;
    }
    for (std::thread& th : pool) th.join();
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace

std::string url_with_suffix(std::string_view url, std::string_view suffix) {
  std::size_t end = url.find_first_of("?#");
  if (end == std::string_view::npos) end = url.size();
  std::string out(url.substr(0, end));
  out += suffix;
  out += url.substr(end);
  return out;
}

bool is_url(std::string_view name) noexcept {
  return starts_with_ci(name, "http://") || starts_with_ci(name, "https://") ||
         starts_with_ci(name, "file://") || starts_with_ci(name, "s3://");
}

void check_options(const RemoteOptions& o, std::string_view who) {
  const std::string w(who);
  if (o.connections < 1) {
    throw ConfigError(w + ": RemoteOptions::connections is " + std::to_string(o.connections) +
                      "; it must be at least 1");
  }
  if (o.retries < 0) {
    throw ConfigError(w + ": RemoteOptions::retries is " + std::to_string(o.retries) +
                      "; it must be >= 0");
  }
  if (!(o.timeout_seconds > 0)) {  // NaN too
    throw ConfigError(w + ": RemoteOptions::timeout_seconds is " +
                      std::to_string(o.timeout_seconds) +
                      "; it must be > 0 (seconds without progress; inf: never)");
  }
}

std::vector<std::optional<CachedFile>> fetch_files(const std::vector<Request>& requests,
                                                   const RemoteOptions& options,
                                                   std::string_view who) {
  check_options(options, who);
  const fs::path dir = cache_dir(options);
  std::vector<std::optional<CachedFile>> out(requests.size());
  run_transfers(requests.size(), options, who, [&](Downloader& d, std::size_t i) {
    out[i] = fetch_one(d, requests[i], dir, cache_bound(options), who);
  });
  // Every file asked for is held now (none of them can go): the others make room.
  evict(dir, cache_bound(options));
  return out;
}

struct Fetcher::State {
  RemoteOptions options;
  std::string who;
  fs::path dir;
  Downloader downloader;
  PartBoard* board;
  State(const RemoteOptions& o, std::string w, const std::atomic<bool>* cancel, PartBoard* b)
      : options(o),
        who(std::move(w)),
        dir(cache_dir(options)),
        downloader(options, who, cancel),
        board(b) {}
};

Fetcher::Fetcher(const RemoteOptions& options, std::string who, const std::atomic<bool>* cancel,
                 PartBoard* board) {
  check_options(options, who);
  state_ = std::make_unique<State>(options, std::move(who), cancel, board);
}
Fetcher::~Fetcher() = default;

std::optional<CachedFile> Fetcher::fetch(const Request& request) {
  auto file = fetch_one(state_->downloader, request, state_->dir, cache_bound(state_->options),
                        state_->who, state_->board);
  evict(state_->dir, cache_bound(state_->options));
  return file;
}

bool Fetcher::help(const std::string& url) {
  if (state_->board == nullptr) return false;
  PartBoard::Impl& board = state_->board->impl();
  std::shared_ptr<PartDownload> d;
  {
    const std::lock_guard lock(board.mutex);
    const auto it = board.downloads.find(url);
    if (it == board.downloads.end()) return false;
    d = it->second;
  }
  return state_->downloader.help(*d);
}

namespace {

Head head_of(Downloader& d, const std::string& url, std::uint64_t bytes, const fs::path& dir,
             std::string_view who) {
  const FileLabel label{who, url};
  // A file in the cache answers for the server.
  if (auto fd = open_held(entry_path(dir, url), label)) {
    struct stat st {};
    if (::fstat(fd->get(), &st) == 0) {
      Head out;
      out.size = static_cast<std::uint64_t>(st.st_size);
      out.bytes.resize(static_cast<std::size_t>(std::min(bytes, out.size)));
      std::size_t got = 0;
      while (got < out.bytes.size()) {
        const ssize_t n = ::pread(fd->get(), out.bytes.data() + got, out.bytes.size() - got,
                                  static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      if (got == out.bytes.size()) return out;
    }
  }
  return d.head(url, bytes);
}

}  // namespace

Head read_head(const std::string& url, std::uint64_t bytes, const RemoteOptions& options,
               std::string_view who) {
  check_options(options, who);
  Downloader d(options, who);
  return head_of(d, url, bytes, cache_dir(options), who);
}

std::vector<Head> read_heads(const std::vector<std::string>& urls, std::uint64_t bytes,
                             const RemoteOptions& options, std::string_view who) {
  check_options(options, who);
  const fs::path dir = cache_dir(options);
  std::vector<Head> out(urls.size());
  run_transfers(urls.size(), options, who, [&](Downloader& d, std::size_t i) {
    out[i] = head_of(d, urls[i], bytes, dir, who);
  });
  return out;
}

LocalFile local_file(const fs::path& name, const RemoteOptions& options, std::string_view who) {
  if (!is_url(name.native())) return {name, std::nullopt};
  auto fetched = fetch_files({Request{name.string(), {}, false}}, options, who);
  LocalFile out{fetched.front()->path(), std::move(fetched.front())};
  return out;
}

}  // namespace ferry::detail::remote
