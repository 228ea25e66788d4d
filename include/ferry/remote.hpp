#pragma once

/// \file Files fetched from a server: the options of the local cache they go through, and
/// webdataset's brace notation for naming many of them.

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/export.hpp"

namespace ferry {

/// How a dataset fetches the files that it is given as URLs.
///
/// Where a dataset takes files (WebDataset shards, TokenDataset files, CsvDataset and
/// IdxDataset files), a file may be a URL: "http://...", "https://...", "file://..." or
/// "s3://bucket/key" (endpoint from $AWS_ENDPOINT_URL, else AWS's for $AWS_REGION; credentials
/// from $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY and $AWS_SESSION_TOKEN; signed with SigV4).
/// Each one is downloaded into the cache (at most `connections` transfers at once; a large file
/// fetched while reading comes in parts: `part_bytes`) and then read from there: at open, except
/// a WebDataset shard whose index "<url>.idx" the server has, and a TokenDataset file (of which
/// open reads the first 4 KiB and the size alone), which are fetched while the epochs run, in
/// the order the loader announces (Dataset::will_read), a read of a file not here yet waiting
/// for that file alone. A file already in the cache is used as it is: the cache assumes that
/// what a URL names does not change (give a changed file a new name).
/// ParquetDataset reads its URLs by ranges instead, never whole nor through the cache (table.hpp).
///
/// The cache is a folder that several processes may share: each file is downloaded once (a
/// lock per file; the others wait for it, then use it), only complete files are visible (a
/// download is written to a temporary file, checked against the server's Content-Length, then
/// renamed), and it holds at most `cache_bytes`: before and after a download the least recently
/// used files go, except those being read (a file fetched while reading is held from its fetch to
/// its last read of the epoch; fetching ahead stops while such files fill the bound). The bound
/// on files held is each dataset's own: a Mixture of m datasets of URLs may hold m times it.
struct RemoteOptions {
  std::filesystem::path cache_dir;  ///< empty: $FERRY_CACHE_DIR, else ~/.cache/ferry
  std::uint64_t cache_bytes = 0;    ///< most bytes kept in the cache; 0: 50 GiB
  int connections = 8;              ///< parallel transfers per process, >= 1
  int retries = 5;                  ///< per file, with exponential backoff and jitter, >= 0
  /// A transfer that receives no byte this long fails (counted from the last byte), > 0;
  /// inf (or anything huge) is never. 0, negative or NaN is a ConfigError.
  double timeout_seconds = 60;
  /// A file fetched while the epochs run (a WebDataset shard, a TokenDataset file) that is larger
  /// than this comes in parts of this many bytes (the last one shorter), each one ranged GET,
  /// and the transfer threads with nothing else to do take parts of the files under way: the
  /// file a read waits for first, so that it comes on several connections at once. Each part
  /// costs a request: a server slow to answer one (S3: tens of milliseconds) wants larger
  /// parts. 0: every file whole. Files fetched at open (indexes, CSV and IDX files), file://
  /// URLs, and servers that ignore Range come whole.
  std::uint64_t part_bytes = std::uint64_t{4} << 20;
};

/// Expands webdataset's brace notation: "train-{0000..0003}.tar" gives the four names
/// train-0000.tar .. train-0003.tar (a range keeps the width of a zero-padded bound),
/// "{a,b}" lists alternatives, and several groups give every combination, the leftmost group
/// varying slowest. A pattern without braces gives itself.
/// \throws ConfigError quoting the pattern for an unbalanced or nested brace, an empty group or
/// list item, a range that is reversed or not of decimal numbers, or more than 1,000,000 names.
FERRY_API std::vector<std::string> expand_braces(std::string_view pattern);

}  // namespace ferry
