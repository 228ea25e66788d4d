#pragma once

// The index of a tar shard kept beside it, "<shard>.idx", so that opening a dataset again reads
// one small file instead of every header. It records the shard's size and modification time
// and is used only while both still match; anything else about it that is wrong (magic,
// version, checksum, members that do not fit the shard) makes it ignored and rebuilt.
//
// Format (little-endian): "FERRYTAR" u32 version, u64 shard size, i64 mtime (ns), u64 members;
// per member u64 header, u64 offset, u64 size, u32 name bytes, the name; then u64 FNV-1a of all
// that precedes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "datasets/webdataset/tar_index.hpp"

namespace ferry::detail {

/// What identifies a shard's contents for its sidecar: its size and modification time.
struct ShardStamp {
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  friend bool operator==(const ShardStamp&, const ShardStamp&) = default;
};

/// "<shard>.idx".
std::filesystem::path sidecar_path(const std::filesystem::path& shard);

/// The members recorded in `sidecar` when it is a valid index of a shard stamped `stamp`;
/// nothing when it is missing, stale or corrupt. Never throws for the file's contents.
/// `match_mtime` false: the modification time is not compared (a shard downloaded into the
/// cache, whose index came from the server; the cache's files never change).
std::optional<std::vector<TarMember>> load_sidecar(const std::filesystem::path& sidecar,
                                                   const ShardStamp& stamp,
                                                   bool match_mtime = true);

/// The shard size an index records, from its head (magic and version checked), when `sidecar`
/// is one; load_sidecar() with that size then checks the rest. Never throws.
std::optional<std::uint64_t> sidecar_shard_size(const std::filesystem::path& sidecar);

/// Writes the index (write_file_atomically: an exclusive, symlink-safe temporary file renamed
/// over `sidecar`); false, silently, when it cannot (a read-only folder, a full disk), and then
/// nothing is left behind.
bool save_sidecar(const std::filesystem::path& sidecar, const ShardStamp& stamp,
                  const std::vector<TarMember>& members) noexcept;

}  // namespace ferry::detail
