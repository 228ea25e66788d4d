#include "datasets/webdataset/tar_index.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>
#include <utility>

#include "core/checked.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

constexpr std::size_t kBlock = 512;
constexpr std::size_t kWindow = std::size_t{64} << 10;

// Where the fields of a header block lie (POSIX.1-1988 ustar, as GNU and PAX keep them).
constexpr std::size_t kNameAt = 0, kNameLen = 100;
constexpr std::size_t kSizeAt = 124, kSizeLen = 12;
constexpr std::size_t kSumAt = 148, kSumLen = 8;
constexpr std::size_t kTypeAt = 156;
constexpr std::size_t kMagicAt = 257;
constexpr std::size_t kPrefixAt = 345, kPrefixLen = 155;

// The archive read through a 64 KiB window, so that the headers of small members, which lie
// close together, cost one read per window rather than one per header.
class Blocks {
 public:
  Blocks(std::uint64_t file_size, const TarReader& read) : size_(file_size), read_(read) {}

  // The n <= kWindow bytes at `offset`, or fewer when the file ends before them.
  std::span<const std::byte> at(std::uint64_t offset, std::size_t n) {
    if (offset < start_ || offset - start_ + n > len_) {
      const std::uint64_t left = offset < size_ ? size_ - offset : 0;
      const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(kWindow, left));
      start_ = offset;
      len_ = want == 0 ? 0 : read_(offset, {buf_.data(), want});
    }
    const std::size_t have = static_cast<std::size_t>(offset - start_);
    return {buf_.data() + have, std::min(n, len_ - have)};
  }

 private:
  std::uint64_t size_;
  const TarReader& read_;
  std::array<std::byte, kWindow> buf_{};
  std::uint64_t start_ = 0;
  std::size_t len_ = 0;
};

std::string_view text_of(std::span<const std::byte> block, std::size_t at, std::size_t len) {
  const auto* p = reinterpret_cast<const char*>(block.data()) + at;
  return {p, strnlen(p, len)};
}

// An octal number field: leading blanks, digits, then a blank or NUL (or the field's end).
std::optional<std::uint64_t> octal(std::span<const std::byte> block, std::size_t at,
                                   std::size_t len) {
  const auto* p = reinterpret_cast<const unsigned char*>(block.data()) + at;
  std::size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == 0)) ++i;
  std::uint64_t v = 0;
  bool digits = false;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (v > (~std::uint64_t{0} >> 3)) return std::nullopt;
    v = (v << 3) | (p[i] - '0');
    digits = true;
  }
  for (; i < len; ++i) {
    if (p[i] != ' ' && p[i] != 0) return std::nullopt;
  }
  if (!digits && at == kSumAt) return std::nullopt;
  return v;
}

// The size field: octal, or GNU's base-256 (first byte 0x80, then big-endian), positive only.
std::uint64_t size_field(std::span<const std::byte> block, const FileLabel& label,
                         std::uint64_t header) {
  const auto* p = reinterpret_cast<const unsigned char*>(block.data()) + kSizeAt;
  if ((p[0] & 0x80) != 0) {
    if (p[0] != 0x80) {
      throw DataError(label.at(header + kSizeAt) +
                      "a negative or malformed base-256 member size in the tar header");
    }
    std::uint64_t v = 0;
    for (std::size_t i = 1; i < kSizeLen; ++i) {
      if (v > (~std::uint64_t{0} >> 8)) {
        throw DataError(label.at(header + kSizeAt) + "a base-256 member size beyond 2^64");
      }
      v = (v << 8) | p[i];
    }
    return v;
  }
  if (const auto v = octal(block, kSizeAt, kSizeLen)) return *v;
  throw DataError(label.at(header + kSizeAt) + "the tar header's size field is not octal");
}

bool checksum_ok(std::span<const std::byte> block, std::uint64_t stored) {
  std::uint64_t plain = 0;
  std::int64_t signed_sum = 0;
  for (std::size_t i = 0; i < kBlock; ++i) {
    const bool in_sum = i >= kSumAt && i < kSumAt + kSumLen;
    const auto u = in_sum ? static_cast<unsigned char>(' ') : static_cast<unsigned char>(block[i]);
    plain += u;
    signed_sum += in_sum ? ' ' : static_cast<signed char>(u);
  }
  return stored == plain || static_cast<std::int64_t>(stored) == signed_sum;
}

bool all_zero(std::span<const std::byte> block) {
  return std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; });
}

// What PAX extended headers and GNU long names say about the member that follows them.
struct Pending {
  std::optional<std::string> long_name;
  std::optional<std::string> pax_path;
  std::optional<std::uint64_t> pax_size;
  std::uint64_t at = 0;  // the first such header
  bool any() const { return long_name || pax_path || pax_size; }
};

