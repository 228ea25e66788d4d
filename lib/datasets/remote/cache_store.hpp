#pragma once

// The cache folder's own rules (the public ones, cache_dir(), entry_path(), evict() and
// cache_size(), are declared in remote_cache.hpp): how a complete entry is opened and held
// (a shared flock, so that no process evicts it while it is read), and the per-entry lock that
// whoever downloads the entry holds.

#include <filesystem>
#include <functional>
#include <optional>

#include "datasets/common/file_io.hpp"
#include "datasets/remote/remote_cache.hpp"

namespace ferry::detail::remote {

/// Opens `path` and takes a shared lock on it: the file, when it is there, complete and still
/// linked; nothing when it is not there (or was evicted under us). Its access time is set (a
/// use, for the least recently used order).
/// \throws DataError when it cannot be opened or locked, or is not a regular file.
std::optional<FileDescriptor> open_held(const std::filesystem::path& path, const FileLabel& label);

/// Takes the download lock of the entry `target` (released when the descriptor goes);
/// `before_wait` is called when another holds it, before this waits for it.
/// \throws DataError when the lock file cannot be opened or locked.
FileDescriptor lock_download(const std::filesystem::path& target, const FileLabel& label,
                             const std::function<void()>& before_wait);

}  // namespace ferry::detail::remote
