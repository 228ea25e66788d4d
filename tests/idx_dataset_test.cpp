#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"
#include "loader_test_util.hpp"
#include "pipeline/staging.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::IdxDataset;
using ferry::IdxOptions;

std::vector<std::uint8_t> idx_bytes(std::uint8_t ndims, std::vector<std::uint32_t> dims,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out = {0, 0, 8, ndims};
  for (const std::uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<std::uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_idx_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::vector<std::uint8_t>& bytes,
                 bool gzip = false) {
    const fs::path p = dir_ / name;
    if (gzip) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return p;
  }

  // 5 images of 3 x 4 whose pixel j of image i is i * 16 + j; labels 9 - i.
  std::pair<fs::path, fs::path> good(bool gzip) {
    std::vector<std::uint8_t> pixels;
    for (std::uint8_t i = 0; i < 5; ++i) {
      for (std::uint8_t j = 0; j < 12; ++j) pixels.push_back(static_cast<std::uint8_t>(i * 16 + j));
    }
    return {write(gzip ? "img.gz" : "img", idx_bytes(3, {5, 3, 4}, pixels), gzip),
            write(gzip ? "lbl.gz" : "lbl", idx_bytes(1, {5}, {9, 8, 7, 6, 5}), gzip)};
  }

  static std::string message_of(const fs::path& images, const fs::path& labels,
                                const IdxOptions& o = {}) {
    try {
      (void)IdxDataset::open(images, labels, o);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  }

  fs::path write_raw(const std::string& name, const std::string& bytes) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  fs::path dir_;
};

TEST_F(IdxFiles, ReadsPlainAndGzippedFilesAlike) {
  for (const bool gzip : {false, true}) {
    const auto [images, labels] = good(gzip);
    const auto ds = IdxDataset::open(images, labels);
    ASSERT_EQ(ds->size(), 5U);
    EXPECT_EQ(ds->rows(), 3);
    EXPECT_EQ(ds->cols(), 4);
    EXPECT_EQ(ds->fields()[0], (ferry::FieldSpec{"image", ferry::DType::u8, {3, 4}}));
    EXPECT_EQ(ds->fields()[1], (ferry::FieldSpec{"label", ferry::DType::i64, {}}));
    ferry::LoaderOptions o;
    o.batch_size = 2;
    o.device = ferry::Device::cpu();
    ferry::Loader loader(ds, o);
    std::size_t seen = 0;
    for (const ferry::Batch& b : loader.epoch(0)) {
      for (std::size_t k = 0; k < b.size(); ++k) {
        const auto i = static_cast<std::int64_t>(b.indices()[k]);
        EXPECT_EQ(b["label"].data<std::int64_t>()[k], 9 - i);
        for (std::int64_t j = 0; j < 12; ++j) {
          EXPECT_EQ(b["image"].data<std::uint8_t>()[static_cast<std::int64_t>(k) * 12 + j],
                    i * 16 + j);
        }
        ++seen;
      }
    }
    EXPECT_EQ(seen, 5U);
  }
}

TEST_F(IdxFiles, BadFilesRaiseDataErrorNamingTheFileAndTheByte) {
  const auto [images, labels] = good(false);
  const std::string missing = message_of(dir_ / "nope", labels);
  EXPECT_NE(missing.find((dir_ / "nope").string() + ": cannot open: No such file"),
            std::string::npos)
      << missing;
  EXPECT_NE(message_of(labels, images).find("byte 0: magic number 0x00000801, expected 0x00000803"),
            std::string::npos)
      << message_of(labels, images);
  const fs::path truncated = write("short", idx_bytes(3, {5, 3, 4}, std::vector<std::uint8_t>(59)));
  EXPECT_NE(
      message_of(truncated, labels)
          .find("short: byte 16: the header says 5 x 3 x 4 = 60 bytes of data, the file has 59"),
      std::string::npos)
      << message_of(truncated, labels);
  const fs::path fewer = write("fewer", idx_bytes(1, {4}, {1, 2, 3, 4}));
  EXPECT_NE(message_of(images, fewer).find("5 images in"), std::string::npos);
  EXPECT_NE(message_of(images, fewer).find("but 4 labels in"), std::string::npos);
  const fs::path empty = write("empty", {});
  EXPECT_NE(message_of(empty, labels).find("empty: byte 0: the file has 0 bytes"),
            std::string::npos);
  const fs::path header = write("header", {0, 0, 8, 3, 0, 0});
  EXPECT_NE(message_of(header, labels).find("header: byte 6: the header ends early"),
            std::string::npos)
      << message_of(header, labels);
  const fs::path corrupt_gz = write("corrupt.gz", {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3});
  EXPECT_NE(message_of(corrupt_gz, labels).find("corrupt.gz"), std::string::npos);
}

// A gzip stream of `parts`, each flushed to a byte boundary, then `tail` as it is (garbage, say).
std::string gzip_parts(const std::vector<std::vector<std::uint8_t>>& parts,
                       const std::string& tail = {}) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out;
  std::vector<std::uint8_t> buf(1 << 16);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::vector<std::uint8_t> in = parts[i];
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(in.size());
    const int flush = tail.empty() && i + 1 == parts.size() ? Z_FINISH : Z_SYNC_FLUSH;
    do {
      z.next_out = buf.data();
      z.avail_out = static_cast<uInt>(buf.size());
      deflate(&z, flush);
      out.append(reinterpret_cast<const char*>(buf.data()), buf.size() - z.avail_out);
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return out + tail;
}

std::vector<std::uint8_t> header_only(std::uint8_t ndims, std::vector<std::uint32_t> dims) {
  return idx_bytes(ndims, std::move(dims), {});
}

TEST_F(IdxFiles, DimensionsWhoseProductOverflowsRaiseDataError) {
  const auto [images, labels] = good(false);
  // 4 x 2^31 x 2^31 = 2^64 bytes, which wraps to the 0 bytes this 16-byte file holds.
  for (const bool gz : {false, true}) {
    const fs::path wraps =
        write(gz ? "wraps.gz" : "wraps", header_only(3, {4, 1U << 31, 1U << 31}), gz);
    const std::string m = message_of(wraps, labels);
    EXPECT_NE(m.find(wraps.string() + ": byte 4: the header's dimensions 4 x 2147483648 x "
                                      "2147483648: shape [4, 2147483648, 2147483648] has more "
                                      "elements than int64 holds"),
              std::string::npos)
        << m;
  }
  // No images, but each of (2^32 - 1)^2 bytes: the loader would stage them.
  const fs::path empty_huge = write("empty_huge", header_only(3, {0, 0xffffffffU, 0xffffffffU}));
  const fs::path no_labels = write("no_labels", header_only(1, {0}));
  EXPECT_NE(message_of(empty_huge, no_labels).find("empty_huge: byte 4: the header's dimensions"),
            std::string::npos)
      << message_of(empty_huge, no_labels);
  IdxOptions small;
  small.max_decompressed_bytes = 1 << 20;
  const fs::path empty_big = write("empty_big", header_only(3, {0, 2048, 2048}));
  EXPECT_NE(message_of(empty_big, no_labels, small)
                .find("empty_big: byte 8: one image of 2048 x 2048 bytes is larger than the "
                      "limit of 1048576 bytes (IdxOptions::max_decompressed_bytes)"),
            std::string::npos)
      << message_of(empty_big, no_labels, small);
  // 2^62 bytes fit in the sizes, but not in this file: refused before anything is allocated.
  const fs::path huge = write("huge", header_only(3, {1U << 31, 1U << 31, 1}));
  EXPECT_NE(message_of(huge, labels)
                .find("huge: byte 16: the header says 2147483648 x 2147483648 x 1 = "
                      "4611686018427387904 bytes of data, the file has 0"),
            std::string::npos)
      << message_of(huge, labels);
  const fs::path huge_labels = write("huge_labels", header_only(1, {0xffffffffU}));
  EXPECT_NE(message_of(images, huge_labels)
                .find("huge_labels: byte 8: the header says 4294967295 = 4294967295 bytes of "
                      "data, the file has 0"),
            std::string::npos)
      << message_of(images, huge_labels);
}

TEST_F(IdxFiles, GzipBeyondTheLimitIsRefusedFromItsHeader) {
  // 10000 images of 32 x 32 zeros: 10 MB that compress to a few KB.
  const std::vector<std::uint8_t> header = header_only(3, {10000, 32, 32});
  const std::vector<std::uint8_t> zeros(std::size_t{10000} * 32 * 32);
  const fs::path images = write_raw("bomb.gz", gzip_parts({header, zeros}));
  ASSERT_LT(fs::file_size(images), 100000U);
  const fs::path labels =
      write("lbl.gz", idx_bytes(1, {10000}, std::vector<std::uint8_t>(10000)), true);
  IdxOptions o;
  o.max_decompressed_bytes = 1 << 20;
  const std::string expected =
      "IdxDataset: " + images.string() +
      ": byte 4: the header says 10000 x 32 x 32 = 10240000 bytes of data, more than a gzipped "
      "file may decompress to: the limit is 1048576 bytes (IdxOptions::max_decompressed_bytes)";
  EXPECT_EQ(message_of(images, labels, o), expected);
  // The header is checked before the data is inflated: data that turns corrupt after the
  // first 1 MB does not change the error.
  const fs::path corrupt =
      write_raw("corrupt.gz",
                gzip_parts({header, std::vector<std::uint8_t>(1 << 20)}, std::string(64, '\xff')));
  EXPECT_NE(message_of(corrupt, labels, o)
                .find("corrupt.gz: byte 4: the header says 10000 x 32 "
                      "x 32 = 10240000 bytes of data, more than"),
            std::string::npos)
      << message_of(corrupt, labels, o);
  o.max_decompressed_bytes = 10240016;  // exactly the file
  const std::string cut = message_of(corrupt, labels, o);
  EXPECT_NE(cut.find("corrupt.gz: byte "), std::string::npos) << cut;
  EXPECT_NE(cut.find(": cannot read: "), std::string::npos) << cut;
  const auto ds = IdxDataset::open(images, labels, o);
  EXPECT_EQ(ds->size(), 10000U);
  EXPECT_EQ(ds->pixels().size(), 10240000U);
  o.max_decompressed_bytes = 10240015;
  EXPECT_NE(message_of(images, labels, o).find("the limit is 10240015 bytes"), std::string::npos);
  // The default (0) is half the physical memory.
  EXPECT_EQ(IdxDataset::open(images, labels)->size(), 10000U);
}

TEST_F(IdxFiles, ImagesOfNoPixelsReadAsTheirLabels) {
  // 3 images of 2^31 x 0 pixels: no data, and nothing to copy.
  const auto ds = IdxDataset::open(write("img", header_only(3, {3, 1U << 31, 0})),
                                   write("lbl", idx_bytes(1, {3}, {4, 5, 6})));
  ASSERT_EQ(ds->size(), 3U);
  const ferry::detail::SlotLayout layout(ds->fields(), 3);
  std::vector<std::byte> batch(layout.bytes);
  for (std::size_t i = 0; i < 3; ++i)
    ds->read(i, ferry::detail::SampleRefs::make(&layout, batch.data(), i, 0));
  const auto* labels = reinterpret_cast<const std::int64_t*>(batch.data() + layout.offsets[1]);
  EXPECT_EQ(std::vector<std::int64_t>(labels, labels + 3), (std::vector<std::int64_t>{4, 5, 6}));
}

TEST(DecompressedLimit, DefaultIsHalfThePhysicalMemory) {
  const auto bytes = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                     static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(ferry::default_decompressed_limit(), bytes / 2);
}

TEST_F(IdxFiles, DataThatDisagreesWithTheHeaderIsRefusedWithoutReadingOn) {
  const auto [images, labels] = good(false);
  // A header that says 4 bytes, over 10 MB of zeros: the reading stops after the 4.
  std::vector<std::uint8_t> lots(10 << 20);
  const fs::path more = write_raw("more.gz", gzip_parts({header_only(3, {1, 2, 2}), lots}));
  const fs::path one = write("one", idx_bytes(1, {1}, {3}));
  EXPECT_NE(message_of(more, one).find(
                "more.gz: byte 16: the header says 1 x 2 x 2 = 4 bytes of data, the file has more"),
            std::string::npos)
      << message_of(more, one);
  const fs::path plain_more = write("plain_more", idx_bytes(3, {1, 2, 2}, {1, 2, 3, 4, 5}));
  EXPECT_NE(message_of(plain_more, one)
                .find("plain_more: byte 16: the header says 1 x 2 x 2 = 4 bytes of data, the file "
                      "has 5"),
            std::string::npos)
      << message_of(plain_more, one);
  const fs::path fewer =
      write("fewer.gz", idx_bytes(3, {5, 3, 4}, std::vector<std::uint8_t>(50)), true);
  EXPECT_NE(message_of(fewer, labels)
                .find("fewer.gz: byte 16: the header says 5 x 3 x 4 = 60 bytes of data, the file "
                      "has 50"),
            std::string::npos)
      << message_of(fewer, labels);
  // A gzip stream cut short, in the header or in the data.
  std::string whole = gzip_parts({idx_bytes(3, {5, 3, 4}, std::vector<std::uint8_t>(60, 7))});
  for (const std::size_t keep : {std::size_t{12}, whole.size() - 12}) {
    const fs::path cut = write_raw("cut.gz", whole.substr(0, keep));
    const std::string m = message_of(cut, labels);
    EXPECT_NE(m.find("cut.gz: byte "), std::string::npos) << m;
    EXPECT_NE(m.find("the gzip stream ends early"), std::string::npos) << m;
  }
}

// Every batch of a shuffled epoch of batches of 2, directly or gathered from rows.
std::vector<std::vector<std::uint8_t>> batches_of(const std::shared_ptr<const ferry::Dataset>& ds,
                                                  bool gathered) {
  return ferry::testing::epoch_bytes(ds, 2, 3, 1, gathered);
}

TEST_F(IdxFiles, StandsOnATensorDatasetThatMovesBetweenDevices) {
  const auto [images, labels] = good(true);
  const auto ds = IdxDataset::open(images, labels);
  EXPECT_EQ(ds->device(), ferry::Device::cpu());
  // The rows in memory: the loader may gather from them.
  const std::span<const ferry::Tensor> rows = ds->rows_in_memory();
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows[0].shape(), (std::vector<std::int64_t>{5, 3, 4}));
  EXPECT_EQ(rows[0].dtype(), ferry::DType::u8);
  EXPECT_EQ(rows[1].shape(), (std::vector<std::int64_t>{5}));
  EXPECT_EQ(rows[1].dtype(), ferry::DType::i64);
  EXPECT_EQ(rows[0].data(), ds->pixels().data());  // the tensor views the pixels: no copy
  EXPECT_EQ(rows[1].data<std::int64_t>()[4], 5);

  // On the CPU already: the same storage, the same samples.
  const auto same = ds->to(ferry::Device::cpu());
  EXPECT_EQ(same->rows(), 3);
  EXPECT_EQ(same->cols(), 4);
  EXPECT_EQ(same->labels(), ds->labels());
  EXPECT_EQ(same->fields(), ds->fields());
  for (std::size_t f = 0; f < 2; ++f) {
    EXPECT_TRUE(same->rows_in_memory()[f].shares_storage_with(rows[f])) << f;
  }
  EXPECT_EQ(batches_of(same, false), batches_of(ds, false));

  if (!ferry::cuda_is_available()) {
    EXPECT_THROW((void)ds->to(ferry::Device::cuda()), ferry::DeviceError);
    return;
  }
  const auto gpu = ds->to(ferry::Device::cuda());
  EXPECT_EQ(gpu->device(), ferry::Device::cuda());
  EXPECT_THROW((void)gpu->pixels(), ferry::ConfigError);
  EXPECT_EQ(gpu->labels(), ds->labels());
  const auto back = gpu->to(ferry::Device::cpu());
  EXPECT_EQ(back->pixels(), ds->pixels());
  EXPECT_EQ(batches_of(back, false), batches_of(ds, false));
}

TEST_F(IdxFiles, GatheredRowsGiveTheSameBatchesAsReadSamples) {
  for (const bool gzip : {false, true}) {
    const auto [images, labels] = good(gzip);
    const auto ds = IdxDataset::open(images, labels);
    const auto read = batches_of(ds, false);
    EXPECT_EQ(read.size(), 3U);
    EXPECT_EQ(batches_of(ds, true), read);
  }
}

TEST(IdxDataset, ReadsDebiansFashionMnist) {
  const fs::path dir = "/usr/share/datasets/fashion-mnist";
  if (!fs::exists(dir / "t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (scripts/setup installs it)";
  }
  const auto ds =
      IdxDataset::open(dir / "t10k-images-idx3-ubyte.gz", dir / "t10k-labels-idx1-ubyte.gz");
  EXPECT_EQ(ds->size(), 10000U);
  EXPECT_EQ(ds->rows(), 28);
  EXPECT_EQ(ds->cols(), 28);
  const std::set<std::uint8_t> classes(ds->labels().begin(), ds->labels().end());
  EXPECT_EQ(classes, (std::set<std::uint8_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

}  // namespace
