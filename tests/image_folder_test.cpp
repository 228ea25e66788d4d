#include <gtest/gtest.h>
#include <spng.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "datasets/image/image_decode.hpp"
#include "datasets/image/image_internal.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;
using ferry::DataError;
using ferry::Geometry;
using ferry::ImageFolder;
using ferry::ImageOptions;

// ---- encoders and references ---------------------------------------------------------

Bytes encode_jpeg(const Bytes& pixels, int width, int height, int pixel_format,
                  int subsampling = TJSAMP_444, int quality = 95, int flags = 0) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc = tjCompress2(tj, pixels.data(), width, 0, height, pixel_format, &buf, &size,
                             subsampling, quality, flags);
  EXPECT_EQ(rc, 0) << tjGetErrorStr2(tj);
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

// TurboJPEG's own decode of the whole image (or scaled to width × height) as pixel_format.
Bytes turbo_decode(const Bytes& jpeg, int pixel_format, int width = 0, int height = 0) {
  tjhandle tj = tjInitDecompress();
  int w = 0, h = 0, sub = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &w, &h, &sub, &cs), 0);
  if (width == 0) {
    width = w;
    height = h;
  }
  Bytes out(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) *
            static_cast<std::size_t>(tjPixelSize[pixel_format]));
  EXPECT_EQ(
      tjDecompress2(tj, jpeg.data(), jpeg.size(), out.data(), width, 0, height, pixel_format, 0), 0)
      << tjGetErrorStr2(tj);
  tjDestroy(tj);
  return out;
}

struct Png {
  std::uint32_t width = 0, height = 0;
  std::uint8_t color_type = SPNG_COLOR_TYPE_TRUECOLOR, bit_depth = 8;
  Bytes data;  // rows as the PNG stores them (packed below 8 bits; 16 bits host-endian)
  std::vector<spng_plte_entry> palette;
  std::vector<std::uint8_t> palette_alpha;  // tRNS of an indexed image
};

Bytes encode_png(const Png& png) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = png.width;
  ihdr.height = png.height;
  ihdr.bit_depth = png.bit_depth;
  ihdr.color_type = png.color_type;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  if (!png.palette.empty()) {
    spng_plte plte{};
    plte.n_entries = static_cast<std::uint32_t>(png.palette.size());
    std::copy(png.palette.begin(), png.palette.end(), plte.entries);
    EXPECT_EQ(spng_set_plte(ctx, &plte), 0);
  }
  if (!png.palette_alpha.empty()) {
    spng_trns trns{};
    trns.n_type3_entries = static_cast<std::uint32_t>(png.palette_alpha.size());
    std::copy(png.palette_alpha.begin(), png.palette_alpha.end(), trns.type3_alpha);
    EXPECT_EQ(spng_set_trns(ctx, &trns), 0);
  }
  const int rc =
      spng_encode_image(ctx, png.data.data(), png.data.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE);
  EXPECT_EQ(rc, 0) << spng_strerror(rc);
  std::size_t len = 0;
  int err = 0;
  auto* buf = static_cast<std::uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);  // spng hands over a malloc'd buffer
  spng_ctx_free(ctx);
  return out;
}

// An 8-bit image of `channels` as a PNG (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA).
Bytes png8(const Bytes& pixels, int width, int height, int channels) {
  static constexpr std::uint8_t kType[] = {
      0, SPNG_COLOR_TYPE_GRAYSCALE, SPNG_COLOR_TYPE_GRAYSCALE_ALPHA, SPNG_COLOR_TYPE_TRUECOLOR,
      SPNG_COLOR_TYPE_TRUECOLOR_ALPHA};
  Png png;
  png.width = static_cast<std::uint32_t>(width);
  png.height = static_cast<std::uint32_t>(height);
  png.color_type = kType[channels];
  png.data = pixels;
  return encode_png(png);
}

// `png` with the size in its IHDR replaced by `width` × `height` (the CRC fixed; the pixel data
// no longer fits, but the header is read first).
Bytes with_png_size(Bytes png, std::uint32_t width, std::uint32_t height) {
  for (int k = 0; k < 4; ++k) {
    png[16 + static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(width >> (24 - 8 * k));
    png[20 + static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(height >> (24 - 8 * k));
  }
  const auto crc = static_cast<std::uint32_t>(crc32(0, png.data() + 12, 17));
  for (int k = 0; k < 4; ++k)
    png[29 + static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(crc >> (24 - 8 * k));
  return png;
}

// A PNG chunk: length, type, data, CRC.
Bytes png_chunk(const char (&type)[5], const Bytes& data) {
  const auto length = static_cast<std::uint32_t>(data.size());
  Bytes out(8 + data.size());
  for (std::size_t k = 0; k < 4; ++k) {
    out[k] = static_cast<std::uint8_t>(length >> (24 - 8 * k));
    out[4 + k] = static_cast<std::uint8_t>(type[k]);
  }
  for (std::size_t k = 0; k < data.size(); ++k) out[8 + k] = data[k];
  const auto crc = static_cast<std::uint32_t>(crc32(0, out.data() + 4, 4 + length));
  for (int k = 0; k < 4; ++k) out.push_back(static_cast<std::uint8_t>(crc >> (24 - 8 * k)));
  return out;
}

// The offset of the first header segment `code` (0xFF code) of a JPEG, found by walking the
// segments before the first scan; npos when there is none.
std::size_t jpeg_segment(const Bytes& jpeg, std::uint8_t code) {
  std::size_t at = 2;
  while (at + 4 <= jpeg.size() && jpeg[at] == 0xff) {
    if (jpeg[at + 1] == code) return at;
    if (jpeg[at + 1] == 0xda) break;
    at += 2 + (std::size_t{jpeg[at + 2]} << 8 | jpeg[at + 3]);
  }
  return std::string::npos;
}

// The byte pair FF DA, counted naively: in libjpeg's output it appears only as a scan's marker
// (entropy-coded data stuffs every 0xFF), so this is the scan count to check against.
std::size_t naive_sos_count(const Bytes& jpeg) {
  std::size_t n = 0;
  for (std::size_t i = 0; i + 1 < jpeg.size(); ++i) n += jpeg[i] == 0xff && jpeg[i + 1] == 0xda;
  return n;
}

// 16-bit samples, host-endian, whose high bytes are `high` and low bytes high ^ `low_xor`.
Bytes words16(const Bytes& high, std::uint8_t low_xor) {
  std::vector<std::uint16_t> words;
  for (const std::uint8_t v : high) {
    words.push_back(static_cast<std::uint16_t>(v << 8 | (v ^ low_xor)));
  }
  const auto* p = reinterpret_cast<const std::uint8_t*>(words.data());
  return {p, p + words.size() * 2};
}

// x + y structure with some edges: byte (x, y, c) of a width × height × channels image.
Bytes pattern(int width, int height, int channels, int salt = 0) {
  Bytes out;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool box = (x / 7 + y / 5 + salt) % 3 == 0;
      for (int c = 0; c < channels; ++c) {
        const int v = (x * (3 + c) + y * (5 - c) + salt * 40 + (box ? 90 : 0)) % 256;
        out.push_back(static_cast<std::uint8_t>(v));
      }
    }
  }
  return out;
}

// PIL's luma, by the book.
std::uint8_t luma(int r, int g, int b) {
  return static_cast<std::uint8_t>((299 * r + 587 * g + 114 * b + 500) / 1000);
}

// HWC bytes of `from` channels to `to` channels (1, 3, 4; 2 is gray + alpha), as ImageFolder
// converts.
Bytes convert(const Bytes& px, int from, int to) {
  Bytes out;
  for (std::size_t i = 0; i < px.size(); i += static_cast<std::size_t>(from)) {
    int r = px[i], g = px[i], b = px[i], a = 255;
    if (from >= 3) {
      g = px[i + 1];
      b = px[i + 2];
    }
    if (from == 2) a = px[i + 1];
    if (from == 4) a = px[i + 3];
    if (to == 1) {
      out.push_back(luma(r, g, b));
    } else {
      out.insert(out.end(), {static_cast<std::uint8_t>(r), static_cast<std::uint8_t>(g),
                             static_cast<std::uint8_t>(b)});
      if (to == 4) out.push_back(static_cast<std::uint8_t>(a));
    }
  }
  return out;
}

Bytes mirror(const Bytes& px, int width, int channels) {
  Bytes out = px;
  const auto row = static_cast<std::size_t>(width * channels);
  for (std::size_t y = 0; y < px.size() / row; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        out[y * row + static_cast<std::size_t>(x * channels + c)] =
            px[y * row + static_cast<std::size_t>((width - 1 - x) * channels + c)];
      }
    }
  }
  return out;
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::abs(a[i] - b[i]);
  return sum / static_cast<double>(std::max<std::size_t>(a.size(), 1));
}

ImageOptions identity(int width, int height, int channels) {
  ImageOptions o;
  o.width = width;
  o.height = height;
  o.channels = channels;
  o.geometry = Geometry::resize;
  return o;
}

// ---- the fixture: a temporary folder -------------------------------------------------

class ImageFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_img_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const Bytes& bytes) {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // Sample i's image as read() writes it, called as the loader calls it.
  static Bytes read_image(const ImageFolder& ds, std::size_t i, std::uint64_t seed = 0,
                          std::int64_t* label = nullptr) {
    const std::vector<ferry::FieldSpec> fields = ds.fields();
    const ferry::detail::SlotLayout layout(fields, 1);
    std::vector<std::byte> slot(layout.bytes);
    ds.read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, seed));
    const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data() + layout.offsets[0]);
    if (label != nullptr) std::memcpy(label, slot.data() + layout.offsets[1], sizeof *label);
    return {p, p + layout.sample_bytes[0]};
  }

  static std::string read_error(const ImageFolder& ds, std::size_t i) {
    try {
      (void)read_image(ds, i);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  }

  // The one image `bytes` decodes to under `o`, through a folder holding only it (named .png
  // whatever it is: the magic bytes decide the format).
  Bytes decode_one(const Bytes& bytes, const ImageOptions& o, std::uint64_t seed = 0) {
    fs::remove_all(dir_ / "one");
    write("one/c/x.png", bytes);
    return read_image(*ImageFolder::open(dir_ / "one", o), 0, seed);
  }

  fs::path dir_;
};

