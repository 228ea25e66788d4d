#pragma once

// The images the table tests write into their files (tests/arrow_dataset_test.cpp,
// tests/parquet_dataset_test.cpp): a pixel pattern of a given size and salt, encoded as JPEG
// (TurboJPEG) and PNG (libspng), so that the files' image columns hold bytes that ImageFolder
// can read from a folder too.

#include <gtest/gtest.h>
#include <spng.h>
#include <turbojpeg.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::testing::table_images {

using Bytes = std::vector<std::uint8_t>;

inline void write_bytes(const std::filesystem::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline Bytes pattern(int w, int h, int salt) {
  Bytes px(static_cast<std::size_t>(w * h * 3));
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        px[static_cast<std::size_t>((y * w + x) * 3 + c)] =
            static_cast<std::uint8_t>((x * 7 + y * 13 + c * 50 + salt * 29) % 256);
      }
    }
  }
  return px;
}
inline Bytes encode_jpeg(const Bytes& px, int w, int h) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, px.data(), w, 0, h, TJPF_RGB, &buf, &size, TJSAMP_420, 90, 0), 0);
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}
inline Bytes encode_png(const Bytes& px, int w, int h) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<std::uint32_t>(w);
  ihdr.height = static_cast<std::uint32_t>(h);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  EXPECT_EQ(spng_encode_image(ctx, px.data(), px.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  std::size_t len = 0;
  int err = 0;
  auto* buf = static_cast<std::uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return out;
}

/// `count` images (sizes 20-28 x 14-18, JPEG at even rows, PNG at odd ones) written twice: into
/// `flat` for a writer, and into `folder` (an ImageFolder's class) to compare with.
inline void write_image_pair(const std::filesystem::path& flat, const std::filesystem::path& folder,
                             std::size_t count) {
  std::filesystem::create_directories(flat);
  std::filesystem::create_directories(folder);
  for (std::size_t i = 0; i < count; ++i) {
    const int w = 20 + static_cast<int>(i % 9);
    const int h = 14 + static_cast<int>(i % 5);
    const Bytes px = pattern(w, h, static_cast<int>(i));
    char name[32];
    std::snprintf(name, sizeof name, "%03zu.%s", i, i % 2 == 0 ? "jpg" : "png");
    const Bytes encoded = i % 2 == 0 ? encode_jpeg(px, w, h) : encode_png(px, w, h);
    write_bytes(flat / name, encoded);
    write_bytes(folder / name, encoded);
  }
}

/// Checks that `table`'s batches (fields "image", "raw" and "label", in order) carry the same
/// image bytes as `folder`'s, in both image fields, with label(row) as each row's label, and
/// that there are `rows` of them. Both loaders must read in order.
template <class Label>
void expect_images_as_folder(ferry::Loader& table, ferry::Loader& folder, std::size_t rows,
                             const Label& label) {
  auto ea = table.epoch(0);
  auto fa = ea.begin();
  std::size_t n = 0;
  for (const ferry::Batch& want : folder.epoch(0)) {
    const ferry::Batch& got = *fa;
    ASSERT_EQ(got.size(), want.size());
    const std::size_t bytes = got["image"].nbytes();
    ASSERT_EQ(bytes, want["image"].nbytes());
    EXPECT_EQ(
        std::memcmp(got["image"].data<std::uint8_t>(), want["image"].data<std::uint8_t>(), bytes),
        0);
    EXPECT_EQ(
        std::memcmp(got["raw"].data<std::uint8_t>(), want["image"].data<std::uint8_t>(), bytes), 0);
    for (std::size_t j = 0; j < got.size(); ++j) {
      EXPECT_EQ(got["label"].data<std::int64_t>()[j], label(n + j));
    }
    n += got.size();
    ++fa;
  }
  EXPECT_EQ(n, rows);
}

/// The bytes of field `name` in each batch of `loader`'s epoch 0, in order.
inline std::vector<Bytes> field_bytes_by_batch(ferry::Loader& loader, const char* name) {
  std::vector<Bytes> out;
  for (const ferry::Batch& batch : loader.epoch(0)) {
    const auto* p = static_cast<const std::uint8_t*>(batch[name].data());
    out.emplace_back(p, p + batch[name].nbytes());
  }
  return out;
}

}  // namespace ferry::testing::table_images
