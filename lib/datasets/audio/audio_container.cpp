// What libsndfile does not check of a container, checked before a file is read: an MP3's
// length tag, a WAV's data chunk against the file's bytes, an Ogg file's first and last pages.

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "datasets/audio/audio_internal.hpp"

namespace ferry::detail::audio {

// Whether an MP3's first frame carries a Xing, Info or VBRI header: only then does mpg123 (and
// so libsndfile) know its length; without one it guesses from the first frame's bitrate and the
// file's size (a valid CBR file gets a few frames too many, a VBR one a fraction).
bool mp3_length_tag(ByteSource& source) {
  std::array<std::byte, 10> id3{};
  std::int64_t at = 0;
  // ID3v2 tags, one after another: "ID3", version, flags, a 28-bit "syncsafe" size.
  while (read_at(source, at, id3.data(), id3.size()) == id3.size() &&
         std::memcmp(id3.data(), "ID3", 3) == 0) {
    std::int64_t size = 0;
    for (std::size_t i = 6; i < 10; ++i) size = (size << 7) | (std::to_integer<int>(id3[i]) & 0x7f);
    at += 10 + size + ((std::to_integer<int>(id3[5]) & 0x10) != 0 ? 10 : 0);
  }
  // The tag lies within the first frame's first bytes, after its sync (which mpg123 may have to
  // look for past junk): look in the first 64 KiB.
  constexpr std::size_t kLook = std::size_t{64} * 1024;
  std::vector<std::byte> head(kLook);
  head.resize(read_at(source, at, head.data(), head.size()));
  const auto byte = [&](std::size_t i) { return std::to_integer<unsigned>(head[i]); };
  for (std::size_t i = 0; i + 4 < head.size(); ++i) {
    if (byte(i) != 0xff || (byte(i + 1) & 0xe0) != 0xe0) continue;
    // The first frame header: Xing/Info follow the side information (at most 32 bytes), VBRI
    // sits 32 bytes after the header.
    const std::size_t end = std::min(head.size(), i + 4 + 32 + 4 + 4);
    for (std::size_t k = i + 4; k + 4 <= end; ++k) {
      const char* p = reinterpret_cast<const char*>(head.data() + k);
      if (std::memcmp(p, "Xing", 4) == 0 || std::memcmp(p, "Info", 4) == 0 ||
          std::memcmp(p, "VBRI", 4) == 0) {
        return true;
      }
    }
    return false;
  }
  return false;
}

namespace {

std::uint32_t le32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

std::uint64_t le64(const std::byte* p) { return (std::uint64_t{le32(p + 4)} << 32) | le32(p); }

}  // namespace

std::optional<std::pair<std::int64_t, std::int64_t>> wav_data_cut(ByteSource& source) {
  std::array<std::byte, 12> riff{};
  if (read_at(source, 0, riff.data(), riff.size()) != riff.size() ||
      (std::memcmp(riff.data(), "RIFF", 4) != 0 && std::memcmp(riff.data(), "RF64", 4) != 0) ||
      std::memcmp(riff.data() + 8, "WAVE", 4) != 0) {
    return std::nullopt;
  }
  // RF64 (a WAV over 4 GiB): the data chunk's size is in the "ds64" chunk that comes first.
  std::optional<std::int64_t> ds64_data;
  std::int64_t at = 12;
  std::array<std::byte, 8> chunk{};
  // At most a few chunks come before "data" in any real file; the walk is bounded anyway.
  for (int n = 0; n < 4096 && read_at(source, at, chunk.data(), 8) == 8; ++n) {
    std::int64_t size = le32(chunk.data() + 4);
    if (std::memcmp(chunk.data(), "ds64", 4) == 0) {
      std::array<std::byte, 16> sizes{};
      if (read_at(source, at + 8, sizes.data(), sizes.size()) == sizes.size()) {
        // A size past what any file holds is still a claim (of more than the file has).
        const std::uint64_t data = le64(sizes.data() + 8);
        ds64_data = static_cast<std::int64_t>(std::min<std::uint64_t>(data, INT64_MAX));
      }
    }
    if (std::memcmp(chunk.data(), "data", 4) == 0) {
      if (size == 0xffffffffLL && ds64_data) size = *ds64_data;
      // Sizes a writer to a pipe leaves (0, sox's 0x7ffff000, 0xffffffff): not known.
      if (size == 0 || (size >= 0x7ffff000LL && size <= 0xffffffffLL && !ds64_data)) {
        return std::nullopt;
      }
      const std::int64_t there = source.size - (at + 8);
      if (size > there) return std::make_pair(size, there);
      return std::nullopt;
    }
    at += 8 + size + (size & 1);
  }
  return std::nullopt;
}

namespace {

// Whether an Ogg file ends with a whole page carrying the end-of-stream flag: libsndfile takes
// the stream's length from the last page's granule position, so a file whose last pages were
// dropped (cut at a page boundary) reads as a shorter whole one. Returns the reason it does
// not, or an empty string.
std::string ogg_end_missing(ByteSource& source, std::uint32_t& serial) {
  // A page is at most 27 + 255 + 255 * 255 bytes: the last one starts in the last 65307.
  constexpr std::int64_t kMostPage = 27 + 255 + 255 * 255;
  const std::int64_t from = std::max<std::int64_t>(0, source.size - kMostPage);
  std::vector<std::byte> tail(static_cast<std::size_t>(source.size - from));
  tail.resize(read_at(source, from, tail.data(), tail.size()));
  const auto byte = [&](std::size_t i) { return std::to_integer<unsigned>(tail[i]); };
  for (std::size_t p = tail.size() >= 27 ? tail.size() - 27 + 1 : 0; p-- > 0;) {
    if (std::memcmp(tail.data() + p, "OggS", 4) != 0 || byte(p + 4) != 0) continue;
    const std::size_t segments = byte(p + 26);
    if (p + 27 + segments > tail.size()) continue;
    std::size_t body = 0;
    for (std::size_t k = 0; k < segments; ++k) body += byte(p + 27 + k);
    if (p + 27 + segments + body != tail.size()) continue;  // not the page that ends the file
    serial = le32(tail.data() + p + 14);
    if ((byte(p + 5) & 0x04) == 0) {
      return "truncated: its last Ogg page has no end-of-stream flag (the pages after it are "
             "missing)";
    }
    return {};
  }
  return "truncated or corrupt: it does not end with a whole Ogg page";
}

// The CRC of an Ogg page (polynomial 0x04c11db7, not reflected, initial 0), its checksum field
// taken as zero.
std::uint32_t ogg_crc(const std::byte* page, std::size_t n) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t r = i << 24;
      for (int k = 0; k < 8; ++k) r = (r & 0x80000000U) != 0 ? (r << 1) ^ 0x04c11db7U : r << 1;
      t[i] = r;
    }
    return t;
  }();
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned b = (i >= 22 && i < 26) ? 0U : std::to_integer<unsigned>(page[i]);
    crc = (crc << 8) ^ table[((crc >> 24) ^ b) & 0xffU];
  }
  return crc;
}