// ---- listing -------------------------------------------------------------------------

TEST_F(ImageFolderTest, ListsClassesAndFilesSortedWithAnyCaseOfExtension) {
  const Bytes png = png8(pattern(4, 4, 3), 4, 4, 3);
  for (const char* name : {"b_dog/2.JPG", "b_dog/1.png", "b_dog/10.Jpeg", "b_dog/notes.txt",
                           "b_dog/.hidden.jpg", "b_dog/no_extension", "a_cat/z.png", "a_cat/a.jpg",
                           ".git/x.jpg", "root_file.jpg", "c_empty/readme.md"}) {
    write(name, png);
  }
  const auto ds = ImageFolder::open(dir_);
  EXPECT_EQ(ds->classes(), (std::vector<std::string>{"a_cat", "b_dog", "c_empty"}));
  EXPECT_EQ(ds->class_counts(), (std::vector<std::size_t>{2, 3, 0}));
  ASSERT_EQ(ds->size(), 5U);
  const std::vector<std::string> expected = {"a_cat/a.jpg", "a_cat/z.png", "b_dog/1.png",
                                             "b_dog/10.Jpeg", "b_dog/2.JPG"};
  const std::vector<std::int64_t> labels = {0, 0, 1, 1, 1};
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ds->path(i), dir_ / expected[i]);
    EXPECT_EQ(ds->label(i), labels[i]);
    std::int64_t label = -1;
    (void)read_image(*ds, i, 0, &label);
    EXPECT_EQ(label, labels[i]);
  }
  // The same order every time.
  const auto again = ImageFolder::open(dir_);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(again->path(i), ds->path(i));

  EXPECT_EQ(ds->fields(), (std::vector<ferry::FieldSpec>{{"image", ferry::DType::u8, {224, 224, 3}},
                                                         {"label", ferry::DType::i64, {}}}));
  ImageOptions o;
  o.height = 32;
  o.width = 48;
  o.channels = 1;
  o.normalize = ferry::Normalize{{0.5f}, {0.25f}, 1.0f / 255, ferry::DType::bf16};
  const std::vector<ferry::FieldSpec> f = ImageFolder::open(dir_, o)->fields();
  ASSERT_EQ(f.size(), 2U);
  EXPECT_EQ(f[0].name, "image");
  EXPECT_EQ(f[0].dtype, ferry::DType::u8);  // written as u8 HWC; the loader normalizes
  EXPECT_EQ(f[0].shape, (std::vector<std::int64_t>{32, 48, 1}));
  EXPECT_EQ(f[0].normalize, o.normalize);
  EXPECT_EQ(ImageFolder::open(dir_, o)->options().normalize, o.normalize);
}

TEST_F(ImageFolderTest, OpenRejectsMissingOrEmptyFoldersAndBadOptions) {
  auto open_error = [](const fs::path& root, const ImageOptions& o = {}) -> std::string {
    try {
      (void)ImageFolder::open(root, o);
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string missing = open_error(dir_ / "nope");
  EXPECT_NE(missing.find((dir_ / "nope").string() + ": no such folder"), std::string::npos)
      << missing;
  const fs::path file = write("file.jpg", png8({1, 2, 3}, 1, 1, 3));
  EXPECT_NE(open_error(file).find(file.string() + ": not a folder"), std::string::npos)
      << open_error(file);
  write("empty/c/readme.txt", {1, 2, 3});
  fs::create_directories(dir_ / "empty" / "d");
  EXPECT_NE(open_error(dir_ / "empty").find((dir_ / "empty").string() + ": no images"),
            std::string::npos)
      << open_error(dir_ / "empty");

  write("ok/c/x.png", png8({1, 2, 3}, 1, 1, 3));
  auto bad = [&](auto change) {
    ImageOptions o;
    change(o);
    EXPECT_THROW((void)ImageFolder::open(dir_ / "ok", o), ferry::ConfigError);
  };
  bad([](ImageOptions& o) { o.height = 0; });
  bad([](ImageOptions& o) { o.width = -3; });
  bad([](ImageOptions& o) { o.channels = 2; });
  bad([](ImageOptions& o) { o.channels = 0; });
  bad([](ImageOptions& o) { o.resize = -1; });
  bad([](ImageOptions& o) { o.normalize = ferry::Normalize{{0.1f, 0.2f}, {1.0f}}; });
  bad([](ImageOptions& o) { o.normalize = ferry::Normalize{{0.1f}, {1, 1, 1, 1}}; });
  bad([](ImageOptions& o) { o.normalize = ferry::Normalize{{0.1f}, {1, 0, 1}}; });
  bad([](ImageOptions& o) {
    o.normalize = ferry::Normalize{};
    o.normalize->dtype = ferry::DType::u8;
  });
  bad([](ImageOptions& o) {
    o.normalize = ferry::Normalize{};
    o.normalize->dtype = ferry::DType::f64;
  });
  ImageOptions fine;
  fine.channels = 4;
  fine.normalize = ferry::Normalize{{0.1f, 0.2f, 0.3f, 0.4f}, {2.0f}};
  EXPECT_NO_THROW((void)ImageFolder::open(dir_ / "ok", fine));
}

// ---- PNG: exact pixels ---------------------------------------------------------------

TEST_F(ImageFolderTest, PngPixelsAreExactForEveryColorTypeAndChannelCount) {
  constexpr int kW = 5, kH = 3;
  EXPECT_EQ(luma(255, 0, 0), 76);  // PIL's convert("L") of pure red, green, blue
  EXPECT_EQ(luma(0, 255, 0), 150);
  EXPECT_EQ(luma(0, 0, 255), 29);
  // Each source: its PNG and the truth as 8-bit gray (1), gray + alpha (2), RGB (3) or RGBA (4).
  struct Source {
    const char* what;
    Bytes png;
    Bytes truth;
    int truth_channels;
  };
  std::vector<Source> sources;
  for (const int c : {1, 2, 3, 4}) {
    Bytes px = pattern(kW, kH, c);
    px[0] = 255;  // a saturated value or two
    if (c >= 3) {
      px[1] = 0;
      px[2] = 0;
    }
    sources.push_back({"8-bit", png8(px, kW, kH, c), px, c});
  }
  {  // 16 bits: the high byte counts
    Png p16;
    p16.width = kW;
    p16.height = kH;
    p16.bit_depth = 16;
    Bytes truth = pattern(kW, kH, 3, 1);
    p16.data = words16(truth, 0x5a);
    sources.push_back({"16-bit RGB", encode_png(p16), truth, 3});
    p16.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
    truth = pattern(kW, kH, 1, 2);
    p16.data = words16(truth, 0xff);
    sources.push_back({"16-bit gray", encode_png(p16), truth, 1});
  }
  {  // a palette with transparency
    Png pal;
    pal.width = kW;
    pal.height = kH;
    pal.color_type = SPNG_COLOR_TYPE_INDEXED;
    pal.palette = {{255, 0, 0, 255}, {10, 200, 30, 255}, {7, 8, 9, 255}, {250, 251, 252, 255}};
    pal.palette_alpha = {255, 128, 0};  // entry 3: opaque (no tRNS entry)
    Bytes truth;
    for (int i = 0; i < kW * kH; ++i) {
      const auto k = static_cast<std::uint8_t>((i * 7 + i / 5) % 4);
      pal.data.push_back(k);
      const spng_plte_entry& e = pal.palette[k];
      truth.insert(truth.end(),
                   {e.red, e.green, e.blue, k < 3 ? pal.palette_alpha[k] : std::uint8_t{255}});
    }
    sources.push_back({"palette", encode_png(pal), truth, 4});
  }
  {  // gray of 4 bits: v × 17
    Png g4;
    g4.width = kW;
    g4.height = kH;
    g4.color_type = SPNG_COLOR_TYPE_GRAYSCALE;
    g4.bit_depth = 4;
    Bytes truth;
    for (int y = 0; y < kH; ++y) {
      for (int x = 0; x < kW; x += 2) {
        const int a = (x + y * 3) % 16;
        const int b = (x + 1 + y * 3) % 16;
        g4.data.push_back(static_cast<std::uint8_t>(a << 4 | (x + 1 < kW ? b : 0)));
        truth.push_back(static_cast<std::uint8_t>(a * 17));
        if (x + 1 < kW) truth.push_back(static_cast<std::uint8_t>(b * 17));
      }
    }
    sources.push_back({"4-bit gray", encode_png(g4), truth, 1});
  }
  for (const Source& s : sources) {
    for (const int channels : {1, 3, 4}) {
      SCOPED_TRACE(std::string(s.what) + " source, " + std::to_string(s.truth_channels) +
                   " channels, to " + std::to_string(channels));
      const Bytes expected = convert(s.truth, s.truth_channels, channels);
      EXPECT_EQ(decode_one(s.png, identity(kW, kH, channels)), expected);
      // resize_then_center_crop with the shorter side as resize is the same identity.
      ImageOptions crop = identity(kW, kH, channels);
      crop.geometry = Geometry::resize_then_center_crop;
      crop.resize = kH;
      EXPECT_EQ(decode_one(s.png, crop), expected);
    }
  }
}

// ---- JPEG: TurboJPEG's own decode ----------------------------------------------------

TEST_F(ImageFolderTest, JpegEqualsTurboJpegsFullDecodeInEveryChannelCount) {
  constexpr int kW = 40, kH = 30;
  const Bytes rgb = pattern(kW, kH, 3);
  for (const int subsampling : {TJSAMP_444, TJSAMP_420}) {
    const Bytes jpeg = encode_jpeg(rgb, kW, kH, TJPF_RGB, subsampling);
    EXPECT_EQ(decode_one(jpeg, identity(kW, kH, 3)), turbo_decode(jpeg, TJPF_RGB));
    EXPECT_EQ(decode_one(jpeg, identity(kW, kH, 1)), turbo_decode(jpeg, TJPF_GRAY));
    EXPECT_EQ(decode_one(jpeg, identity(kW, kH, 4)), turbo_decode(jpeg, TJPF_RGBA));
  }
  const Bytes gray = encode_jpeg(pattern(kW, kH, 1), kW, kH, TJPF_GRAY, TJSAMP_GRAY);
  const Bytes gray_px = turbo_decode(gray, TJPF_GRAY);
  EXPECT_EQ(decode_one(gray, identity(kW, kH, 1)), gray_px);
  EXPECT_EQ(decode_one(gray, identity(kW, kH, 3)), convert(gray_px, 1, 3));
  EXPECT_EQ(decode_one(gray, identity(kW, kH, 4)), convert(gray_px, 1, 4));

  // CMYK (stored as YCCK): libjpeg gives inverted CMYK, turned into RGB as PIL does.
  Bytes cmyk = pattern(kW, kH, 4);
  cmyk[0] = cmyk[1] = cmyk[2] = cmyk[3] = 255;  // no ink: white
  const Bytes cmyk_jpeg = encode_jpeg(cmyk, kW, kH, TJPF_CMYK);
  const Bytes ink = turbo_decode(cmyk_jpeg, TJPF_CMYK);
  Bytes expected_rgb;
  for (std::size_t i = 0; i < ink.size(); i += 4) {
    for (int c = 0; c < 3; ++c) {
      expected_rgb.push_back(static_cast<std::uint8_t>(
          (ink[i + static_cast<std::size_t>(c)] * ink[i + 3] + 127) / 255));
    }
  }
  const Bytes got = decode_one(cmyk_jpeg, identity(kW, kH, 3));
  EXPECT_EQ(got, expected_rgb);
  EXPECT_GE(got[0], 250);
  EXPECT_EQ(decode_one(cmyk_jpeg, identity(kW, kH, 1)), convert(expected_rgb, 3, 1));
}

TEST_F(ImageFolderTest, RealPhotosDecodeAsTurboJpegDoes) {
  const fs::path dir = "/usr/lib/python3/dist-packages/sklearn/datasets/images";
  if (!fs::exists(dir / "china.jpg") || !fs::exists(dir / "flower.jpg")) {
    GTEST_SKIP() << "scikit-learn's sample photos are not installed (" << dir.string() << ")";
  }
  fs::create_directories(dir_ / "photos" / "sklearn");
  for (const char* name : {"china.jpg", "flower.jpg"}) {
    fs::copy_file(dir / name, dir_ / "photos" / "sklearn" / name);
  }
  const auto ds = ImageFolder::open(dir_ / "photos", identity(640, 427, 3));
  ASSERT_EQ(ds->size(), 2U);
  for (std::size_t i = 0; i < 2; ++i) {
    std::ifstream in(ds->path(i), std::ios::binary);
    const Bytes jpeg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(read_image(*ds, i), turbo_decode(jpeg, TJPF_RGB)) << ds->path(i);
    // The ImageNet recipe runs on them too, scaled in the DCT domain to 1/2 for 112 × 112.
    ImageOptions small;
    small.height = small.width = 112;
    const Bytes a = read_image(*ImageFolder::open(dir_ / "photos", small), i);
    small.resize = 128;
    EXPECT_EQ(read_image(*ImageFolder::open(dir_ / "photos", small), i), a);
  }
}

// ---- geometry ------------------------------------------------------------------------

// R = x, G = y, B = 7: every output pixel tells where it came from.
Bytes coordinates(int width, int height) {
  Bytes px;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      px.insert(px.end(), {static_cast<std::uint8_t>(x), static_cast<std::uint8_t>(y), 7});
    }
  }
  return px;
}

