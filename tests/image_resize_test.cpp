// The JPEG path's pixels: a decode of only the rows and columns the output needs is exactly the
// full decode's pixels there, and Resize(256) + CenterCrop(224) of real photos, and
// RandomResizedCrop(224) + flip of them and of them enlarged past a megapixel (with the same
// crop boxes), stay within 1.0 u8 level (mean absolute difference) of torchvision's PIL
// transforms. The PIL reference
// is made at test time by tests/data/pil_resize_crop.py (python3 with PIL, python3-pil); the
// test skips, saying so, where either is missing.

#include <gtest/gtest.h>
#include <spng.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "datasets/image/image_decode.hpp"
#include "ferry/image.hpp"
#include "source_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

const fs::path kPhotos = "/usr/lib/python3/dist-packages/sklearn/datasets/images";
const fs::path kScript = fs::path(FERRY_SOURCE_DIR) / "tests" / "data" / "pil_resize_crop.py";

Bytes read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const Bytes& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

struct Image {
  Bytes rgb;
  int width = 0, height = 0;
};

Image turbo_decode(const Bytes& jpeg) {
  tjhandle tj = tjInitDecompress();
  Image im;
  int sub = 0, cs = 0;
  EXPECT_EQ(tjDecompressHeader3(tj, jpeg.data(), jpeg.size(), &im.width, &im.height, &sub, &cs), 0);
  im.rgb.resize(static_cast<std::size_t>(im.width) * static_cast<std::size_t>(im.height) * 3);
  EXPECT_EQ(tjDecompress2(tj, jpeg.data(), jpeg.size(), im.rgb.data(), im.width, 0, im.height,
                          TJPF_RGB, 0),
            0)
      << tjGetErrorStr2(tj);
  tjDestroy(tj);
  return im;
}

Bytes encode(const Image& im, int subsampling, int quality) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, im.rgb.data(), im.width, 0, im.height, TJPF_RGB, &buf, &size,
                        subsampling, quality, 0),
            0);
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

Bytes encode_png(const Image& im) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_set_option(ctx, SPNG_IMG_COMPRESSION_LEVEL, 1);
  spng_ihdr ihdr{};
  ihdr.width = static_cast<std::uint32_t>(im.width);
  ihdr.height = static_cast<std::uint32_t>(im.height);
  ihdr.bit_depth = 8;
  ihdr.color_type = SPNG_COLOR_TYPE_TRUECOLOR;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  EXPECT_EQ(
      spng_encode_image(ctx, im.rgb.data(), im.rgb.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  std::size_t len = 0;
  int err = 0;
  auto* buf = static_cast<std::uint8_t*>(spng_get_png_buffer(ctx, &len, &err));
  Bytes out(buf, buf + len);
  std::free(buf);  // spng hands over a malloc'd buffer
  spng_ctx_free(ctx);
  return out;
}

Image crop(const Image& im, int left, int top, int width, int height) {
  Image out{{}, width, height};
  for (int y = top; y < top + height; ++y) {
    const auto* row =
        im.rgb.data() + (static_cast<std::size_t>(y) * static_cast<std::size_t>(im.width) +
                         static_cast<std::size_t>(left)) *
                            3;
    out.rgb.insert(out.rgb.end(), row, row + static_cast<std::ptrdiff_t>(width) * 3);
  }
  return out;
}

Bytes decode(const Bytes& jpeg, const ferry::ImageOptions& o, std::uint64_t seed = 0) {
  Bytes out(static_cast<std::size_t>(o.height) * static_cast<std::size_t>(o.width) *
            static_cast<std::size_t>(o.channels));
  ferry::decode_image({reinterpret_cast<const std::byte*>(jpeg.data()), jpeg.size()}, o, seed, out,
                      "photo.jpg");
  return out;
}

// "" when equal, else how many bytes differ and where the first is (byte, pixel, channel).
std::string differences(const Bytes& a, const Bytes& b, int width, int channels = 3) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " != " + std::to_string(b.size());
  std::size_t count = 0, first = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && count++ == 0) first = i;
  }
  if (count == 0) return {};
  const std::size_t pixel = first / static_cast<std::size_t>(channels);
  return std::to_string(count) + " bytes differ, the first at x " +
         std::to_string(pixel % static_cast<std::size_t>(width)) + ", y " +
         std::to_string(pixel / static_cast<std::size_t>(width)) + ": " + std::to_string(a[first]) +
         " vs " + std::to_string(b[first]);
}