// PAX records: "<length> <key>=<value>\n", the length counting the whole record.
void parse_pax(std::string_view text, std::uint64_t data_at, const FileLabel& label,
               Pending& pending) {
  std::size_t p = 0;
  while (p < text.size()) {
    if (text[p] == '\0') break;  // padding some writers leave
    const auto bad = [&](const char* why) {
      return DataError(label.at(data_at + p) + "malformed PAX header record: " + why);
    };
    std::size_t len = 0;
    std::size_t q = p;
    for (; q < text.size() && text[q] >= '0' && text[q] <= '9'; ++q) {
      if (len > kTarMaxMetaBytes) throw bad("length too large");
      len = len * 10 + static_cast<std::size_t>(text[q] - '0');
    }
    if (q == p || q >= text.size() || text[q] != ' ') throw bad("no length");
    if (len <= q - p + 1 || len > text.size() - p) throw bad("its length runs past the header");
    const std::string_view record = text.substr(q + 1, len - (q - p) - 1);
    if (record.empty() || record.back() != '\n') throw bad("no newline at its end");
    const std::size_t eq = record.find('=');
    if (eq == std::string_view::npos) throw bad("no '='");
    const std::string_view key = record.substr(0, eq);
    const std::string_view value = record.substr(eq + 1, record.size() - eq - 2);
    if (key == "path") {
      pending.pax_path = std::string(value);
    } else if (key == "size") {
      std::uint64_t v = 0;
      if (value.empty()) throw bad("an empty size");
      for (const char c : value) {
        if (c < '0' || c > '9') throw bad("a size that is not decimal");
        const auto next = try_mul<std::uint64_t>(v, 10);
        const auto sum = next ? try_add<std::uint64_t>(*next, c - '0') : std::nullopt;
        if (!sum) throw bad("a size beyond 2^64");
        v = *sum;
      }
      pending.pax_size = v;
    }
    p += len;
  }
}

std::string read_meta(const TarReader& read, std::uint64_t at, std::uint64_t size,
                      const FileLabel& label, const char* what) {
  if (size > kTarMaxMetaBytes) {
    throw DataError(label.at(at) + what + " of " + std::to_string(size) + " bytes, over the " +
                    std::to_string(kTarMaxMetaBytes) + " read");
  }
  std::string text(static_cast<std::size_t>(size), '\0');
  const std::size_t got =
      read(at, {reinterpret_cast<std::byte*>(text.data()), static_cast<std::size_t>(size)});
  if (got != size) throw DataError(label.at(at) + what + " cut short");
  return text;
}

}  // namespace

std::vector<TarMember> index_tar(std::uint64_t file_size, const TarReader& read,
                                 const FileLabel& label) {
  std::vector<TarMember> members;
  Blocks blocks(file_size, read);
  Pending pending;
  std::uint64_t pos = 0;
  for (;;) {
    if (file_size - pos < kBlock) {
      throw DataError(label.at(pos) +
                      (pos == file_size
                           ? std::string("the tar file ends without its end-of-archive blocks")
                           : "the tar file is cut short inside a header (" +
                                 std::to_string(file_size - pos) + " of 512 bytes)") +
                      " (a truncated shard?)");
    }
    const std::span<const std::byte> block = blocks.at(pos, kBlock);
    if (block.size() < kBlock) {
      throw DataError(label.at(pos) + "the file shrank while its tar headers were read");
    }
    if (all_zero(block)) {
      if (pending.any()) {
        throw DataError(label.at(pending.at) +
                        "a PAX header or GNU long name with no member after it");
      }
      return members;  // the end-of-archive block; what follows is padding
    }
    const std::optional<std::uint64_t> sum = octal(block, kSumAt, kSumLen);
    if (!sum || !checksum_ok(block, *sum)) {
      throw DataError(label.at(pos) + (pos == 0 ? "not a tar file" : "not a tar header") +
                      " (the header checksum does not match; a corrupt or truncated shard?)");
    }
    const auto type = static_cast<char>(block[kTypeAt]);
    const bool meta = type == 'L' || type == 'K' || type == 'x' || type == 'g';
    std::uint64_t size = size_field(block, label, pos);
    if (!meta && pending.pax_size) size = *pending.pax_size;
    const std::uint64_t data = pos + kBlock;
    const auto end = try_add<std::uint64_t>(data, size);
    const auto padded_size = try_add<std::uint64_t>(size, (kBlock - size % kBlock) % kBlock);
    const auto next = padded_size ? try_add<std::uint64_t>(data, *padded_size) : std::nullopt;
    std::string name;
    if (!meta) {
      if (pending.pax_path) {
        name = *pending.pax_path;
      } else if (pending.long_name) {
        name = *pending.long_name;
      } else {
        name = text_of(block, kNameAt, kNameLen);
        // POSIX ustar ("ustar\0" "00") splits long paths into prefix/name; GNU's "ustar  " has
        // other fields there.
        if (std::memcmp(block.data() + kMagicAt,
                        "ustar\0"
                        "00",
                        8) == 0) {
          const std::string_view prefix = text_of(block, kPrefixAt, kPrefixLen);
          if (!prefix.empty()) name = std::string(prefix) + "/" + name;
        }
      }
    }
    if (!end || !next || *end > file_size || *next > file_size) {
      throw DataError(label.at(pos) +
                      (meta ? std::string("a tar metadata member") : "member '" + name + "'") +
                      " of " + std::to_string(size) + " bytes at byte " + std::to_string(data) +
                      " runs past the end of the file (" + std::to_string(file_size) +
                      " bytes): a truncated shard or a corrupt size");
    }
    if (meta && !pending.any()) pending.at = pos;
    switch (type) {
      case 'L': {
        std::string text = read_meta(read, data, size, label, "a GNU long name");
        text.resize(strnlen(text.c_str(), text.size()));
        pending.long_name = std::move(text);
        break;
      }
      case 'x':
        parse_pax(read_meta(read, data, size, label, "a PAX header"), data, label, pending);
        break;
      case 'K':
      case 'g':
        break;
      case '0':
      case '\0':
      case '7':
        members.push_back({std::move(name), pending.any() ? pending.at : pos, data, size});
        [[fallthrough]];
      default:  // folders, links, devices, sparse files: not samples
        pending = {};
        break;
    }
    pos = *next;
  }
}

}  // namespace ferry::detail