TEST_F(ImageFolderTest, CenterCropTakesTorchvisionsOffsets) {
  constexpr int kW = 40, kH = 30;
  const Bytes png = png8(coordinates(kW, kH), kW, kH, 3);
  // {crop height, crop width, top, left}: int(round((30 - h) / 2.0)), ties to even.
  struct Case {
    int h, w, top, left;
  };
  for (const Case c : {Case{20, 25, 5, 8}, Case{23, 27, 4, 6}, Case{21, 24, 4, 8},
                       Case{30, 40, 0, 0}, Case{1, 1, 14, 20}}) {
    SCOPED_TRACE(std::to_string(c.h) + " x " + std::to_string(c.w));
    ImageOptions o = identity(c.w, c.h, 3);
    o.geometry = Geometry::resize_then_center_crop;
    o.resize = kH;  // the shorter side already: no resize, only the crop
    const Bytes got = decode_one(png, o);
    for (int y = 0; y < c.h; ++y) {
      for (int x = 0; x < c.w; ++x) {
        const std::size_t at = static_cast<std::size_t>((y * c.w + x) * 3);
        ASSERT_EQ(got[at], x + c.left) << x << ", " << y;
        ASSERT_EQ(got[at + 1], y + c.top) << x << ", " << y;
        ASSERT_EQ(got[at + 2], 7);
      }
    }
  }
  // A crop larger than the image pads with zeros, (14 - 10) // 2 = 2 left, 1 on top.
  const Bytes small = png8(coordinates(10, 10), 10, 10, 3);
  ImageOptions pad = identity(14, 12, 3);
  pad.geometry = Geometry::resize_then_center_crop;
  pad.resize = 10;
  const Bytes got = decode_one(small, pad);
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 14; ++x) {
      const std::size_t at = static_cast<std::size_t>((y * 14 + x) * 3);
      const bool inside = x >= 2 && x < 12 && y >= 1 && y < 11;
      EXPECT_EQ(got[at], inside ? x - 2 : 0);
      EXPECT_EQ(got[at + 1], inside ? y - 1 : 0);
      EXPECT_EQ(got[at + 2], inside ? 7 : 0);
    }
  }
}

// PIL's antialiased bilinear resize of the whole image, in doubles (rounded once, at the end):
// the reference that ImageFolder's fixed-point resampler of only the region it keeps rounds.
Bytes resize_whole(const Bytes& px, int w, int h, int to_w, int to_h, int channels) {
  using Taps = std::vector<std::vector<std::pair<int, double>>>;
  const auto axis = [](int size, int out) {
    Taps taps(static_cast<std::size_t>(out));
    const double scale = static_cast<double>(size) / out;
    const double support = std::max(scale, 1.0);
    for (int i = 0; i < out; ++i) {
      const double center = (i + 0.5) * scale;
      const int lo = std::max(0, static_cast<int>(std::floor(center - support + 0.5)));
      const int hi = std::min(size, static_cast<int>(std::floor(center + support + 0.5)));
      double sum = 0;
      auto& t = taps[static_cast<std::size_t>(i)];
      for (int j = lo; j < hi; ++j) {
        const double v = std::max(0.0, 1 - std::abs(j + 0.5 - center) / support);
        t.emplace_back(j, v);
        sum += v;
      }
      for (auto& [j, v] : t) v /= sum;
    }
    return taps;
  };
  const Taps tx = axis(w, to_w);
  const Taps ty = axis(h, to_h);
  const auto c = static_cast<std::size_t>(channels);
  std::vector<double> mid(static_cast<std::size_t>(h * to_w) * c, 0.0);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < to_w; ++x) {
      for (const auto& [j, v] : tx[static_cast<std::size_t>(x)]) {
        for (std::size_t k = 0; k < c; ++k) {
          mid[(static_cast<std::size_t>(y * to_w + x)) * c + k] +=
              v * px[static_cast<std::size_t>(y * w + j) * c + k];
        }
      }
    }
  }
  Bytes out(static_cast<std::size_t>(to_w * to_h) * c);
  for (int y = 0; y < to_h; ++y) {
    for (int x = 0; x < to_w; ++x) {
      for (std::size_t k = 0; k < c; ++k) {
        double sum = 0;
        for (const auto& [j, v] : ty[static_cast<std::size_t>(y)]) {
          sum += v * mid[static_cast<std::size_t>(j * to_w + x) * c + k];
        }
        out[static_cast<std::size_t>(y * to_w + x) * c + k] =
            static_cast<std::uint8_t>(std::clamp(std::lround(sum), 0L, 255L));
      }
    }
  }
  return out;
}

Bytes crop(const Bytes& px, int w, int channels, int left, int top, int to_w, int to_h) {
  Bytes out;
  for (int y = top; y < top + to_h; ++y) {
    const auto* row = px.data() + static_cast<std::size_t>((y * w + left) * channels);
    out.insert(out.end(), row, row + to_w * channels);
  }
  return out;
}

TEST_F(ImageFolderTest, ResizingOnlyTheCroppedRegionMatchesResizingAllThenCropping) {
  constexpr int kW = 120, kH = 90;
  const Bytes px = pattern(kW, kH, 3);
  const Bytes png = png8(px, kW, kH, 3);
  // Resize(32) + CenterCrop(28): 120 × 90 -> int(32 * 120 / 90) = 42 × 32, crop at (7, 2).
  ImageOptions o;
  o.height = o.width = 28;
  const Bytes got = decode_one(png, o);
  const Bytes ref = crop(resize_whole(px, kW, kH, 42, 32, 3), 42, 3, 7, 2, 28, 28);
  // Within rounding: the fixed-point resampler rounds to u8 between its two passes (as PIL
  // does), the reference only at the end.
  EXPECT_LT(mean_abs_diff(got, ref), 0.3);
  // Upscaling: Resize(200) -> 266 × 200, CenterCrop(150 × 100) at (83, 25).
  o.resize = 200;
  o.height = 150;
  o.width = 100;
  const Bytes up = decode_one(png, o);
  const Bytes up_ref = crop(resize_whole(px, kW, kH, 266, 200, 3), 266, 3, 83, 25, 100, 150);
  EXPECT_LT(mean_abs_diff(up, up_ref), 0.3);
  // Geometry::resize: straight to 50 × 20, aspect not kept.
  const Bytes straight = decode_one(png, identity(50, 20, 3));
  EXPECT_LT(mean_abs_diff(straight, resize_whole(px, kW, kH, 50, 20, 3)), 0.3);
}

