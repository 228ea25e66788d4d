#pragma once

// The members of a tar file, from its headers alone: POSIX ustar, GNU (long names, type 'L';
// base-256 sizes) and PAX (extended headers, type 'x', whose path= and size= records apply to
// the next member; global headers, type 'g', are ignored). WebDataset indexes its shards with
// it; the fuzzer calls it on bytes in memory.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "datasets/common/file_io.hpp"

namespace ferry::detail {

/// One regular file of a tar archive.
struct TarMember {
  std::string name;          ///< its path in the archive
  std::uint64_t header = 0;  ///< the byte of its (first) header block
  std::uint64_t offset = 0;  ///< the byte of its data
  std::uint64_t size = 0;    ///< its data's bytes
};

/// Reads up to out.size() bytes at `offset` of the archive into `out`; returns the bytes read,
/// fewer only at the end of the file. May throw DataError.
using TarReader = std::function<std::size_t(std::uint64_t offset, std::span<std::byte> out)>;

/// The most bytes of a GNU long name or a PAX header's records.
inline constexpr std::uint64_t kTarMaxMetaBytes = std::uint64_t{1} << 20;

/// The regular files of a tar archive of `file_size` bytes, in the order they appear, reading
/// only headers (and the data of long-name and PAX members) through `read`, in pieces of at
/// most 64 KiB. Folders, links, devices and other non-files are left out.
/// \throws DataError label.at(<byte>) + why: a header whose checksum does not match, a size field
/// that is not octal or positive base-256, a member whose data runs past the end of the file
/// (naming the member), a file cut short inside a header, or ending without the
/// end-of-archive blocks, a malformed or oversized PAX record or long name.
std::vector<TarMember> index_tar(std::uint64_t file_size, const TarReader& read,
                                 const FileLabel& label);

}  // namespace ferry::detail