// The samples (at 48 kHz) of the Opus packets that end in `page` (RFC 6716, section 3.1: a
// packet's first byte gives its frames' duration and count).
std::uint64_t opus_page_samples(const std::vector<std::byte>& page) {
  const std::size_t segments = std::to_integer<std::size_t>(page[26]);
  std::size_t at = 27 + segments;
  std::size_t length = 0;
  std::uint64_t samples = 0;
  for (std::size_t i = 0; i < segments; ++i) {
    length += std::to_integer<std::size_t>(page[27 + i]);
    if (std::to_integer<unsigned>(page[27 + i]) == 255) continue;  // the packet goes on
    if (length > 0 && at + length <= page.size()) {
      const unsigned toc = std::to_integer<unsigned>(page[at]);
      const unsigned config = toc >> 3U;
      static constexpr std::array<std::uint64_t, 4> kSilk = {480, 960, 1920, 2880};
      static constexpr std::array<std::uint64_t, 4> kCelt = {120, 240, 480, 960};
      const std::uint64_t frame = config < 12   ? kSilk[config % 4]
                                  : config < 16 ? (config % 2 == 0 ? 480 : 960)
                                                : kCelt[config % 4];
      std::uint64_t frames = 1;
      if ((toc & 3U) == 1 || (toc & 3U) == 2) frames = 2;
      if ((toc & 3U) == 3)
        frames = length > 1 ? (std::to_integer<unsigned>(page[at + 1]) & 0x3fU) : 0;
      samples += frame * frames;
    }
    at += length;
    length = 0;
  }
  return samples;
}