TEST_F(ImageFolderTest, RandomResizedCropFollowsTorchvisionsRules) {
  ImageOptions o = identity(16, 16, 3);
  o.geometry = Geometry::random_resized_crop;
  o.random_flip = true;
  std::set<std::pair<double, double>> corners;
  int flips = 0;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    const ferry::detail::ImagePlan p = ferry::detail::plan_image(500, 375, o, seed);
    const double w = p.x1 - p.x0;
    const double h = p.y1 - p.y0;
    ASSERT_GE(p.x0, 0);
    ASSERT_GE(p.y0, 0);
    ASSERT_LE(p.x1, 500);
    ASSERT_LE(p.y1, 375);
    EXPECT_EQ(w, std::round(w));
    EXPECT_EQ(p.x0, std::round(p.x0));
    const double area = w * h / (500.0 * 375.0);
    EXPECT_GE(area, 0.075);
    EXPECT_LE(area, 1.0);
    EXPECT_GE(w / h, 0.74);
    EXPECT_LE(w / h, 1.35);
    EXPECT_EQ((p.out_x0 | p.out_y0), 0);
    EXPECT_EQ(p.out_x1, 16);
    EXPECT_EQ(p.out_y1, 16);
    corners.insert({p.x0, p.y0});
    flips += p.flip ? 1 : 0;
    // The same seed, the same plan.
    const ferry::detail::ImagePlan again = ferry::detail::plan_image(500, 375, o, seed);
    EXPECT_EQ(again.x0, p.x0);
    EXPECT_EQ(again.y1, p.y1);
    EXPECT_EQ(again.flip, p.flip);
  }
  EXPECT_GT(corners.size(), 1500U);
  EXPECT_GT(flips, 850);
  EXPECT_LT(flips, 1150);
  // No try fits a 1000 × 10 image: the central crop with aspect 4/3, round(10 * 4 / 3) = 13.
  const ferry::detail::ImagePlan wide = ferry::detail::plan_image(1000, 10, o, 5);
  EXPECT_EQ(wide.x0, 493);
  EXPECT_EQ(wide.x1, 506);
  EXPECT_EQ(wide.y0, 0);
  EXPECT_EQ(wide.y1, 10);
  const ferry::detail::ImagePlan tall = ferry::detail::plan_image(10, 1000, o, 5);
  EXPECT_EQ(tall.y0, 493);  // round(10 / (3 / 4)) = 13
  EXPECT_EQ(tall.y1, 506);
}

TEST_F(ImageFolderTest, FlipMirrorsHalfTheSamplesBySeed) {
  constexpr int kW = 9, kH = 4;
  const Bytes px = pattern(kW, kH, 3);
  ImageOptions o = identity(kW, kH, 3);
  o.random_flip = true;
  write("f/c/x.png", png8(px, kW, kH, 3));
  const auto ds = ImageFolder::open(dir_ / "f", o);
  int mirrored = 0;
  for (std::uint64_t seed = 0; seed < 64; ++seed) {
    const Bytes got = read_image(*ds, 0, seed);
    if (got == mirror(px, kW, 3)) {
      ++mirrored;
    } else {
      EXPECT_EQ(got, px) << seed;
    }
    EXPECT_EQ(read_image(*ds, 0, seed), got);
  }
  EXPECT_GT(mirrored, 16);
  EXPECT_LT(mirrored, 48);
}

TEST_F(ImageFolderTest, AugmentationRepeatsUnderTheLoaderForTheSameSeed) {
  for (int i = 0; i < 6; ++i) {
    std::string name = i % 2 == 0 ? "c0/" : "c1/";
    name += std::to_string(i);
    name += ".png";
    write(name, png8(pattern(48, 40, 3, i), 48, 40, 3));
  }
  ImageOptions o = identity(16, 16, 3);
  o.geometry = Geometry::random_resized_crop;
  o.random_flip = true;
  const auto ds = ImageFolder::open(dir_, o);
  auto run = [&](std::uint64_t seed, std::uint64_t epoch, int workers) {
    ferry::LoaderOptions lo;
    lo.batch_size = 4;
    lo.seed = seed;
    lo.device = ferry::Device::cpu();
    lo.workers = workers;
    ferry::Loader loader(ds, lo);
    Bytes all;
    std::vector<std::int64_t> labels;
    for (const ferry::Batch& b : loader.epoch(epoch)) {
      const ferry::Tensor& t = b["image"];
      EXPECT_EQ(t.shape(),
                (std::vector<std::int64_t>{static_cast<std::int64_t>(b.size()), 16, 16, 3}));
      all.insert(all.end(), t.data<std::uint8_t>(), t.data<std::uint8_t>() + t.numel());
      for (std::size_t k = 0; k < b.size(); ++k)
        labels.push_back(b["label"].data<std::int64_t>()[k]);
    }
    EXPECT_EQ(labels, (std::vector<std::int64_t>{0, 0, 0, 1, 1, 1}));
    return all;
  };
  const Bytes first = run(7, 0, 2);
  EXPECT_EQ(first.size(), 6U * 16 * 16 * 3);
  EXPECT_EQ(run(7, 0, 1), first);  // whatever the worker count
  EXPECT_NE(run(8, 0, 2), first);
  EXPECT_NE(run(7, 1, 2), first);
}

TEST_F(ImageFolderTest, RandomCropsScaleDifferentlyOnlyWhereTheScaledImageCoversTheOutput1_5To2x) {
  // The decode depends on the cover only through the scale it picks: random_resized_crop's
  // outputs differ from what the twice-over rule decodes only where the two rules pick
  // different scales, and there the scaled image covers the output 1.5 to 2 times over.
  using ferry::detail::pick_jpeg_scale;
  int differ = 0;
  for (int i = 1; i <= 4000; ++i) {
    const double need_x = i / 4000.0;  // 1/4000 .. 1 output pixels per source pixel
    for (const double aspect : {0.75, 1.0, 1.33}) {
      const double need_y = need_x * aspect;
      const auto eval = pick_jpeg_scale(need_x, need_y, ferry::detail::kEvalCover);
      const auto crop = pick_jpeg_scale(need_x, need_y, ferry::detail::kRandomCropCover);
      EXPECT_EQ(crop.num, 1);
      EXPECT_GE(crop.denom, eval.denom) << need_x;  // never a larger image than before
      if (crop.denom == eval.denom) continue;
      ++differ;
      const double covers = 1.0 / crop.denom / std::max(need_x, need_y);
      EXPECT_GE(covers, 1.5 - 1e-9) << need_x << " " << need_y;
      EXPECT_LT(covers, 2.0) << need_x << " " << need_y;
    }
  }
  EXPECT_GT(differ, 100);  // the band is reached
}

TEST_F(ImageFolderTest, JpegIsScaledInTheDctDomainWhenTheOutputNeedsAQuarterOrLess) {
  using ferry::detail::pick_jpeg_scale;
  auto is = [](ferry::detail::JpegScale s, int num, int denom) {
    return s.num * denom == num * s.denom;
  };
  // The scaled image must cover the output twice over.
  EXPECT_TRUE(is(pick_jpeg_scale(0.25, 0.25), 1, 2));
  EXPECT_TRUE(is(pick_jpeg_scale(0.3, 0.2), 1, 1));
  EXPECT_TRUE(is(pick_jpeg_scale(0.5, 0.5), 1, 1));
  EXPECT_TRUE(is(pick_jpeg_scale(0.1, 0.125), 1, 4));
  EXPECT_TRUE(is(pick_jpeg_scale(0.13, 0.1), 1, 2));  // 1/2, 1/4 and 1/8 only
  EXPECT_TRUE(is(pick_jpeg_scale(0.0625, 0.05), 1, 8));
  EXPECT_TRUE(is(pick_jpeg_scale(0.26, 0.1), 1, 1));
  EXPECT_TRUE(is(pick_jpeg_scale(2.0, 2.0), 1, 1));
  // random_resized_crop's: 1.5 times over.
  using ferry::detail::kRandomCropCover;
  EXPECT_TRUE(is(pick_jpeg_scale(0.3, 0.3, kRandomCropCover), 1, 2));  // 1.67 times over
  EXPECT_TRUE(is(pick_jpeg_scale(0.34, 0.3, kRandomCropCover), 1, 1));
  EXPECT_TRUE(is(pick_jpeg_scale(0.16, 0.1, kRandomCropCover), 1, 4));
  EXPECT_TRUE(is(pick_jpeg_scale(0.08, 0.05, kRandomCropCover), 1, 8));

  // 512 × 512 to 64 × 64: decoded at 1/4, TurboJPEG's own scaled decode then resized 128 -> 64
  // (within the fixed point's rounding), and close to the full decode resized.
  constexpr int kSide = 512;
  Bytes px;
  for (int y = 0; y < kSide; ++y) {
    for (int x = 0; x < kSide; ++x) {
      const bool disc = (x - 300) * (x - 300) + (y - 200) * (y - 200) < 90 * 90;
      px.insert(px.end(), {static_cast<std::uint8_t>(x / 2), static_cast<std::uint8_t>(y / 2),
                           static_cast<std::uint8_t>(disc ? 230 : 40)});
    }
  }
  const Bytes jpeg = encode_jpeg(px, kSide, kSide, TJPF_RGB);
  const Bytes got = decode_one(jpeg, identity(64, 64, 3));
  const Bytes quarter = resize_whole(turbo_decode(jpeg, TJPF_RGB, 128, 128), 128, 128, 64, 64, 3);
  EXPECT_LT(mean_abs_diff(got, quarter), 0.5);
  const Bytes full = resize_whole(turbo_decode(jpeg, TJPF_RGB), kSide, kSide, 64, 64, 3);
  EXPECT_LT(mean_abs_diff(got, full), 1.0);
  // 1/2 for 128 × 128 (128 / 512 = 0.25), then resized 256 -> 128.
  const Bytes mid = decode_one(jpeg, identity(128, 128, 3));
  const Bytes mid_full = resize_whole(turbo_decode(jpeg, TJPF_RGB), kSide, kSide, 128, 128, 3);
  EXPECT_LT(mean_abs_diff(mid, mid_full), 1.0);
  // 160 × 160 (0.3125): not scaled, the full decode resized exactly as a PNG of it would be.
  const Bytes whole = decode_one(jpeg, identity(160, 160, 3));
  const Bytes whole_ref = resize_whole(turbo_decode(jpeg, TJPF_RGB), kSide, kSide, 160, 160, 3);
  EXPECT_LT(mean_abs_diff(whole, whole_ref), 0.5);
}