double mean_abs_diff(const Bytes& a, const Bytes& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) sum += std::abs(a[i] - b[i]);
  return sum / static_cast<double>(std::max<std::size_t>(a.size(), 1));
}

// The photos, and views of them as ImageNet's typical 500 × 375 and 375 × 500 (their central
// regions, re-encoded at quality 90, 4:2:0).
std::vector<std::pair<std::string, Bytes>> photos() {
  std::vector<std::pair<std::string, Bytes>> out;
  for (const char* name : {"china.jpg", "flower.jpg"}) {
    const Bytes jpeg = read_bytes(kPhotos / name);
    out.emplace_back(name, jpeg);
    const Image im = turbo_decode(jpeg);
    const Image wide = crop(im, (im.width - 500) / 2, (im.height - 375) / 2, 500, 375);
    out.emplace_back(std::string(name) + " 500x375", encode(wide, TJSAMP_420, 90));
    const Image tall = crop(im, (im.width - 375) / 2, (im.height - 375) / 2, 375, 375);
    out.emplace_back(std::string(name) + " 375x375 (4:4:4)", encode(tall, TJSAMP_444, 95));
  }
  return out;
}

bool have_photos() {
  return fs::exists(kPhotos / "china.jpg") && fs::exists(kPhotos / "flower.jpg");
}

TEST(ImageResize, DecodingOnlyTheCropIsExactlyTheFullDecodeThere) {
  if (!have_photos()) GTEST_SKIP() << "no scikit-learn sample photos in " << kPhotos;
  for (const auto& [name, jpeg] : photos()) {
    SCOPED_TRACE(name);
    const Image full = turbo_decode(jpeg);
    // resize = the shorter side: no resize, only the central crop, of sizes whose edges fall
    // inside the iMCUs (16 pixels at 4:2:0) and rows libjpeg must skip.
    struct Case {
      int w, h;
    };
    for (const Case c : {Case{224, 224}, Case{101, 77}, Case{300, 17}, Case{1, 1}}) {
      ferry::ImageOptions o;
      o.width = c.w;
      o.height = c.h;
      o.resize = std::min(full.width, full.height);
      const int d_w = full.width - c.w;
      const int d_h = full.height - c.h;
      // torchvision's int(round(d / 2.0)), a half to even.
      const int left = d_w / 2 + ((d_w % 2 == 1 && (d_w / 2) % 2 == 1) ? 1 : 0);
      const int top = d_h / 2 + ((d_h % 2 == 1 && (d_h / 2) % 2 == 1) ? 1 : 0);
      EXPECT_EQ(differences(decode(jpeg, o), crop(full, left, top, c.w, c.h).rgb, c.w), "")
          << c.w << " x " << c.h;
    }
  }
}

TEST(ImageResize, ResizeAndCenterCropOfRealPhotosIsWithinOneLevelOfPil) {
  if (!have_photos()) GTEST_SKIP() << "no scikit-learn sample photos in " << kPhotos;
  // Debian's python3, where python3-pil installs PIL (a python3 earlier in PATH may lack it).
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import PIL' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3 with PIL is not installed (scripts/setup installs python3-pil): "
                    "no reference to compare with";
  }
  const fs::path dir =
      fs::temp_directory_path() / ("ferry_resize_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::pair<std::string, fs::path>> files;
  std::string command = python + " " + kScript.string();
  int i = 0;
  for (const auto& [name, jpeg] : photos()) {
    const fs::path p = dir / (std::to_string(i++) + ".jpg");
    write_bytes(p, jpeg);
    files.emplace_back(name, p);
    command += " ";
    command += p.string();
  }
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  const ferry::ImageOptions o;  // 224 × 224 RGB, Resize(256) + CenterCrop(224)
  for (const auto& [name, p] : files) {
    SCOPED_TRACE(name);
    const Bytes pil = read_bytes(p.string() + ".pil");
    ASSERT_EQ(pil.size(), std::size_t{224} * 224 * 3);
    Bytes got(pil.size());
    ferry::decode_image_file(p, o, 0, got);
    const double diff = mean_abs_diff(got, pil);
    EXPECT_LE(diff, 1.0);
    std::printf("  %-28s mean |ferry - PIL| = %.3f\n", name.c_str(), diff);
  }
  fs::remove_all(dir);
}

