#include "datasets/video/video_mp4.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include "ferry/error.hpp"

namespace ferry::detail::video {

namespace {

constexpr int kMaxDepth = 8;               // moof > traf > trun is 3 deep, moov > ... > stbl 5
constexpr std::size_t kMaxBoxes = 100000;  // boxes looked at, in all
constexpr std::size_t kMaxTracks = 64;     // a film's video, sound and subtitle tracks fit

std::uint32_t be32(const std::byte* p) noexcept {
  return (std::to_integer<std::uint32_t>(p[0]) << 24) |
         (std::to_integer<std::uint32_t>(p[1]) << 16) |
         (std::to_integer<std::uint32_t>(p[2]) << 8) | std::to_integer<std::uint32_t>(p[3]);
}

std::uint64_t be64(const std::byte* p) noexcept {
  return (std::uint64_t{be32(p)} << 32) | be32(p + 4);
}

class TableCheck {
 public:
  TableCheck(const ReadAt& read, std::uint64_t size, const std::string& name)
      : read_(read), size_(size), name_(name) {}

  /// The boxes in [from, to) of a container `depth` deep.
  void walk(std::uint64_t from, std::uint64_t to, int depth) {
    std::uint64_t at = from;
    while (at + 8 <= to && ++boxes_ <= kMaxBoxes) {
      std::array<std::byte, 16> head{};
      if (read_(at, head.data(), 8) != 8) return;
      std::uint64_t box = be32(head.data());
      const std::string_view type(reinterpret_cast<const char*>(head.data() + 4), 4);
      std::uint64_t header = 8;
      if (box == 1) {
        if (at + 16 > to || read_(at + 8, head.data() + 8, 8) != 8) return;
        box = be64(head.data() + 8);
        header = 16;
      } else if (box == 0) {
        box = to - at;  // to the container's end
      }
      if (box < header || box > to - at) return;  // FFmpeg meets it as it is
      const std::uint64_t body = at + header;
      const std::uint64_t end = at + box;
      if (type == "trak" && ++tracks_ > kMaxTracks) {
        // FFmpeg makes a stream of each, probed and indexed (990 tracks of one 1 MB file cost
        // it 1.5 GB and 6 s at every open).
        refuse(type, "makes " + std::to_string(tracks_) + " tracks (ferry reads up to " +
                         std::to_string(kMaxTracks) + ")");
      }
      if (is_container(type) && depth < kMaxDepth) {
        walk(body, end, depth + 1);
      } else {
        check(type, body, end - body);
      }
      at = end;
    }
  }

 private:
  static bool is_container(std::string_view type) noexcept {
    return type == "moov" || type == "trak" || type == "mdia" || type == "minf" || type == "stbl" ||
           type == "moof" || type == "traf";
  }

  [[noreturn]] void refuse(std::string_view type, const std::string& what) const {
    throw DataError(name_ + ": cannot open as a video: its " + std::string(type) + " box " + what +
                    " in a file of " + std::to_string(size_) + " bytes");
  }

  /// A full box's `count` fields of 32 bits after its version and flags (0 where the box is
  /// shorter).
  template <std::size_t N>
  std::array<std::uint32_t, N> fields(std::uint64_t body, std::uint64_t length) const {
    std::array<std::byte, 4 + 4 * N> bytes{};
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(length, bytes.size()));
    const std::size_t got = read_(body, bytes.data(), want);
    std::array<std::uint32_t, N> out{};
    for (std::size_t k = 0; k < N && 8 + 4 * k <= got; ++k) out[k] = be32(bytes.data() + 4 + 4 * k);
    return out;
  }

  /// A table of `entries` entries of `bytes` each after `skip` bytes of its body.
  void entries_fit(std::string_view type, std::uint64_t entries, std::uint64_t bytes,
                   std::uint64_t skip, std::uint64_t length) const {
    if (length < skip || entries > (length - skip) / bytes) {
      refuse(type, "claims " + std::to_string(entries) + " entries of " + std::to_string(bytes) +
                       " bytes in " + std::to_string(length) + " bytes");
    }
  }