TEST_F(ImageFolderTest, NormalizedImagesArriveAsFloatChannelsFirst) {
  constexpr int kW = 6, kH = 4;
  const Bytes px = pattern(kW, kH, 3);
  write("c/x.png", png8(px, kW, kH, 3));
  ImageOptions o = identity(kW, kH, 3);
  o.normalize = ferry::Normalize{{0.5f, 0.25f, 0.0f}, {0.5f, 0.25f, 2.0f}};
  ferry::LoaderOptions lo;
  lo.batch_size = 1;
  lo.device = ferry::Device::cpu();
  lo.workers = 1;
  ferry::Loader loader(ImageFolder::open(dir_, o), lo);
  std::size_t batches = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const ferry::Tensor& t = b["image"];
    ASSERT_EQ(t.dtype(), ferry::DType::f32);
    ASSERT_EQ(t.shape(), (std::vector<std::int64_t>{1, 3, kH, kW}));
    for (int c = 0; c < 3; ++c) {
      const float mean = o.normalize->mean[static_cast<std::size_t>(c)];
      const float std = o.normalize->std[static_cast<std::size_t>(c)];
      for (int y = 0; y < kH; ++y) {
        for (int x = 0; x < kW; ++x) {
          const float v = px[static_cast<std::size_t>((y * kW + x) * 3 + c)];
          EXPECT_NEAR(t.data<float>()[(c * kH + y) * kW + x], (v / 255.0f - mean) / std, 1e-5);
        }
      }
    }
    ++batches;
  }
  EXPECT_EQ(batches, 1U);
}

// ---- bad files -----------------------------------------------------------------------

TEST_F(ImageFolderTest, BadFilesRaiseDataErrorNamingTheFile) {
  const Bytes jpeg = encode_jpeg(pattern(64, 48, 3), 64, 48, TJPF_RGB);
  const Bytes png = png8(pattern(64, 48, 3), 64, 48, 3);
  Bytes bad_crc = png;
  bad_crc[bad_crc.size() / 2] ^= 0x55;  // inside IDAT
  Bytes bad_header = {0xff, 0xd8, 0xff, 0xe0, 0x00, 0x02, 0x13, 0x37, 0x00};
  write("c/a_bad_crc.png", bad_crc);
  write("c/b_bad_header.jpg", bad_header);
  write("c/c_empty.jpg", {});
  write("c/d_gone.png", png);
  write("c/e_good.jpg", png);  // a PNG named .jpg: the magic bytes decide
  write("c/f_text.jpg", {'<', 'h', 't', 'm', 'l', '>'});
  write("c/g_truncated.jpg",
        Bytes(jpeg.begin(), jpeg.begin() + static_cast<long>(jpeg.size() / 2)));
  write("c/h_truncated.png", Bytes(png.begin(), png.begin() + static_cast<long>(png.size() / 2)));
  write("c/i_one_byte.png", {0x89});
  Bytes extraneous(jpeg.begin(), jpeg.end() - 2);  // bytes between the last scan and EOI: a
  extraneous.insert(extraneous.end(), {0x12, 0x34, 0x56, 0xff, 0xd9});  // libjpeg warning
  write("c/k_extraneous.jpg", extraneous);
  write("c/j_huge.png", [] {  // a header that claims 2^20 × 2^20 pixels
    Bytes b = png8({0}, 1, 1, 1);
    b[16] = b[18] = b[19] = b[20] = b[22] = b[23] = 0;
    b[17] = b[21] = 0x10;  // width and height in IHDR, big-endian
    const auto crc = static_cast<std::uint32_t>(crc32(0, b.data() + 12, 17));
    for (int k = 0; k < 4; ++k)
      b[29 + static_cast<std::size_t>(k)] = static_cast<std::uint8_t>(crc >> (24 - 8 * k));
    return b;
  }());
  const auto ds = ImageFolder::open(dir_, identity(64, 48, 3));
  ASSERT_EQ(ds->size(), 11U);
  fs::remove(dir_ / "c" / "d_gone.png");
  auto expect = [&](std::size_t i, const std::string& phrase) {
    const std::string message = read_error(*ds, i);
    EXPECT_NE(message.find("ImageFolder: " + ds->path(i).string() + ": "), std::string::npos)
        << message;
    EXPECT_NE(message.find(phrase), std::string::npos) << message;
  };
  expect(0, "corrupt PNG: ");
  expect(1, "corrupt JPEG header");
  expect(2, "empty file");
  expect(3, "cannot open: No such file or directory");
  EXPECT_EQ(read_image(*ds, 4), pattern(64, 48, 3));
  expect(5, "not a JPEG or PNG (starts with 3c 68 74 6d)");
  expect(6, "truncated JPEG: ");
  expect(7, "truncated PNG");
  expect(8, "not a JPEG or PNG (starts with 89)");
  expect(9, "PNG of 1048576 x 1048576 pixels, more than");
  expect(10, "corrupt JPEG: Corrupt JPEG data: ");
  // The thread's buffers are fine after errors.
  EXPECT_EQ(read_image(*ds, 4), pattern(64, 48, 3));
}

TEST_F(ImageFolderTest, TheLoaderSkipsBadFilesAndDeliversTheRest) {
  const auto value = [](int i) { return static_cast<std::uint8_t>(i * 30 + 5); };
  for (int i = 0; i < 5; ++i) {
    const Bytes px(8 * 8, value(i));
    const std::string name = "good/" + std::to_string(i) + (i % 2 ? ".png" : ".jpg");
    write(name, i % 2 ? png8(px, 8, 8, 1) : encode_jpeg(px, 8, 8, TJPF_GRAY, TJSAMP_GRAY));
  }
  write("bad/0.jpg", {'G', 'I', 'F', '8', '9', 'a'});
  write("bad/1.png", {});
  write("bad/2.jpg", {0xff, 0xd8, 0xff});
  const auto ds = ImageFolder::open(dir_, identity(8, 8, 1));
  ferry::LoaderOptions lo;
  lo.batch_size = 3;
  lo.shuffle = true;
  lo.device = ferry::Device::cpu();
  lo.workers = 2;
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader loader(ds, lo);
  std::set<std::uint64_t> seen;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::uint64_t index = b.indices()[k];
      seen.insert(index);
      EXPECT_EQ(b["label"].data<std::int64_t>()[k], 1);  // "good" sorts after "bad"
      const std::uint8_t* img = b["image"].data<std::uint8_t>() + k * 64;
      const auto expected = value(static_cast<int>(index - 3));
      for (int j = 0; j < 64; ++j) ASSERT_NEAR(img[j], expected, 1) << index;
    }
  }
  EXPECT_EQ(seen, (std::set<std::uint64_t>{3, 4, 5, 6, 7}));
  const ferry::LoaderStats stats = loader.stats();
  EXPECT_EQ(stats.skipped, 3U);
  ASSERT_EQ(stats.skip_reasons.size(), 3U);
  std::string reasons;
  for (const std::string& r : stats.skip_reasons) reasons += r + "\n";
  for (const char* name : {"bad/0.jpg", "bad/1.png", "bad/2.jpg"}) {
    EXPECT_NE(reasons.find((dir_ / name).string()), std::string::npos) << reasons;
  }
}

// ---- hostile numbers and misuse ------------------------------------------------------