TEST(ImageResize, CroppedAndDctScaledDecodesMatchTheWholeImageResized) {
  if (!have_photos()) GTEST_SKIP() << "no scikit-learn sample photos in " << kPhotos;
  // The same pixels as a PNG, which is decoded whole and never DCT-scaled: a JPEG's output is
  // that PNG's exactly where no DCT scaling applies, and close where it does.
  for (const auto& [name, jpeg] : photos()) {
    SCOPED_TRACE(name);
    const Image full = turbo_decode(jpeg);
    const Bytes png = encode_png(full);
    ferry::ImageOptions o;
    o.geometry = ferry::Geometry::random_resized_crop;
    o.random_flip = true;
    int scaled = 0;
    for (std::uint64_t seed = 0; seed < 6; ++seed) {
      const ferry::detail::ImagePlan p =
          ferry::detail::plan_image(full.width, full.height, o, seed);
      const ferry::detail::JpegScale s = ferry::detail::pick_jpeg_scale(
          o.width / (p.x1 - p.x0), o.height / (p.y1 - p.y0), ferry::detail::kRandomCropCover);
      const Bytes got = decode(jpeg, o, seed);
      const Bytes want = decode(png, o, seed);
      if (s.denom == 1) {
        EXPECT_EQ(differences(got, want, o.width), "") << seed;
      } else {
        ++scaled;
        EXPECT_LE(mean_abs_diff(got, want), 1.0) << seed << ": scaled 1/" << s.denom;
      }
    }
    EXPECT_LT(scaled, 6);
    // Resize(out × 8/7) + CenterCrop(out) over a range of sizes: where the DCT scales by 1/2, 1/4
    // or 1/8, the resize after it still shrinks by 2 or more, and the pixels stay within 1.0 of
    // the whole image's (up to 3 where it scaled as soon as the output was covered once).
    int dct = 0;
    for (const int out : {24, 32, 48, 56, 64, 80, 100, 112, 128, 150, 180}) {
      o = ferry::ImageOptions{};
      o.height = o.width = out;
      o.resize = out * 8 / 7;
      const double need = static_cast<double>(o.resize) / std::min(full.width, full.height);
      dct += ferry::detail::pick_jpeg_scale(need, need).denom != 1;
      EXPECT_LE(mean_abs_diff(decode(jpeg, o), decode(png, o)), 1.0) << out;
    }
    EXPECT_GE(dct, 4);  // the sweep does reach the scaled decodes
  }
}

// `im` enlarged `factor` times (bilinear) with deterministic noise of +-8 levels, so that the
// enlargement keeps a photo's fine detail: a stand-in for a photo of over a megapixel.
Image enlarge(const Image& im, double factor) {
  const int width = static_cast<int>(im.width * factor);
  const int height = static_cast<int>(im.height * factor);
  // Made at its size (not resized after): GCC 12's -Wnull-dereference misreads a resize from
  // empty under -O1 with TSan.
  Image out{Bytes(static_cast<std::size_t>(width) * static_cast<std::size_t>(height) * 3), width,
            height};
  std::uint32_t state = 12345;
  for (int y = 0; y < out.height; ++y) {
    const double sy = std::min((y + 0.5) / factor - 0.5, im.height - 1.0);
    const int y0 = std::max(0, static_cast<int>(sy));
    const int y1 = std::min(im.height - 1, y0 + 1);
    const double fy = std::max(0.0, sy - y0);
    for (int x = 0; x < out.width; ++x) {
      const double sx = std::min((x + 0.5) / factor - 0.5, im.width - 1.0);
      const int x0 = std::max(0, static_cast<int>(sx));
      const int x1 = std::min(im.width - 1, x0 + 1);
      const double fx = std::max(0.0, sx - x0);
      for (int c = 0; c < 3; ++c) {
        const auto at = [&](int yy, int xx) {
          return static_cast<double>(
              im.rgb[(static_cast<std::size_t>(yy) * static_cast<std::size_t>(im.width) +
                      static_cast<std::size_t>(xx)) *
                         3 +
                     static_cast<std::size_t>(c)]);
        };
        const double v = (at(y0, x0) * (1 - fx) + at(y0, x1) * fx) * (1 - fy) +
                         (at(y1, x0) * (1 - fx) + at(y1, x1) * fx) * fy;
        state = state * 1664525u + 1013904223u;
        const double noise = static_cast<double>(state >> 24) / 16.0 - 8.0;  // -8 .. 8
        out.rgb[(static_cast<std::size_t>(y) * static_cast<std::size_t>(out.width) +
                 static_cast<std::size_t>(x)) *
                    3 +
                static_cast<std::size_t>(c)] =
            static_cast<std::uint8_t>(std::clamp(v + noise + 0.5, 0.0, 255.0));
      }
    }
  }
  return out;
}

