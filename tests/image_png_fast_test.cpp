// The PNG fast path (lib/datasets/image/image_png_fast.hpp) against libspng: every filter type, the
// three color types it takes, odd sizes, IDAT data split over chunks, and ancillary chunks give
// libspng's pixels byte for byte; what it does not take (palette, transparency, 16 bits,
// interlace, a channel count other than the file's) and what is irregular (a bad CRC, an
// unknown filter, a stream too short or too long) it leaves to libspng, so that decode_image()
// gives the same pixels, or the same error, with the fast path on or off.

#include "datasets/image/image_png_fast.hpp"

#include <gtest/gtest.h>
#include <libdeflate.h>
#include <spng.h>

#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "datasets/image/image_decode.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"

namespace {

using Bytes = std::vector<std::uint8_t>;
using ferry::detail::image::decode_png_fast;
using ferry::detail::image::PngFast;
using ferry::detail::image::set_png_fast;

Bytes noise(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  // Smooth runs with noise: every filter type wins somewhere.
  int v = 0;
  for (auto& x : b) {
    v = (v + static_cast<int>(rng() % 7) - 3) & 0xff;
    x = static_cast<std::uint8_t>(rng() % 4 == 0 ? rng() : static_cast<unsigned>(v));
  }
  return b;
}

/// A PNG encoded by libspng with the given filter choice, and optionally interlaced, 16-bit or
/// with a tRNS chunk.
Bytes encode(const Bytes& px, int width, int height, int color, int filter, int depth = 8,
             bool interlace = false, bool trns = false) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(ctx, SPNG_FILTER_CHOICE, filter);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<std::uint32_t>(width);
  ihdr.height = static_cast<std::uint32_t>(height);
  ihdr.bit_depth = static_cast<std::uint8_t>(depth);
  ihdr.color_type = static_cast<std::uint8_t>(color);
  ihdr.interlace_method = interlace ? SPNG_INTERLACE_ADAM7 : SPNG_INTERLACE_NONE;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  if (trns) {
    spng_trns t{};
    t.gray = 7;
    t.red = 7;
    t.green = 8;
    t.blue = 9;
    EXPECT_EQ(spng_set_trns(ctx, &t), 0);
  }
  EXPECT_EQ(spng_encode_image(ctx, px.data(), px.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  std::size_t len = 0;
  int err = 0;
  auto* buf = static_cast<std::uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes png(buf, buf + len);
  std::free(buf);
  spng_ctx_free(ctx);
  return png;
}

/// libspng's decode as G8 / RGB8 / RGBA8 (the formats ferry asks of it).
Bytes spng_pixels(const Bytes& png, int channels) {
  spng_ctx* ctx = spng_ctx_new(0);
  spng_set_png_buffer(ctx, png.data(), png.size());
  const int fmt = channels == 1 ? SPNG_FMT_G8 : channels == 3 ? SPNG_FMT_RGB8 : SPNG_FMT_RGBA8;
  std::size_t n = 0;
  EXPECT_EQ(spng_decoded_image_size(ctx, fmt, &n), 0);
  Bytes out(n);
  EXPECT_EQ(spng_decode_image(ctx, out.data(), n, fmt, channels == 4 ? SPNG_DECODE_TRNS : 0), 0);
  spng_ctx_free(ctx);
  return out;
}

Bytes fast_pixels(const Bytes& png, int channels, bool* taken) {
  PngFast got;
  *taken = decode_png_fast(png, channels, std::int64_t{1} << 40, got);
  if (!*taken) return {};
  const std::size_t n = static_cast<std::size_t>(got.width) * static_cast<std::size_t>(got.height) *
                        static_cast<std::size_t>(channels);
  return {got.pixels, got.pixels + n};
}

std::uint32_t be32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3];
}