TEST_F(ImageFolderTest, BadOptionsRaiseConfigErrorNamingTheMember) {
  write("ok/c/x.png", png8({1, 2, 3}, 1, 1, 3));
  auto error = [&](auto change) -> std::string {
    ImageOptions o;
    change(o);
    try {
      (void)ImageFolder::open(dir_ / "ok", o);
    } catch (const ferry::ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  struct Case {
    void (*change)(ImageOptions&);
    const char* phrase;
  };
  const Case cases[] = {
      {[](ImageOptions& o) { o.height = 0; }, "height and width must be at least 1, got 0 x 224"},
      {[](ImageOptions& o) { o.width = INT_MIN; }, "height and width must be at least 1"},
      {[](ImageOptions& o) { o.height = o.width = INT_MAX; },
       "height x width, 2147483647 x 2147483647, is more than max_pixels (67108864)"},
      {[](ImageOptions& o) { o.max_pixels = 224 * 224 - 1; },
       "height x width, 224 x 224, is more than max_pixels (50175)"},
      {[](ImageOptions& o) { o.max_pixels = 0; }, "max_pixels must be 1 to 268435456, got 0"},
      {[](ImageOptions& o) { o.max_pixels = -1; }, "max_pixels must be 1 to 268435456, got -1"},
      {[](ImageOptions& o) { o.max_pixels = (std::int64_t{1} << 28) + 1; }, "max_pixels must be"},
      {[](ImageOptions& o) { o.max_jpeg_scans = 0; }, "max_jpeg_scans must be at least 1, got 0"},
      {[](ImageOptions& o) { o.max_jpeg_scans = INT_MIN; }, "max_jpeg_scans must be at least 1"},
      {[](ImageOptions& o) { o.channels = 2; }, "channels must be 1 (gray), 3 (RGB) or 4 (RGBA)"},
      {[](ImageOptions& o) { o.channels = -3; }, "channels must be"},
      {[](ImageOptions& o) { o.geometry = static_cast<Geometry>(7); }, "unknown geometry 7"},
      {[](ImageOptions& o) { o.resize = -1; }, "resize must be 0 (automatic)"},
      {[](ImageOptions& o) { o.resize = (1 << 20) + 1; }, "resize must be"},
      {[](ImageOptions& o) {
         o.geometry = Geometry::resize;
         o.resize = 256;
       },
       "resize (256) applies to Geometry::resize_then_center_crop only; leave it 0 for "
       "Geometry::resize"},
      {[](ImageOptions& o) {
         o.geometry = Geometry::random_resized_crop;
         o.resize = 256;
       },
       "leave it 0 for Geometry::random_resized_crop"},
      {[](ImageOptions& o) {
         o.normalize = ferry::Normalize{{0.1f, 0.2f}, {1.0f}};
       },
       "normalize.mean has 2 values"},
      {[](ImageOptions& o) {
         o.normalize = ferry::Normalize{};
         o.normalize->scale = std::numeric_limits<float>::infinity();
       },
       "normalize.scale is not finite"},
  };
  for (const Case& c : cases) {
    const std::string message = error(c.change);
    EXPECT_EQ(message.rfind("ImageFolder: ", 0), 0U) << message;
    EXPECT_NE(message.find(c.phrase), std::string::npos) << message;
  }
  // The edges that are fine: the largest limit, one scan, a huge side within max_pixels (whose
  // automatic resize, side × 8 / 7, no longer fits an int), resize 0 with any geometry.
  EXPECT_EQ(error([](ImageOptions& o) { o.max_pixels = std::int64_t{1} << 28; }), "no error");
  EXPECT_EQ(error([](ImageOptions& o) { o.max_jpeg_scans = 1; }), "no error");
  EXPECT_EQ(error([](ImageOptions& o) {
              o.max_pixels = std::int64_t{1} << 28;
              o.height = 1 << 28;
              o.width = 1;
            }),
            "no error");
  EXPECT_EQ(error([](ImageOptions& o) { o.geometry = Geometry::random_resized_crop; }), "no error");
}

TEST_F(ImageFolderTest, TheAutomaticResizeOfAHugeOutputSideDoesNotOverflow) {
  // max(height, width) × 8 / 7 with height 2^28: 2^31 before the division.
  ImageOptions o;
  o.max_pixels = std::int64_t{1} << 28;
  o.height = 1 << 28;
  o.width = 1;
  ferry::detail::check_image_options(o, "test");
  const ferry::detail::ImagePlan p = ferry::detail::plan_image(10, 10, o, 0);
  // Resize(306783378) of a square, then the central 1 × 2^28: the middle of the image.
  EXPECT_EQ(p.out_x0, 0);
  EXPECT_EQ(p.out_x1, 1);
  EXPECT_EQ(p.out_y0, 0);
  EXPECT_EQ(p.out_y1, 1 << 28);
  const double size = (static_cast<double>(1 << 28) * 8 + 3) / 7;
  EXPECT_NEAR(p.x0, 10 * std::floor((std::floor(size) - 1) / 2) / std::floor(size), 1e-6);
  EXPECT_NEAR(p.x1 - p.x0, 10 / std::floor(size), 1e-9);
  EXPECT_GT(p.y0, 0.6);
  EXPECT_LT(p.y1, 9.4);
  EXPECT_NEAR(p.y1 - p.y0, 10.0 * (1 << 28) / std::floor(size), 1e-6);
}

TEST_F(ImageFolderTest, ScansAreCountedFromTheMarkers) {
  using ferry::detail::jpeg_scan_count;
  // SOI; an APP1 whose data holds FF DA (not a marker); a scan whose data has a stuffed 0xFF,
  // restart markers and fill bytes; fill bytes, then a second scan; EOI; an SOS after EOI.
  const Bytes sos = {0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00};
  Bytes b = {0xff, 0xd8, 0xff, 0xe1, 0x00, 0x08, 'x', 0xff, 0xda, 0x00, 0x00, 0x00};
  b.insert(b.end(), sos.begin(), sos.end());
  b.insert(b.end(), {0x12, 0xff, 0x00, 0x34, 0xff, 0xd0, 0x56, 0xff, 0xff, 0xd3, 0x78, 0xff});
  b.insert(b.end(), sos.begin(), sos.end());
  b.insert(b.end(), {0x9a, 0xff, 0xd9});
  const std::size_t eoi = b.size();
  b.insert(b.end(), sos.begin(), sos.end());
  EXPECT_EQ(jpeg_scan_count(b), 2U);
  // Cut anywhere: no more than the whole, and no read past the end (the sanitizers watch).
  for (std::size_t n = 0; n <= eoi; ++n) {
    const Bytes cut(b.begin(), b.begin() + static_cast<long>(n));
    EXPECT_LE(jpeg_scan_count(cut), 2U) << n;
  }
  EXPECT_EQ(jpeg_scan_count(Bytes(b.begin(), b.begin() + 22)), 1U);  // the first SOS's header
  EXPECT_EQ(jpeg_scan_count(Bytes{}), 0U);
  // A segment length that runs past the end stops the walk (libjpeg finds the data cut short);
  // one below 2 skips only itself, as libjpeg does before reading the next marker.
  EXPECT_EQ(jpeg_scan_count(Bytes{0xff, 0xd8, 0xff, 0xe0, 0xff, 0xff, 0xff, 0xda, 0x00, 0x02}), 0U);
  EXPECT_EQ(jpeg_scan_count(Bytes{0xff, 0xd8, 0xff, 0xe0, 0x00, 0x01, 0xff, 0xda, 0x00, 0x02}), 1U);
  EXPECT_EQ(jpeg_scan_count(Bytes{0xff, 0xd8, 0xff, 0xfe, 0x00, 0x00, 0xff, 0xda, 0x00, 0x02}), 1U);

  // Real JPEGs: one scan when sequential, one per pass when progressive (noise, so that the
  // entropy-coded data is full of stuffed 0xFF bytes).
  Bytes noise = pattern(64, 48, 3);
  std::uint32_t state = 1;
  for (std::uint8_t& v : noise)
    v = static_cast<std::uint8_t>((state = state * 1103515245 + 12345) >> 23);
  const Bytes baseline = encode_jpeg(noise, 64, 48, TJPF_RGB);
  EXPECT_EQ(jpeg_scan_count(baseline), 1U);
  const Bytes progressive =
      encode_jpeg(noise, 64, 48, TJPF_RGB, TJSAMP_420, 95, TJFLAG_PROGRESSIVE);
  EXPECT_GT(naive_sos_count(progressive), 1U);
  EXPECT_EQ(jpeg_scan_count(progressive), naive_sos_count(progressive));
  // A progressive JPEG inside an APP1 (as a thumbnail is): its scans are not the file's.
  Bytes outer(baseline.begin(), baseline.begin() + 2);
  const std::size_t app1 = progressive.size() + 2;
  ASSERT_LT(app1, 65536U);
  outer.insert(outer.end(), {0xff, 0xe1, static_cast<std::uint8_t>(app1 >> 8),
                             static_cast<std::uint8_t>(app1 & 0xff)});
  outer.insert(outer.end(), progressive.begin(), progressive.end());
  outer.insert(outer.end(), baseline.begin() + 2, baseline.end());
  EXPECT_EQ(jpeg_scan_count(outer), 1U);
  EXPECT_EQ(decode_one(outer, identity(64, 48, 3)), turbo_decode(baseline, TJPF_RGB));
}

TEST_F(ImageFolderTest, AJpegOfMoreScansThanMaxJpegScansIsRefusedBeforeDecoding) {
  const Bytes jpeg =
      encode_jpeg(pattern(64, 48, 3), 64, 48, TJPF_RGB, TJSAMP_444, 90, TJFLAG_PROGRESSIVE);
  const std::size_t scans = naive_sos_count(jpeg);
  ASSERT_GT(scans, 2U);
  // Thousands of copies of the last scan before EOI: a small file that would make libjpeg pass
  // over the image thousands of times.
  Bytes forged(jpeg.begin(), jpeg.end() - 2);
  const std::size_t last = [&] {
    std::size_t at = jpeg.size() - 2;
    while (!(jpeg[at] == 0xff && jpeg[at + 1] == 0xda)) --at;
    return at;
  }();
  for (int k = 0; k < 5000; ++k)
    forged.insert(forged.end(), jpeg.begin() + static_cast<long>(last), jpeg.end() - 2);
  forged.insert(forged.end(), {0xff, 0xd9});
  write("c/a_exact.jpg", jpeg);
  write("c/b_forged.jpg", forged);
  ImageOptions o = identity(64, 48, 3);
  o.max_jpeg_scans = static_cast<int>(scans);
  const auto ds = ImageFolder::open(dir_, o);
  EXPECT_EQ(read_image(*ds, 0), turbo_decode(jpeg, TJPF_RGB));  // exactly at the limit
  const auto start = std::chrono::steady_clock::now();
  const std::string message = read_error(*ds, 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_NE(message.find("ImageFolder: " + ds->path(1).string() + ": JPEG of " +
                         std::to_string(scans + 5000) + " scans, more than max_jpeg_scans (" +
                         std::to_string(scans) + ")"),
            std::string::npos)
      << message;
  // One scan fewer allowed than the real file has; and the default for the forged one.
  o.max_jpeg_scans = static_cast<int>(scans) - 1;
  const std::string one_over = read_error(*ImageFolder::open(dir_, o), 0);
  EXPECT_NE(one_over.find(": JPEG of " + std::to_string(scans) + " scans, more than"),
            std::string::npos)
      << one_over;
  const std::string by_default = read_error(*ImageFolder::open(dir_, identity(64, 48, 3)), 1);
  EXPECT_NE(by_default.find("scans, more than max_jpeg_scans (256)"), std::string::npos)
      << by_default;
}

TEST_F(ImageFolderTest, ImagesOverMaxPixelsAreRefusedBeforeAllocating) {
  const Bytes jpeg = encode_jpeg(pattern(64, 48, 3), 64, 48, TJPF_RGB);
  const Bytes png = png8(pattern(64, 48, 3), 64, 48, 3);
  // A JPEG header that claims the most libjpeg decodes, 65500 × 65500; and one more, which
  // libjpeg itself refuses mid-header.
  auto with_jpeg_size = [&](std::uint16_t side) {
    Bytes b = jpeg;
    const std::size_t sof = jpeg_segment(b, 0xc0);
    EXPECT_NE(sof, std::string::npos);
    for (std::size_t k = 5; k < 9; k += 2) {  // height, then width, big-endian
      b[sof + k] = static_cast<std::uint8_t>(side >> 8);
      b[sof + k + 1] = static_cast<std::uint8_t>(side & 0xff);
    }
    return b;
  };
  write("c/a.jpg", jpeg);
  write("c/b.png", png);
  write("c/c_huge.jpg", with_jpeg_size(65500));
  write("c/h_over.jpg", with_jpeg_size(65501));
  write("c/d_wide.png", png8(Bytes(2000, 9), 2000, 1, 1));
  write("c/e_side.png", with_png_size(png, (1U << 24) + 1, 1));
  write("c/f_most.png", with_png_size(png, 0x7fffffff, 0x7fffffff));
  write("c/g_over.png", with_png_size(png, 0xffffffff, 1));
  ImageOptions o = identity(8, 8, 3);
  const auto ds = ImageFolder::open(dir_, o);
  auto expect = [&](const ImageFolder& folder, std::size_t i, const std::string& phrase) {
    const std::string message = read_error(folder, i);
    EXPECT_NE(message.find("ImageFolder: " + folder.path(i).string() + ": " + phrase),
              std::string::npos)
        << message;
  };
  expect(*ds, 2, "JPEG of 65500 x 65500 pixels, more than max_pixels (67108864)");
  expect(*ds, 7, "corrupt JPEG header: Maximum supported image dimension is 65500 pixels");
  // The thread's TurboJPEG handle is fine after libjpeg failed mid-header.
  EXPECT_EQ(read_image(*ImageFolder::open(dir_, identity(64, 48, 3)), 0),
            turbo_decode(jpeg, TJPF_RGB));
  EXPECT_EQ(read_image(*ds, 3), Bytes(std::size_t{8} * 8 * 3, 9));
  expect(*ds, 4, "PNG of 16777217 x 1 pixels, a side over the 16777216 ImageFolder decodes");
  expect(*ds, 5, "PNG of 2147483647 x 2147483647 pixels, more than max_pixels (67108864)");
  expect(*ds, 6, "corrupt PNG header: ");
  // A lower max_pixels: 64 × 48 = 3072 is fine, 3071 not, for either format; libspng itself
  // refuses a side over it.
  o.max_pixels = std::int64_t{64} * 48;
  EXPECT_NO_THROW((void)read_image(*ImageFolder::open(dir_, o), 0));
  EXPECT_NO_THROW((void)read_image(*ImageFolder::open(dir_, o), 1));
  o.max_pixels = std::int64_t{64} * 48 - 1;
  const auto low = ImageFolder::open(dir_, o);
  expect(*low, 0, "JPEG of 64 x 48 pixels, more than max_pixels (3071)");
  expect(*low, 1, "PNG of 64 x 48 pixels, more than max_pixels (3071)");
  o.max_pixels = 1000;
  expect(*ImageFolder::open(dir_, o), 3, "PNG of 2000 x 1 pixels, more than max_pixels (1000)");
}

TEST_F(ImageFolderTest, ExtremeRatiosAreResizedAndAbsurdOnesRefused) {
  // 8192 rows squeezed into 1 and one column stretched to 8192: a few tens of KB of weights.
  write("c/strip.png", png8(Bytes(8192, 77), 1, 8192, 1));
  EXPECT_EQ(read_image(*ImageFolder::open(dir_, identity(8192, 1, 1)), 0), Bytes(8192, 77));
  EXPECT_EQ(read_image(*ImageFolder::open(dir_, identity(64, 1, 1)), 0), Bytes(64, 77));
  // One pixel to 2^26 × 1 would need over a GiB of weights: refused before any is allocated.
  ImageOptions o = identity(1 << 26, 1, 1);
  const ferry::detail::ImagePlan plan = ferry::detail::plan_image(1, 1, o, 0);
  try {
    (void)ferry::detail::image::fit_image(plan, o, 1.0, 1, 1, "strip.png");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("strip.png: resizing 1 x 1 pixels to 67108864 x 1 "
                                         "needs about "),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(" bytes of working memory, more than the 268435456 "
                                         "ImageFolder allows"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(ImageFolderTest, ScratchGrownByOneLargeImageIsReleased) {
  using ferry::detail::decode_scratch_bytes;
  using ferry::detail::kScratchKeepBytes;
  // 2400 × 2400 gray, decoded as RGBA: 23 MB of pixels, over the 16 MiB a buffer keeps.
  constexpr int kSide = 2400;
  write("big/c/x.png", png8(Bytes(std::size_t{kSide} * kSide, 200), kSide, kSide, 1));
  write("small/c/x.png", png8(pattern(64, 48, 3), 64, 48, 3));
  const auto big = ImageFolder::open(dir_ / "big", identity(8, 8, 4));
  const auto small = ImageFolder::open(dir_ / "small", identity(32, 24, 4));
  (void)read_image(*small, 0);
  const std::size_t kept = decode_scratch_bytes();
  EXPECT_GT(kept, 0U);  // a small image's buffers stay for the next one
  (void)read_image(*small, 0);
  EXPECT_EQ(decode_scratch_bytes(), kept);
  Bytes expected;
  for (int i = 0; i < 8 * 8; ++i) expected.insert(expected.end(), {200, 200, 200, 255});
  EXPECT_EQ(read_image(*big, 0), expected);
  EXPECT_LE(decode_scratch_bytes(), kScratchKeepBytes);
  EXPECT_LT(decode_scratch_bytes(), std::size_t{kSide} * kSide * 4);
  // A failed decode releases too: the big PNG cut short after its pixels were allocated.
  const Bytes whole = png8(Bytes(std::size_t{kSide} * kSide, 200), kSide, kSide, 1);
  ASSERT_GT(whole.size(), 100U);
  const Bytes cut(whole.begin(), whole.end() - 20);
  const std::span<const std::uint8_t> bytes(cut);
  Bytes out(std::size_t{8} * 8 * 4);
  EXPECT_THROW(ferry::detail::decode_image(bytes, identity(8, 8, 4), 0, out.data(), "cut.png"),
               DataError);
  EXPECT_LE(decode_scratch_bytes(), kScratchKeepBytes);
}

// The JPEG without its Huffman tables (the DHT segments before its first scan): an abbreviated
// stream, which only a decoder that kept an earlier image's tables could read.
Bytes without_huffman_tables(const Bytes& jpeg) {
  const auto from = [&](std::size_t i) { return jpeg.begin() + static_cast<std::ptrdiff_t>(i); };
  Bytes out(jpeg.begin(), from(2));  // SOI
  std::size_t at = 2;
  while (at + 4 <= jpeg.size() && jpeg[at] == 0xFF) {
    const std::uint8_t marker = jpeg[at + 1];
    const std::size_t length = (std::size_t{jpeg[at + 2]} << 8) | jpeg[at + 3];
    if (marker == 0xDA) break;  // SOS: the scan and the rest stay as they are
    if (marker != 0xC4) out.insert(out.end(), from(at), from(at + 2 + length));
    at += 2 + length;
  }
  out.insert(out.end(), from(at), jpeg.end());
  return out;
}

TEST(ImageDecode, AJpegIsDecodedAloneWhateverImageCameBeforeIt) {
  // libjpeg keeps the tables an image defines in its decompressor: a JPEG without them must
  // fail the same way after another image as alone, not decode with that image's tables.
  // Progressive: its tables are optimized for it, so the standard ones libjpeg falls back on
  // do not read it.
  const Bytes whole =
      encode_jpeg(pattern(16, 16, 3), 16, 16, TJPF_RGB, TJSAMP_444, 95, TJFLAG_PROGRESSIVE);
  const Bytes bare = without_huffman_tables(whole);
  ASSERT_LT(bare.size(), whole.size());
  const ImageOptions o = identity(16, 16, 3);
  Bytes out(std::size_t{16} * 16 * 3);
  const auto decode = [&](const Bytes& b, const char* name) {
    ferry::detail::decode_image(std::span<const std::uint8_t>(b), o, 0, out.data(), name);
  };
  EXPECT_THROW(decode(bare, "bare.jpg"), DataError);
  decode(whole, "whole.jpg");
  const Bytes first = out;
  EXPECT_THROW(decode(bare, "bare.jpg"), DataError);  // not decoded with whole.jpg's tables
  decode(whole, "whole.jpg");
  EXPECT_EQ(out, first);
}

TEST_F(ImageFolderTest, FilesTooLargeOrNotRegularAreRefusedUnread) {
  write("c/a.png", png8(pattern(4, 4, 3), 4, 4, 3));
  write("c/b.png", png8(pattern(4, 4, 3), 4, 4, 3));
  const auto ds = ImageFolder::open(dir_, identity(4, 4, 3));
  // A sparse file of 16 GiB: refused from its size, not read into memory.
  fs::resize_file(ds->path(0), std::uintmax_t{1} << 34);
  const std::string large = read_error(*ds, 0);
  EXPECT_NE(large.find("ImageFolder: " + ds->path(0).string() + ": file of 17179869184 bytes, " +
                       "more than the " + std::to_string(ferry::detail::max_file_bytes({}))),
            std::string::npos)
      << large;
  // A FIFO put in an image's place after listing: refused, not waited on.
  fs::remove(ds->path(1));
  ASSERT_EQ(::mkfifo(ds->path(1).c_str(), 0600), 0);
  const std::string fifo = read_error(*ds, 1);
  EXPECT_NE(fifo.find(ds->path(1).string() + ": cannot read: not a regular file"),
            std::string::npos)
      << fifo;
  EXPECT_EQ(ferry::detail::max_file_bytes({}), (std::size_t{8} << 26) + (std::size_t{64} << 20));
}

TEST_F(ImageFolderTest, ManyAncillaryPngChunksAreRefused) {
  // 1100 small tEXt chunks between IHDR and IDAT: more than libspng keeps.
  const Bytes png = png8(pattern(4, 4, 3), 4, 4, 3);
  Bytes many(png.begin(), png.begin() + 33);  // the signature and IHDR
  for (int k = 0; k < 1100; ++k) {
    const Bytes chunk = png_chunk("tEXt", {'k', 0, 'v'});
    many.insert(many.end(), chunk.begin(), chunk.end());
  }
  many.insert(many.end(), png.begin() + 33, png.end());
  write("c/many.png", many);
  const auto ds = ImageFolder::open(dir_, identity(4, 4, 3));
  const std::string message = read_error(*ds, 0);
  EXPECT_NE(message.find("ImageFolder: " + ds->path(0).string() +
                         ": PNG ancillary chunks over the limits"),
            std::string::npos)
      << message;
}

TEST_F(ImageFolderTest, ASampleIndexOutOfRangeIsAConfigError) {
  write("c/a.png", png8(pattern(4, 4, 3), 4, 4, 3));
  const auto ds = ImageFolder::open(dir_, identity(4, 4, 3));
  const std::vector<ferry::FieldSpec> fields = ds->fields();
  const ferry::detail::SlotLayout layout(fields, 1);
  std::vector<std::byte> slot(layout.bytes);
  try {
    ds->read(1, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, 0));
    ADD_FAILURE() << "no error";
  } catch (const ferry::ConfigError& e) {
    EXPECT_STREQ(e.what(), "ImageFolder: sample index 1 out of range (1 images)");
  }
  EXPECT_THROW((void)ds->path(1), ferry::ConfigError);
  EXPECT_THROW((void)ds->label(SIZE_MAX), ferry::ConfigError);
  EXPECT_EQ(ds->path(0), dir_ / "c" / "a.png");
}

// ---- decoding for a dataset of one's own (image.hpp) --------------------------------

// Photos given as a list of files, each decoded in read() by image.hpp's functions: from bytes
// the dataset read itself, or from the file.
class ListedPhotos final : public ferry::Dataset {
 public:
  ListedPhotos(std::vector<fs::path> files, std::vector<std::int64_t> labels, ImageOptions o,
               bool from_memory)
      : files_(std::move(files)),
        labels_(std::move(labels)),
        options_(std::move(o)),
        from_memory_(from_memory) {}
  std::size_t size() const override { return files_.size(); }
  std::vector<ferry::FieldSpec> fields() const override {
    return {ferry::image_field(options_), {"label", ferry::DType::i64, {}}};
  }
  void read(std::size_t index, ferry::SampleRef out) const override {
    const std::span<std::uint8_t> image(out.as<std::uint8_t>(0), out.nbytes(0));
    if (from_memory_) {
      std::ifstream in(files_[index], std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                    std::istreambuf_iterator<char>());
      ferry::decode_image(std::as_bytes(std::span(bytes)), options_, out.seed(), image,
                          files_[index].native());
    } else {
      ferry::decode_image_file(files_[index], options_, out.seed(), image);
    }
    *out.as<std::int64_t>(1) = labels_[index];
  }

 private:
  std::vector<fs::path> files_;
  std::vector<std::int64_t> labels_;
  ImageOptions options_;
  bool from_memory_;
};

// Every batch of an epoch, each field's bytes one after another.
Bytes epoch_bytes(const std::shared_ptr<const ferry::Dataset>& ds, std::uint64_t seed) {
  ferry::LoaderOptions lo;
  lo.batch_size = 3;
  lo.shuffle = true;
  lo.seed = seed;
  lo.device = ferry::Device::cpu();
  lo.workers = 2;
  ferry::Loader loader(ds, lo);
  Bytes all;
  for (const ferry::Batch& b : loader.epoch(1)) {
    for (const ferry::FieldSpec& f : ds->fields()) {
      const ferry::Tensor& t = b[f.name];
      const auto* p = static_cast<const std::uint8_t*>(t.data());
      all.insert(all.end(), p, p + t.nbytes());
    }
  }
  return all;
}

TEST_F(ImageFolderTest, ADatasetOfOnesOwnDecodesAsImageFolderDoes) {
  for (int i = 0; i < 7; ++i) {
    std::string name = i % 3 == 0 ? "a/" : "b/";
    name += std::to_string(i);
    if (i % 2 == 0) {
      name += ".jpg";
      write(name, encode_jpeg(pattern(64 + 8 * i, 48, 3, i), 64 + 8 * i, 48, TJPF_RGB));
    } else {
      name += ".png";
      write(name, png8(pattern(40, 52 + 4 * i, 4, i), 40, 52 + 4 * i, 4));
    }
  }
  ImageOptions random = identity(24, 20, 3);
  random.geometry = Geometry::random_resized_crop;
  random.random_flip = true;
  ImageOptions center;
  center.height = 28;
  center.width = 28;
  center.channels = 1;
  center.normalize = ferry::Normalize{{0.5f}, {0.25f}};
  for (const ImageOptions& o : {random, center, identity(16, 16, 4)}) {
    const auto folder = ImageFolder::open(dir_, o);
    std::vector<fs::path> files;
    std::vector<std::int64_t> labels;
    for (std::size_t i = 0; i < folder->size(); ++i) {
      files.push_back(folder->path(i));
      labels.push_back(folder->label(i));
    }
    EXPECT_EQ(ferry::image_shape(o), (std::vector<std::int64_t>{o.height, o.width, o.channels}));
    for (const bool from_memory : {false, true}) {
      const auto own = std::make_shared<ListedPhotos>(files, labels, o, from_memory);
      EXPECT_EQ(own->fields(), folder->fields());
      for (std::size_t i = 0; i < folder->size(); ++i) {
        for (const std::uint64_t seed : {0U, 1U, 99U}) {
          const ferry::detail::SlotLayout layout(own->fields(), 1);
          std::vector<std::byte> slot(layout.bytes);
          own->read(i, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, seed));
          const auto* p = reinterpret_cast<const std::uint8_t*>(slot.data());
          EXPECT_EQ(Bytes(p, p + layout.sample_bytes[0]), read_image(*folder, i, seed))
              << files[i] << " seed " << seed;
        }
      }
      // Under a loader too (normalized on its device where `o` says so), for its sample seeds.
      const Bytes expected = epoch_bytes(folder, 5);
      const auto pixels = static_cast<std::size_t>(o.height * o.width * o.channels);
      EXPECT_EQ(expected.size(), 7 * (pixels * (o.normalize ? sizeof(float) : 1) + 8));
      EXPECT_EQ(epoch_bytes(own, 5), expected);
    }
  }
}

TEST_F(ImageFolderTest, DecodingForOnesOwnNamesWhatWasGivenInItsErrors) {
  const ImageOptions o = identity(8, 8, 3);
  Bytes out(8 * 8 * 3);
  auto message = [&](auto decode) -> std::string {
    try {
      decode();
    } catch (const DataError& e) {
      return e.what();
    }
    return "no error";
  };
  const Bytes html = {'<', 'h', 't', 'm', 'l', '>'};
  EXPECT_EQ(message([&] {
              ferry::decode_image(std::as_bytes(std::span(html)), o, 0, out, "shard 3, member 12");
            }),
            "shard 3, member 12: not a JPEG or PNG (starts with 3c 68 74 6d)");
  const Bytes png = png8(pattern(8, 8, 3), 8, 8, 3);
  const Bytes cut(png.begin(), png.end() - 20);
  EXPECT_EQ(message([&] {
              ferry::decode_image(std::as_bytes(std::span(cut)), o, 0, out, "cut");
            }).rfind("cut: truncated PNG", 0),
            0U);
  const fs::path missing = dir_ / "missing.png";
  EXPECT_EQ(message([&] {
              ferry::decode_image_file(missing, o, 0, out);
            }).rfind(missing.string() + ": cannot open: No such file", 0),
            0U);
  EXPECT_EQ(message([&] { ferry::decode_image_file(dir_, o, 0, out, "the folder"); }),
            "the folder: cannot read: it is a folder");
  // A good image decodes; what does not fit the options is a ConfigError.
  ferry::decode_image(std::as_bytes(std::span(png)), o, 0, out, "good");
  EXPECT_EQ(out, pattern(8, 8, 3));
  Bytes small(8 * 8 * 3 - 1);
  EXPECT_THROW(ferry::decode_image(std::as_bytes(std::span(png)), o, 0, small, "good"),
               ferry::ConfigError);
  ImageOptions bad = o;
  bad.channels = 2;
  EXPECT_THROW((void)ferry::image_shape(bad), ferry::ConfigError);
  EXPECT_THROW(ferry::decode_image(std::as_bytes(std::span(png)), bad, 0, out, "good"),
               ferry::ConfigError);
}

}  // namespace
