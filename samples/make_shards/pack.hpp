// samples/make_shards/pack.hpp: samples written as WebDataset shards, plain POSIX ustar tar
// files that `tar tf`, Python's tarfile and webdataset read, and ferry::WebDataset opens by
// random access. Copy it along with main.cpp.

#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace make_shards {

/// One member of a sample: its extension ("png", "cls") and its bytes.
struct Member {
  std::string ext;
  std::string bytes;
};

/// Writes one tar file: a ustar header per member, its bytes padded to 512, and at the end two
/// zero blocks, padded to a whole 10 KiB record as tar does.
class TarWriter {
 public:
  explicit TarWriter(const std::filesystem::path& path) : out_(path, std::ios::binary) {
    if (!out_) throw std::runtime_error("cannot write " + path.string());
  }

  void add(const std::string& name, const std::string& bytes) {
    if (name.size() > 100) throw std::runtime_error("member name over 100 bytes: " + name);
    std::string h(512, '\0');
    std::memcpy(h.data(), name.data(), name.size());
    std::snprintf(h.data() + 100, 8, "%07o", 0644U);
    std::snprintf(h.data() + 108, 8, "%07o", 0U);
    std::snprintf(h.data() + 116, 8, "%07o", 0U);
    if (bytes.size() >= (std::uint64_t{1} << 33)) throw std::runtime_error("member over 8 GiB");
    std::snprintf(h.data() + 124, 12, "%011llo", static_cast<unsigned long long>(bytes.size()));
    std::snprintf(h.data() + 136, 12, "%011o", 0U);
    h[156] = '0';
    std::memcpy(h.data() + 257,
                "ustar\0"
                "00",
                8);
    std::memset(h.data() + 148, ' ', 8);
    unsigned sum = 0;
    for (const char c : h) sum += static_cast<unsigned char>(c);
    std::snprintf(h.data() + 148, 8, "%06o", sum);
    write(h);
    write(bytes);
    write(std::string((512 - bytes.size() % 512) % 512, '\0'));
  }

  /// Bytes written so far.
  std::uint64_t bytes() const noexcept { return written_; }

  void close() {
    write(std::string(1024, '\0'));
    write(std::string((10240 - written_ % 10240) % 10240, '\0'));
    out_.close();
    if (!out_) throw std::runtime_error("cannot finish a shard (disk full?)");
  }

 private:
  void write(const std::string& s) {
    out_.write(s.data(), static_cast<std::streamsize>(s.size()));
    written_ += s.size();
  }
  std::ofstream out_;
  std::uint64_t written_ = 0;
};

/// Where to write and how to cut.
struct PackOptions {
  std::filesystem::path out;               ///< the folder of shards
  std::string prefix = "shard";            ///< shards are <prefix>-000000.tar, ...
  std::uint64_t shard_bytes = 256U << 20;  ///< a new shard starts before one would pass this
  std::uint64_t seed = 0;                  ///< of the shuffled order the samples are written in
};

/// Writes samples 0 .. count - 1 in a shuffled order (from seed) as shards of about
/// shard_bytes: sample i is key "%08d" of i, its members "<key>.<ext>". `sample(i)` gives its
/// members. Returns the shards written, in order.
inline std::vector<std::filesystem::path> pack(
    std::size_t count, const std::function<std::vector<Member>(std::size_t)>& sample,
    const PackOptions& options) {
  std::filesystem::create_directories(options.out);
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 rng(options.seed);
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::filesystem::path> shards;
  std::unique_ptr<TarWriter> tar;
  for (const std::size_t i : order) {
    const std::vector<Member> members = sample(i);
    std::uint64_t bytes = 0;
    for (const Member& m : members) bytes += 512 + (m.bytes.size() + 511) / 512 * 512;
    if (tar && tar->bytes() + bytes + 1024 > options.shard_bytes) {
      tar->close();
      tar.reset();
    }
    if (!tar) {
      char name[32];
      std::snprintf(name, sizeof name, "-%06zu.tar", shards.size());
      shards.push_back(options.out / (options.prefix + name));
      tar = std::make_unique<TarWriter>(shards.back());
    }
    char key[32];
    std::snprintf(key, sizeof key, "%08zu", i);
    for (const Member& m : members) tar->add(std::string(key) + "." + m.ext, m.bytes);
  }
  if (tar) tar->close();
  return shards;
}

/// A file's bytes.
inline std::string file_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<std::size_t>(std::filesystem::file_size(path)), '\0');
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    throw std::runtime_error("cannot read " + path.string());
  }
  return bytes;
}

/// The extension of a file, lower-cased, without its dot ("JPG" -> "jpg").
inline std::string extension(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext;
}

/// A 1-D little-endian float32 .npy file of `values`.
inline std::string npy_f32(const float* values, std::size_t n) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  header += std::to_string(n);
  header += ",), }";
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(reinterpret_cast<const char*>(values), n * sizeof(float));
  return out;
}

}  // namespace make_shards
