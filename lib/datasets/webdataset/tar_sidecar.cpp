#include "datasets/webdataset/tar_sidecar.hpp"

#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <string_view>

#include "core/checked.hpp"
#include "datasets/common/atomic_file.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

constexpr std::string_view kMagic = "FERRYTAR";
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeadBytes = 8 + 4 + 8 + 8 + 8;
constexpr std::size_t kMemberBytes = 8 + 8 + 8 + 4;

std::uint64_t fnv1a(std::string_view bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

template <class T>
void put(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<char>(static_cast<std::uint64_t>(v) >> (8 * i) & 0xff));
  }
}

// Reads little-endian values from the index, refusing to read past its end.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  template <class T>
  std::optional<T> get() {
    if (bytes_.size() - pos_ < sizeof(T)) return std::nullopt;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= std::uint64_t{static_cast<unsigned char>(bytes_[pos_ + i])} << (8 * i);
    }
    pos_ += sizeof(T);
    return static_cast<T>(v);
  }
  std::optional<std::string_view> take(std::size_t n) {
    if (bytes_.size() - pos_ < n) return std::nullopt;
    const std::string_view s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::size_t pos() const noexcept { return pos_; }
  std::size_t left() const noexcept { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

std::optional<std::vector<TarMember>> parse(std::string_view bytes, const ShardStamp& stamp,
                                            bool match_mtime) {
  if (bytes.size() < kHeadBytes + 8 || bytes.substr(0, kMagic.size()) != kMagic) return {};
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Cursor tail(bytes.substr(body.size()));
  if (tail.get<std::uint64_t>() != fnv1a(body)) return {};
  Cursor c(body);
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
    Cursor c(head);
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
    put(out, kVersion);
    put(out, stamp.size);
    put(out, stamp.mtime_ns);
    put(out, static_cast<std::uint64_t>(members.size()));
    for (const TarMember& m : members) {
      put(out, m.header);
      put(out, m.offset);
      put(out, m.size);
      put(out, static_cast<std::uint32_t>(m.name.size()));
      out += m.name;
    }
    put(out, fnv1a(out));
    const FileLabel label{"", sidecar.native()};
    write_file_atomically(sidecar, {reinterpret_cast<const std::byte*>(out.data()), out.size()},
                          label);
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace ferry::detail
