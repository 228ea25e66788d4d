#pragma once

// file:// URLs, read as ferry reads any local file: opened once, without blocking, and only
// when it is a regular file (OpenFile of datasets/common/file_io.hpp), never through curl. A
// FIFO, a folder or a device named by a file:// URL is refused at once.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "datasets/common/file_io.hpp"
#include "datasets/remote/remote_cache.hpp"

namespace ferry::detail::remote {

/// The local path a file:// URL names ("file:///p", "file://localhost/p"; %XX decoded).
/// \throws DataError (`label`) for a URL of another host or a relative path.
std::filesystem::path file_url_path(std::string_view url, const FileLabel& label);

/// Copies the file `url` names to `target` (written whole, then renamed into place): true once
/// it is there, false for an `optional` file that is not there. A file larger than `limit`
/// (`limit_is_size`: the file's known size, else the cache's room) is refused before a byte is
/// copied. \throws DataError naming the URL: not a regular file, cannot be read, too large.
bool copy_file_url(const std::string& url, const std::filesystem::path& target, bool optional,
                   std::uint64_t limit, bool limit_is_size, const FileLabel& label);

/// The size and first `bytes` bytes of the file `url` names. \throws DataError as
/// copy_file_url().
Head file_url_head(const std::string& url, std::uint64_t bytes, const FileLabel& label);

}  // namespace ferry::detail::remote