void put32(Bytes& out, std::uint32_t v) {
  for (const int shift : {24, 16, 8, 0}) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

Bytes chunk(const std::string& type, const Bytes& data) {
  Bytes c;
  put32(c, static_cast<std::uint32_t>(data.size()));
  c.insert(c.end(), type.begin(), type.end());
  c.insert(c.end(), data.begin(), data.end());
  put32(c, static_cast<std::uint32_t>(libdeflate_crc32(0, c.data() + 4, data.size() + 4)));
  return c;
}

/// The same PNG with its chunks rewritten: IDAT data split into `pieces` chunks, and `extra`
/// chunks placed before the first IDAT.
Bytes rechunk(const Bytes& png, int pieces, const std::vector<Bytes>& extra = {}) {
  Bytes out(png.begin(), png.begin() + 8);
  Bytes idat;
  std::size_t at = 8;
  Bytes tail;
  while (at + 12 <= png.size()) {
    const std::uint32_t len = be32(png.data() + at);
    const std::string type(png.begin() + static_cast<std::ptrdiff_t>(at + 4),
                           png.begin() + static_cast<std::ptrdiff_t>(at + 8));
    const Bytes whole(png.begin() + static_cast<std::ptrdiff_t>(at),
                      png.begin() + static_cast<std::ptrdiff_t>(at + 12 + len));
    if (type == "IDAT") {
      idat.insert(idat.end(), whole.begin() + 8, whole.end() - 4);
    } else if (type == "IEND") {
      tail = whole;
    } else {
      out.insert(out.end(), whole.begin(), whole.end());
    }
    at += 12 + len;
  }
  for (const Bytes& e : extra) out.insert(out.end(), e.begin(), e.end());
  const std::size_t step =
      (idat.size() + static_cast<std::size_t>(pieces) - 1) / static_cast<std::size_t>(pieces);
  for (std::size_t i = 0; i < idat.size(); i += step) {
    const auto from = idat.begin() + static_cast<std::ptrdiff_t>(i);
    const auto to = idat.begin() + static_cast<std::ptrdiff_t>(std::min(idat.size(), i + step));
    const Bytes c = chunk("IDAT", Bytes(from, to));
    out.insert(out.end(), c.begin(), c.end());
  }
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

/// A PNG made by hand: IHDR, one IDAT of these (already filtered) rows, IEND.
Bytes handmade(int width, int height, int color, const Bytes& filtered_rows) {
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  put32(ihdr, static_cast<std::uint32_t>(width));
  put32(ihdr, static_cast<std::uint32_t>(height));
  ihdr.insert(ihdr.end(), {8, static_cast<std::uint8_t>(color), 0, 0, 0});
  libdeflate_compressor* c = libdeflate_alloc_compressor(6);
  Bytes z(libdeflate_zlib_compress_bound(c, filtered_rows.size()));
  z.resize(
      libdeflate_zlib_compress(c, filtered_rows.data(), filtered_rows.size(), z.data(), z.size()));
  libdeflate_free_compressor(c);
  for (const Bytes& part : {chunk("IHDR", ihdr), chunk("IDAT", z), chunk("IEND", {})}) {
    png.insert(png.end(), part.begin(), part.end());
  }
  return png;
}

/// Four rows of 4 gray pixels, each with filter 1 (sub) but the second with `second_filter`;
/// `extra` bytes more (or, when negative, fewer) at the end.
Bytes gray_rows(std::uint8_t second_filter, int extra) {
  Bytes rows;
  for (int y = 0; y < 4; ++y) {
    rows.push_back(y == 1 ? second_filter : std::uint8_t{1});
    for (const int v : {10, 20, 30, 40}) rows.push_back(static_cast<std::uint8_t>(v));
  }
  if (extra < 0) rows.pop_back();
  if (extra > 0) rows.push_back(0);
  return rows;
}

/// `b` with bit 0 of byte `at` flipped.
Bytes flipped(Bytes b, std::size_t at) {
  b.at(at) = static_cast<std::uint8_t>(b.at(at) ^ 1U);
  return b;
}

/// decode_image() of `png` as `channels` at its own size, with the fast path on or off: the
/// pixels, or the error's message.
std::string decode_either(const Bytes& png, int width, int height, int channels, bool fast) {
  ferry::ImageOptions o;
  o.width = width;
  o.height = height;
  o.channels = channels;
  o.geometry = ferry::Geometry::resize;
  Bytes out(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
            static_cast<std::size_t>(channels));
  const bool was = set_png_fast(fast);
  std::string result;
  try {
    ferry::decode_image(std::as_bytes(std::span(png)), o, 0, out, "x.png");
    result.assign(out.begin(), out.end());
  } catch (const ferry::DataError& e) {
    result = std::string("error: ") + e.what();
  }
  set_png_fast(was);
  return result;
}

TEST(PngFast, EveryFilterColorTypeAndSizeGivesLibspngsPixels) {
  struct Size {
    int w, h;
  };
  unsigned seed = 1;
  for (const Size s : {Size{1, 1}, Size{3, 2}, Size{28, 28}, Size{31, 17}, Size{257, 5}}) {
    for (const int color : {0, 2, 6}) {
      const int channels = color == 0 ? 1 : color == 2 ? 3 : 4;
      const Bytes px = noise(static_cast<std::size_t>(s.w * s.h * channels), seed++);
      for (const int filter :
           std::vector<int>{SPNG_DISABLE_FILTERING, SPNG_FILTER_CHOICE_NONE, SPNG_FILTER_CHOICE_SUB,
                            SPNG_FILTER_CHOICE_UP, SPNG_FILTER_CHOICE_AVG, SPNG_FILTER_CHOICE_PAETH,
                            SPNG_FILTER_CHOICE_ALL}) {
        SCOPED_TRACE(std::to_string(s.w) + "x" + std::to_string(s.h) + " color " +
                     std::to_string(color) + " filter " + std::to_string(filter));
        const Bytes png = encode(px, s.w, s.h, color, filter);
        const Bytes want = spng_pixels(png, channels);
        ASSERT_EQ(want, px);
        bool taken = false;
        EXPECT_EQ(fast_pixels(png, channels, &taken), want);
        EXPECT_TRUE(taken);
        // IDAT data over several chunks, and ancillary chunks (text, gamma) beside them.
        const Bytes split =
            rechunk(png, 3, {chunk("tEXt", {'k', 0, 'v'}), chunk("gAMA", {0, 0, 0xb1, 0x8f})});
        EXPECT_EQ(fast_pixels(split, channels, &taken), want);
        EXPECT_TRUE(taken);
        EXPECT_EQ(decode_either(split, s.w, s.h, channels, true),
                  decode_either(split, s.w, s.h, channels, false));
      }
    }
  }
}

TEST(PngFast, WhatItDoesNotTakeGoesToLibspngWithTheSameResult) {
  const Bytes gray = noise(28 * 28, 5);
  const Bytes rgb = noise(28 * 28 * 3, 6);
  Bytes wide(28 * 28 * 2);
  for (std::size_t i = 0; i < wide.size(); ++i) wide[i] = static_cast<std::uint8_t>(i * 13);
  struct Case {
    std::string what;
    Bytes png;
    int channels;
  };
  const std::vector<Case> cases = {
      {"gray as RGB", encode(gray, 28, 28, 0, SPNG_FILTER_CHOICE_ALL), 3},
      {"RGB as gray", encode(rgb, 28, 28, 2, SPNG_FILTER_CHOICE_ALL), 1},
      {"16 bits", encode(wide, 28, 28, 0, SPNG_FILTER_CHOICE_ALL, 16), 1},
      {"interlaced", encode(gray, 28, 28, 0, SPNG_FILTER_CHOICE_ALL, 8, true), 1},
      {"tRNS", encode(rgb, 28, 28, 2, SPNG_FILTER_CHOICE_ALL, 8, false, true), 3},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    bool taken = true;
    (void)fast_pixels(c.png, c.channels, &taken);
    EXPECT_FALSE(taken);
    const std::string on = decode_either(c.png, 28, 28, c.channels, true);
    EXPECT_EQ(on, decode_either(c.png, 28, 28, c.channels, false));
    EXPECT_EQ(on.rfind("error", 0), std::string::npos) << on;  // libspng decodes them
  }
}

TEST(PngFast, IrregularFilesGetLibspngsError) {
  const Bytes good = handmade(4, 4, 0, gray_rows(1, 0));
  bool taken = false;
  EXPECT_EQ(fast_pixels(good, 1, &taken),
            (Bytes{10, 30, 60, 100, 10, 30, 60, 100, 10, 30, 60, 100, 10, 30, 60, 100}));
  EXPECT_TRUE(taken);
  const Bytes bad_crc = flipped(good, good.size() - 20);  // a byte of IDAT's data
  const Bytes no_iend(good.begin(), good.end() - 12);
  struct Case {
    std::string what;
    Bytes png;
  };
  const Bytes bad_filter = handmade(4, 4, 0, gray_rows(5, 0));  // no such filter type
  const std::vector<Case> cases = {
      {"unknown filter", bad_filter},
      {"too few bytes", handmade(4, 4, 0, gray_rows(1, -1))},
      {"too many bytes", handmade(4, 4, 0, gray_rows(1, 1))},
      {"bad CRC", bad_crc},
      {"no IEND", no_iend},
      {"truncated", Bytes(good.begin(), good.begin() + 40)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    taken = true;
    (void)fast_pixels(c.png, 1, &taken);
    EXPECT_FALSE(taken);
    EXPECT_EQ(decode_either(c.png, 4, 4, 1, true), decode_either(c.png, 4, 4, 1, false));
  }
  // A header of 16000 × 16000 over a few bytes of data: left to libspng before any buffer of
  // its size is taken.
  const Bytes promise = handmade(16000, 16000, 0, gray_rows(1, 0));
  taken = true;
  (void)fast_pixels(promise, 1, &taken);
  EXPECT_FALSE(taken);
  EXPECT_LT(ferry::detail::decode_scratch_bytes(), std::size_t{1} << 20);
  // A plain error, not libspng's success, for the ones libspng refuses too.
  EXPECT_EQ(decode_either(bad_filter, 4, 4, 1, true).rfind("error: x.png", 0), 0U);
  EXPECT_EQ(decode_either(bad_crc, 4, 4, 1, true).rfind("error: x.png", 0), 0U);
}

}  // namespace
