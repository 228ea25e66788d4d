#pragma once

// Downloads in parts (RemoteOptions::part_bytes): what the threads that take one file's parts
// share (PartDownload), and the board of a Prefetcher's downloads under way (PartBoard::Impl).
// Downloader::download_parts() posts a download and takes its parts in order; the board's other
// Downloaders take parts through Downloader::help(). Each part is one ranged GET written at its
// offset into the one temporary file.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "datasets/common/atomic_file.hpp"
#include "datasets/remote/remote_cache.hpp"

namespace ferry::detail::remote {

// One file's download in parts: what the threads that take its parts share.
struct PartDownload {
  PartDownload(std::string u, const std::filesystem::path& target, std::string w,
               std::uint64_t bytes, std::uint64_t part)
      : url(std::move(u)),
        who(std::move(w)),
        label{who, url},
        size(bytes),
        part_bytes(part),
        parts(static_cast<std::size_t>((bytes + part - 1) / part)),
        writer(std::in_place, target, label) {}
  const std::string url;
  const std::string who;
  const FileLabel label;
  const std::uint64_t size;
  const std::uint64_t part_bytes;
  const std::size_t parts;
  // Each part writes its bytes at their offset; the owner removes it (reset) once no part is
  // under way, unless it is complete.
  std::optional<AtomicFileWriter> writer;
  // A failure, a change of the file or a cancel: the parts under way end, no part is taken.
  std::atomic<bool> stop{false};
  // A server that ignores Range is sending the whole file to one transfer: the others end.
  std::atomic<bool> whole{false};

  std::mutex mutex;
  std::condition_variable settled;
  // Under mutex:
  std::size_t next = 0;     // the first part no one took
  std::size_t running = 0;  // parts under way
  std::size_t done = 0;     // parts complete
  bool whole_done = false;  // the whole file came in one transfer
  std::string etag;         // the first response's
  bool etag_known = false;
  std::exception_ptr error;  // the first failure
  std::string change;        // how the file changed on the server mid-download; empty: it did not
};

struct PartBoard::Impl {
  std::function<void()> posted;
  mutable std::mutex mutex;
  std::map<std::string, std::shared_ptr<PartDownload>> downloads;
  std::set<std::string> coming;  // announced, not posted yet

  // `url`'s download will not be posted (now): whoever waits for it looks again.
  void withdraw(const std::string& url) {
    bool was = false;
    {
      const std::lock_guard lock(mutex);
      was = coming.erase(url) > 0;
    }
    if (was && posted) posted();
  }
};

}  // namespace ferry::detail::remote