TEST(ImageResize, RandomResizedCropOfRealPhotosIsWithinOneLevelOfPil) {
  if (!have_photos()) GTEST_SKIP() << "no scikit-learn sample photos in " << kPhotos;
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  if (std::system((python + " -c 'import PIL' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "python3 with PIL is not installed (scripts/setup installs python3-pil): "
                    "no reference to compare with";
  }
  // The photos and, over a megapixel, the same enlarged 2.5 times: there random crops decode
  // DCT-scaled (by 1/2 or 1/4 where the scaled crop still covers 224 pixels 1.5 times over).
  const fs::path dir = fs::temp_directory_path() / ("ferry_rrc_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ferry::ImageOptions o;
  o.geometry = ferry::Geometry::random_resized_crop;
  o.random_flip = true;
  struct Case {
    std::string name;
    Bytes jpeg;
    std::uint64_t seed;
    int denom, eval_denom;
    fs::path out;
  };
  std::vector<Case> cases;
  std::ofstream listing(dir / "crops.txt");
  int i = 0;
  for (const char* name : {"china.jpg", "flower.jpg"}) {
    const Bytes original = read_bytes(kPhotos / name);
    const Image big = enlarge(turbo_decode(original), 2.5);
    for (const auto& [label, jpeg] :
         {std::pair{std::string(name), original},
          std::pair{std::string(name) + " x2.5", encode(big, TJSAMP_420, 90)}}) {
      const fs::path file = dir / (std::to_string(i++) + ".jpg");
      write_bytes(file, jpeg);
      const Image full = turbo_decode(jpeg);
      for (std::uint64_t seed = 0; seed < 8; ++seed) {
        const ferry::detail::ImagePlan p =
            ferry::detail::plan_image(full.width, full.height, o, seed);
        const double need_x = o.width / (p.x1 - p.x0);
        const double need_y = o.height / (p.y1 - p.y0);
        const fs::path out = dir / (std::to_string(cases.size()) + ".pil");
        cases.push_back(
            {label, jpeg, seed,
             ferry::detail::pick_jpeg_scale(need_x, need_y, ferry::detail::kRandomCropCover).denom,
             ferry::detail::pick_jpeg_scale(need_x, need_y).denom, out});
        listing << file.string() << " " << p.x0 << " " << p.y0 << " " << p.x1 << " " << p.y1 << " "
                << (p.flip ? 1 : 0) << " " << out.string() << "\n";
      }
    }
  }
  listing.close();
  const std::string command =
      python + " " + kScript.string() + " --crops " + (dir / "crops.txt").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  int scaled = 0, newly_scaled = 0;
  double worst = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " seed " + std::to_string(c.seed));
    const Bytes pil = read_bytes(c.out);
    ASSERT_EQ(pil.size(), std::size_t{224} * 224 * 3);
    const double diff = mean_abs_diff(decode(c.jpeg, o, c.seed), pil);
    EXPECT_LE(diff, 1.0) << "decoded at 1/" << c.denom;
    worst = std::max(worst, diff);
    scaled += c.denom > 1;
    newly_scaled += c.denom != c.eval_denom;
  }
  std::printf(
      "  %zu crops, %d DCT-scaled (%d only at 1.5x cover), worst mean |ferry - PIL| = %.3f\n",
      cases.size(), scaled, newly_scaled, worst);
  EXPECT_GE(newly_scaled, 3);  // the crops that the 1.5x rule newly scales are among them
  fs::remove_all(dir);
}

}  // namespace