// The pages of an Ogg file up to its first audio page (the first whose granule position is
// set), each against its checksum: libogg drops a page that fails it, and when that page is the
// first of the audio, libsndfile takes the stream as starting after it, reading a shorter whole
// file. Also the stream's serial number. Returns the reason, or an empty string.
struct OggHead {
  std::uint32_t serial = 0;
  bool opus = false;
  std::uint64_t rate = 0;      // granule positions a second (Opus: 48000; Vorbis: its rate)
  std::uint32_t pre_skip = 0;  // Opus
  bool late_start = false;     // Opus: the first audio page's granule past its samples
};

std::string ogg_head_bad(ByteSource& source, OggHead& h) {
  constexpr int kMostPages = 64;  // headers (a few pages at most), then the first audio page
  std::int64_t at = 0;
  std::vector<std::byte> page;
  for (int k = 0; k < kMostPages; ++k) {
    // The header and the lacing values (at most 255) in one read, then the body.
    page.resize(27 + 255);
    const std::size_t got = read_at(source, at, page.data(), page.size());
    if (got < 27 || std::memcmp(page.data(), "OggS", 4) != 0) {
      return {};  // libsndfile's own reading says what is wrong
    }
    const std::size_t segments = std::to_integer<std::size_t>(page[26]);
    if (got < 27 + segments) return {};
    std::size_t body = 0;
    for (std::size_t s = 0; s < segments; ++s) body += std::to_integer<std::size_t>(page[27 + s]);
    page.resize(27 + segments + body);
    if (read_at(source, at, page.data(), page.size()) != page.size()) return {};
    if (k == 0) h.serial = le32(page.data() + 14);
    if (ogg_crc(page.data(), page.size()) != le32(page.data() + 22)) {
      return "corrupt: Ogg page " + std::to_string(k) + " (at byte " + std::to_string(at) +
             ") fails its checksum";
    }
    const std::size_t packet = 27 + segments;  // the first page's: the identification header
    if (k == 0 && page.size() >= packet + 19 &&
        std::memcmp(page.data() + packet, "OpusHead", 8) == 0) {
      h.opus = true;
      h.rate = 48000;
      h.pre_skip = std::to_integer<std::uint32_t>(page[packet + 10]) |
                   (std::to_integer<std::uint32_t>(page[packet + 11]) << 8);
    } else if (k == 0 && page.size() >= packet + 16 &&
               std::memcmp(page.data() + packet, "\x01vorbis", 7) == 0) {
      h.rate = le32(page.data() + packet + 12);
    }
    const std::uint64_t granule = le64(page.data() + 6);
    if (granule != 0 && granule != ~std::uint64_t{0}) {
      // An Opus stream whose first audio page ends later than its samples reach starts late (a
      // stream cut from a longer one, RFC 7845 section 4.5).
      h.late_start = h.opus && granule > opus_page_samples(page);
      return {};
    }
    at += static_cast<std::int64_t>(page.size());
  }
  return {};
}

