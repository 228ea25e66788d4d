#include "datasets/webdataset/tar_sidecar.hpp"

#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <string_view>

#include "core/checked.hpp"
#include "datasets/common/atomic_file.hpp"
#include "datasets/common/sidecar_bytes.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

constexpr std::string_view kMagic = "FERRYTAR";
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeadBytes = 8 + 4 + 8 + 8 + 8;
constexpr std::size_t kMemberBytes = 8 + 8 + 8 + 4;

std::optional<std::vector<TarMember>> parse(std::string_view bytes, const ShardStamp& stamp,
                                            bool match_mtime) {
  if (bytes.size() < kHeadBytes + 8 || bytes.substr(0, kMagic.size()) != kMagic) return {};
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  SidecarCursor tail(bytes.substr(body.size()));
  if (tail.get<std::uint64_t>() != sidecar_fnv1a(body)) return {};
  SidecarCursor c(body);
  c.take(kMagic.size());
  const auto version = c.get<std::uint32_t>();
  const auto size = c.get<std::uint64_t>();
  const auto mtime = c.get<std::int64_t>();
  const auto count = c.get<std::uint64_t>();
  if (version != kVersion || size != stamp.size || !mtime ||
      (match_mtime && *mtime != stamp.mtime_ns) || !count)
    return {};
  if (*count > c.left() / kMemberBytes) return {};
  std::vector<TarMember> members(static_cast<std::size_t>(*count));
  std::uint64_t after = 0;  // the end of the previous member's data
  for (TarMember& m : members) {
    const auto header = c.get<std::uint64_t>();
    const auto offset = c.get<std::uint64_t>();
    const auto length = c.get<std::uint64_t>();
    const auto name_len = c.get<std::uint32_t>();
    if (!name_len || *name_len == 0) return {};
    const auto name = c.take(*name_len);
    if (!name) return {};
    const auto end = try_add<std::uint64_t>(*offset, *length);
    if (*header < after || *offset < *header + 512 || *offset % 512 != 0 || !end ||
        *end > stamp.size) {
      return {};
    }
    after = *end;
    m = {std::string(*name), *header, *offset, *length};
  }
  if (c.left() != 0) return {};
  return members;
}

}  // namespace

std::filesystem::path sidecar_path(const std::filesystem::path& shard) {
  std::filesystem::path p = shard;
  p += ".idx";
  return p;
}

std::optional<std::vector<TarMember>> load_sidecar(const std::filesystem::path& sidecar,
                                                   const ShardStamp& stamp, bool match_mtime) {
  try {
    const FileLabel label{"", sidecar.native()};
    const OpenFile file(sidecar, label);
    // Each member's name lies in the shard, so a valid index is never this large.
    const auto most = try_add<std::uint64_t>(
        kHeadBytes + 8, try_mul<std::uint64_t>(stamp.size, 2).value_or(~std::uint64_t{0} / 2));
    if (!most || file.size() > *most) return {};
    std::string bytes(file.size(), '\0');
    if (file.read_all({reinterpret_cast<std::byte*>(bytes.data()), bytes.size()}) != bytes.size()) {
      return {};
    }
    return parse(bytes, stamp, match_mtime);
  } catch (const Error&) {
    return {};
  }
}

std::optional<std::uint64_t> sidecar_shard_size(const std::filesystem::path& sidecar) {
  try {
    const FileLabel label{"", sidecar.native()};
    const OpenFile file(sidecar, label);
    std::string head(kHeadBytes, '\0');
    if (file.size() < kHeadBytes + 8 || ::pread(file.descriptor(), head.data(), head.size(), 0) !=
                                            static_cast<ssize_t>(head.size())) {
      return {};
    }
    SidecarCursor c(head);
    if (c.take(kMagic.size()) != kMagic || c.get<std::uint32_t>() != kVersion) return {};
    return c.get<std::uint64_t>();
  } catch (const Error&) {
    return {};
  }
}

bool save_sidecar(const std::filesystem::path& sidecar, const ShardStamp& stamp,
                  const std::vector<TarMember>& members) noexcept {
  try {
    std::string out;
    out += kMagic;
    sidecar_put(out, kVersion);
    sidecar_put(out, stamp.size);
    sidecar_put(out, stamp.mtime_ns);
    sidecar_put(out, static_cast<std::uint64_t>(members.size()));
    for (const TarMember& m : members) {
      sidecar_put(out, m.header);
      sidecar_put(out, m.offset);
      sidecar_put(out, m.size);
      sidecar_put(out, static_cast<std::uint32_t>(m.name.size()));
      out += m.name;
    }
    sidecar_put(out, sidecar_fnv1a(out));
    const FileLabel label{"", sidecar.native()};
    write_file_atomically(sidecar, {reinterpret_cast<const std::byte*>(out.data()), out.size()},
                          label);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace ferry::detail
