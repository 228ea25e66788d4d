#pragma once

// An ISO base media file's (MP4, MOV, M4V, 3GP) sample tables checked against the file's size
// before FFmpeg reads them. FFmpeg's demuxer makes an index entry for every sample the tables
// claim, and an array for every table as long as it says it is: an 11 KB file claiming 10^7
// samples cost it 600 MB and seconds at open. Every sample's data lies in the file, so a track
// may claim no more samples than the file has bytes (a constant sample size: no more than fit),
// and a table no more entries than its box holds.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ferry::detail::video {

/// Reads up to `n` bytes at `at` into `out`; returns how many it read (0 past the end).
using ReadAt = std::function<std::size_t(std::uint64_t at, std::byte* out, std::size_t n)>;

/// Checks the sample tables of the file read by `read` (`size` bytes), when it is an ISO base
/// media file (its first box one of theirs); anything else is left to FFmpeg.
/// \throws DataError `name` + ": cannot open as a video: " + which box claims what.
void check_sample_tables(const ReadAt& read, std::uint64_t size, const std::string& name);

}  // namespace ferry::detail::video