  void samples_fit(std::string_view type, std::uint64_t samples) const {
    if (samples > size_) refuse(type, "claims " + std::to_string(samples) + " samples");
  }

  /// Entries of (count, value) of 32 bits each: their counts summed.
  void counted_runs(std::string_view type, std::uint64_t body, std::uint64_t length,
                    std::uint32_t entries) const {
    entries_fit(type, entries, 8, 8, length);
    std::uint64_t samples = 0;
    std::array<std::byte, std::size_t{8} * 512> chunk{};
    for (std::uint64_t e = 0; e < entries;) {
      const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(entries - e, 512));
      if (read_(body + 8 + 8 * e, chunk.data(), 8 * n) != 8 * n) return;
      for (std::size_t k = 0; k < n; ++k) samples += be32(chunk.data() + 8 * k);
      samples_fit(type, samples);
      e += n;
    }
  }

  void check(std::string_view type, std::uint64_t body, std::uint64_t length) const {
    if (type == "stts" || type == "ctts") {
      counted_runs(type, body, length, fields<1>(body, length)[0]);
    } else if (type == "stsz") {
      const auto [sample_size, count] = fields<2>(body, length);
      samples_fit(type, count);
      if (sample_size == 0) {
        entries_fit(type, count, 4, 12, length);
      } else if (std::uint64_t{sample_size} * count > size_) {
        refuse(type, "claims " + std::to_string(count) + " samples of " +
                         std::to_string(sample_size) + " bytes");
      }
    } else if (type == "stz2") {
      const auto [field_size, count] = fields<2>(body, length);
      samples_fit(type, count);
      const std::uint64_t bits = std::max<std::uint32_t>(field_size & 0xffU, 4);
      if ((std::uint64_t{count} * bits + 7) / 8 > length - std::min<std::uint64_t>(length, 12)) {
        refuse(type, "claims " + std::to_string(count) + " sizes in " + std::to_string(length) +
                         " bytes");
      }
    } else if (type == "stsc") {
      const std::uint32_t entries = fields<1>(body, length)[0];
      entries_fit(type, entries, 12, 8, length);
      std::array<std::byte, std::size_t{12} * 512> chunk{};
      for (std::uint64_t e = 0; e < entries;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(entries - e, 512));
        if (read_(body + 8 + 12 * e, chunk.data(), 12 * n) != 12 * n) return;
        for (std::size_t k = 0; k < n; ++k) samples_fit(type, be32(chunk.data() + 12 * k + 4));
        e += n;
      }
    } else if (type == "stco" || type == "stss" || type == "stps") {
      entries_fit(type, fields<1>(body, length)[0], 4, 8, length);
    } else if (type == "co64") {
      entries_fit(type, fields<1>(body, length)[0], 8, 8, length);
    } else if (type == "trun") {
      samples_fit(type, fields<1>(body, length)[0]);
    }
  }

  const ReadAt& read_;
  std::uint64_t size_;
  const std::string& name_;
  std::size_t boxes_ = 0;
  std::size_t tracks_ = 0;
};

}  // namespace

void check_sample_tables(const ReadAt& read, std::uint64_t size, const std::string& name) {
  std::array<std::byte, 8> head{};
  if (size < 8 || read(0, head.data(), 8) != 8) return;
  const std::string_view type(reinterpret_cast<const char*>(head.data() + 4), 4);
  static constexpr std::array<std::string_view, 9> kFirst = {"ftyp", "moov", "mdat", "free", "skip",
                                                             "wide", "styp", "sidx", "pnot"};
  if (std::find(kFirst.begin(), kFirst.end(), type) == kFirst.end()) return;
  TableCheck(read, size, name).walk(0, size, 0);
}

}  // namespace ferry::detail::video
