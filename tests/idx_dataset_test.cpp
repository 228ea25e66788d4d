#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::IdxDataset;

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

  static std::string message_of(const fs::path& images, const fs::path& labels) {
    try {
      (void)IdxDataset::open(images, labels);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
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