// Every page, from the first: each against its checksum and in sequence (libogg drops a page
// that fails its checksum, and a decode goes on after the hole: a clip read across it, or
// sought past it, holds later samples than its place, without a word); one stream (one serial
// number, one beginning), and its granule positions never going down. libsndfile reads the
// first stream of a chained file alone (and takes its length from the last page, of another
// stream), and seeks by granule positions: both read the wrong samples without a word. A walk
// that meets no page where one should begin stops there: libsndfile's decode then says what is
// wrong.
std::string ogg_walk_bad(ByteSource& source, std::uint64_t& longest_page) {
  std::int64_t at = 0;
  std::uint32_t serial = 0;
  std::uint32_t sequence = 0;
  std::uint64_t granule = 0;
  bool any = false;  // a granule position met
  std::vector<std::byte> bytes(27 + 255 + 255 * 255);
  for (std::int64_t k = 0; at < source.size; ++k) {
    const std::size_t got = read_at(source, at, bytes.data(), 27 + 255);
    if (got < 27 || std::memcmp(bytes.data(), "OggS", 4) != 0) return {};
    const std::size_t segments = std::to_integer<std::size_t>(bytes[26]);
    if (got < 27 + segments) return {};
    std::size_t body = 0;
    for (std::size_t i = 0; i < segments; ++i) body += std::to_integer<std::size_t>(bytes[27 + i]);
    const std::size_t size = 27 + segments + body;
    // The page's name, made only for a reason to return (a walk meets millions of pages).
    const auto page = [&] {
      return "Ogg page " + std::to_string(k) + " (at byte " + std::to_string(at) + ")";
    };
    if (size > got && read_at(source, at + static_cast<std::int64_t>(got), bytes.data() + got,
                              size - got) != size - got) {
      return {};  // cut short: libsndfile's reading says so
    }
    if (ogg_crc(bytes.data(), size) != le32(bytes.data() + 22)) {
      return "corrupt: " + page() + " fails its checksum";
    }
    const std::uint32_t number = le32(bytes.data() + 18);
    if (k == 0) {
      serial = le32(bytes.data() + 14);
    } else if (le32(bytes.data() + 14) != serial) {
      return page() + " is of another stream (serial " + std::to_string(le32(bytes.data() + 14)) +
             ", not " + std::to_string(serial) +
             "): a chained or multiplexed Ogg file, which ferry does not read";
    } else if ((std::to_integer<unsigned>(bytes[5]) & 0x02U) != 0) {
      return page() + " begins a second stream: a chained Ogg file, which ferry does not read";
    } else if (number != sequence + 1) {
      return "corrupt: " + page() + " is page " + std::to_string(number) +
             " of its stream, after page " + std::to_string(sequence) + ": pages are missing";
    }
    sequence = number;
    const std::uint64_t g = le64(bytes.data() + 6);
    if (g != ~std::uint64_t{0}) {
      if (g < granule) {
        return "corrupt: " + page() + " goes back in time (granule position " + std::to_string(g) +
               " after " + std::to_string(granule) + ")";
      }
      if (any) longest_page = std::max(longest_page, g - granule);
      any = any || g != 0;
      granule = g;
    }
    at += static_cast<std::int64_t>(size);
  }
  return {};
}

}  // namespace

std::string ogg_problem(ByteSource& source, bool& seek_unsafe) {
  OggHead head;
  std::uint32_t last = 0;
  std::uint64_t longest_page = 0;
  std::string why = ogg_head_bad(source, head);
  if (why.empty()) why = ogg_walk_bad(source, longest_page);
  if (why.empty()) why = ogg_end_missing(source, last);
  if (why.empty() && head.serial != last) {
    why = "its last Ogg page is of another stream (serial " + std::to_string(last) + ", not " +
          std::to_string(head.serial) +
          "): a chained or multiplexed Ogg file, which ferry does not read";
  }
  // Where libsndfile's seeks land elsewhere than a decode from the start (legal files all): an
  // Opus stream that starts late or skips more than one packet first, and pages of more than a
  // second (an encoder's page_duration raised).
  seek_unsafe = head.late_start || (head.opus && head.pre_skip > 960) ||
                (head.rate > 0 && longest_page > head.rate);
  return why;
}

}  // namespace ferry::detail::audio
