#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/staging.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::DType;
using ferry::TokenDataset;
using ferry::TokenOptions;
using ferry::testing::expect_error;

using Bytes = std::vector<std::uint8_t>;

// Little-endian bytes of `values` as `t` (an integer dtype), each value cut to its width.
Bytes le_bytes(const std::vector<std::int64_t>& values, DType t) {
  Bytes out;
  const std::size_t size = ferry::dtype_size(t);
  for (const std::int64_t v : values) {
    const auto u = static_cast<std::uint64_t>(v);
    for (std::size_t b = 0; b < size; ++b) out.push_back(static_cast<std::uint8_t>(u >> (8 * b)));
  }
  return out;
}

// An llm.c shard: 256 int32 (magic, version, count, zeros) and then `data`.
Bytes llmc(std::int32_t magic, std::int32_t version, std::int32_t count, const Bytes& data) {
  std::vector<std::int64_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  Bytes out = le_bytes(header, DType::i32);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

Bytes llmc_u16(const std::vector<std::int64_t>& tokens) {
  return llmc(20240520, 1, static_cast<std::int32_t>(tokens.size()), le_bytes(tokens, DType::u16));
}

// A .npy file of format `major`.0 whose header is the dict text `dict`, padded as NumPy pads it
// (spaces, then a newline, to a multiple of 64 bytes), then `data`.
Bytes npy(const std::string& dict, const Bytes& data, int major = 1) {
  const std::size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  const Bytes len =
      le_bytes({static_cast<std::int64_t>(header.size())}, major == 1 ? DType::u16 : DType::u32);
  out.insert(out.end(), len.begin(), len.end());
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::string npy_dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// Tokens 0, 1, ... of a file, with distinct values per file: base + i * 7 (mod `modulo`).
std::vector<std::int64_t> tokens(std::size_t n, std::int64_t base = 0,
                                 std::int64_t modulo = 65536) {
  std::vector<std::int64_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = (base + static_cast<std::int64_t>(i) * 7) % modulo;
  return t;
}

TokenOptions small(std::int64_t seq_len = 4, std::int64_t stride = 0, DType dtype = DType::i64) {
  TokenOptions o;
  o.seq_len = seq_len;
  o.stride = stride;
  o.dtype = dtype;
  return o;
}

class TokenFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("ferry_tokens_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const Bytes& bytes) {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // Refused at open with DataError naming TokenDataset, the file and `parts`.
  static void expect_bad(const fs::path& file, std::initializer_list<std::string_view> parts,
                         TokenOptions o = small()) {
    const std::string m =
        expect_error<DataError>([&] { (void)TokenDataset::open({file}, o); }, parts);
    EXPECT_NE(m.find("TokenDataset: " + file.string() + ": "), std::string::npos) << m;
  }

  fs::path dir_;
};

// Window `index` of `ds` as read() writes it, widened to int64: (input, target).
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> window(const TokenDataset& ds,
                                                                       std::size_t index) {
  const auto fields = ds.fields();
  const ferry::detail::SlotLayout layout(fields, 1);
  std::vector<std::byte> slot(layout.bytes);
  ds.read(index, ferry::detail::SampleRefs::make(&layout, slot.data(), 0, 0));
  const auto t = static_cast<std::size_t>(ds.options().seq_len);
  std::vector<std::int64_t> in(t), out(t);
  ferry::convert(slot.data() + layout.offsets[0], fields[0].dtype, in.data(), DType::i64, t);
  ferry::convert(slot.data() + layout.offsets[1], fields[1].dtype, out.data(), DType::i64, t);
  return {in, out};
}

// Checks every window of a one-file dataset against `toks`: starts 0, stride, 2 stride, ...
void expect_windows(const TokenDataset& ds, const std::vector<std::int64_t>& toks) {
  const auto t = static_cast<std::size_t>(ds.options().seq_len);
  const auto stride = static_cast<std::size_t>(ds.options().stride);
  const std::size_t expected = toks.size() < t + 1 ? 0 : (toks.size() - t - 1) / stride + 1;
  ASSERT_EQ(ds.size(), expected);
  for (std::size_t i = 0; i < ds.size(); ++i) {
    const auto [in, out] = window(ds, i);
    const auto s = static_cast<std::ptrdiff_t>(i * stride);
    const auto tt = static_cast<std::ptrdiff_t>(t);
    EXPECT_EQ(in, std::vector<std::int64_t>(toks.begin() + s, toks.begin() + s + tt)) << i;
    EXPECT_EQ(out, std::vector<std::int64_t>(toks.begin() + s + 1, toks.begin() + s + tt + 1)) << i;
  }
}

TEST_F(TokenFiles, LlmcU16ShardGivesInputAndTargetShiftedByOne) {
  const auto toks = tokens(100, 65000);  // values wrap past 65535: the whole u16 range
  const fs::path f = write("shard_000.bin", llmc_u16(toks));
  for (const DType out : {DType::i64, DType::i32}) {
    const auto ds = TokenDataset::open({f}, small(8, 0, out));
    EXPECT_EQ(ds->fields(),
              (std::vector<ferry::FieldSpec>{{"input", out, {8}}, {"target", out, {8}}}));
    EXPECT_EQ(ds->options().stride, 8);  // 0 became seq_len
    EXPECT_EQ(ds->num_tokens(), 100U);
    EXPECT_EQ(ds->num_files(), 1U);
    EXPECT_EQ(ds->file_dtype(0), DType::u16);
    EXPECT_EQ(ds->size(), (100U - 9) / 8 + 1);
    expect_windows(*ds, toks);
  }
}

TEST_F(TokenFiles, LlmcU32ShardOfVersionSevenOrOne) {
  const std::vector<std::int64_t> toks = {0, 1, 65536, 0x7fffffff, 0x80000000, 0xffffffff, 5, 6};
  const Bytes data = le_bytes(toks, DType::u32);
  for (const std::int32_t version : {7, 1}) {
    const fs::path f = write("llama.bin", llmc(20240801, version, 8, data));
    const auto ds = TokenDataset::open({f}, small(2, 1));
    EXPECT_EQ(ds->file_dtype(0), DType::u32);
    expect_windows(*ds, toks);
  }
}

TEST_F(TokenFiles, NpyFilesOfEveryTokenTypeAndFormatVersion) {
  struct Case {
    const char* descr;
    DType dtype;
  };
  const Case cases[] = {{"|u1", DType::u8},
                        {"<u2", DType::u16},
                        {"<u4", DType::u32},
                        {"<i4", DType::i32},
                        {"<i8", DType::i64}};
  for (const Case& c : cases) {
    for (const int major : {1, 2, 3}) {
      auto toks = tokens(23, 3, c.dtype == DType::u8 ? 256 : 65536);
      if (c.dtype == DType::u32) toks[5] = 0xfffffffe;
      if (c.dtype == DType::i32) toks[5] = -2147483648LL;  // negative ids (ignore indices) stay
      if (c.dtype == DType::i64) toks[5] = std::int64_t{1} << 40;
      const fs::path f =
          write("t.npy", npy(npy_dict(c.descr, "(23,)"), le_bytes(toks, c.dtype), major));
      const auto ds = TokenDataset::open({f}, small(5, 3));
      EXPECT_EQ(ds->file_dtype(0), c.dtype) << c.descr;
      EXPECT_EQ(ds->num_tokens(), 23U);
      SCOPED_TRACE(std::string(c.descr) + " version " + std::to_string(major));
      expect_windows(*ds, toks);
    }
  }
}

TEST_F(TokenFiles, NpyHeaderIsParsedAsAPythonDictInAnyKeyOrderAndQuoting) {
  const auto toks = tokens(10);
  const Bytes data = le_bytes(toks, DType::u16);
  const std::string dicts[] = {
      "{'shape': (10,), 'fortran_order': False, 'descr': '<u2'}",
      "{\"descr\":\"<u2\",\"fortran_order\":False,\"shape\":(10,)}",
      "{ 'descr' : '<u2' ,\n 'fortran_order' : True , 'shape' : ( 10 , ) , }",  // 1-D: same bytes
      "{'descr': '<u2', 'fortran_order': False, 'shape': (10L,), }",            // Python 2
  };
  for (const std::string& d : dicts) {
    const auto ds = TokenDataset::open({write("h.npy", npy(d, data))}, small(3, 1));
    SCOPED_TRACE(d);
    expect_windows(*ds, toks);
  }
  // The magic decides, not the name.
  const auto ds =
      TokenDataset::open({write("named.bin", npy(npy_dict("<u2", "(10,)"), data))}, small(3, 1));
  expect_windows(*ds, toks);
}

TEST_F(TokenFiles, RawFilesOfEveryRawDtype) {
  for (const DType t : {DType::u8, DType::u16, DType::u32, DType::i32, DType::i64}) {
    auto toks = tokens(40, 1, t == DType::u8 ? 256 : 65536);
    if (t == DType::i64) toks[3] = -5;
    TokenOptions o = small(6, 5);
    o.raw_dtype = t;
    const auto ds = TokenDataset::open({write("train.bin", le_bytes(toks, t))}, o);
    EXPECT_EQ(ds->file_dtype(0), t);
    SCOPED_TRACE(std::string(ferry::dtype_name(t)));
    expect_windows(*ds, toks);
  }
  // u16 is the default, as nanoGPT writes.
  const auto toks = tokens(9);
  TokenOptions o = small(2, 1);
  const auto ds = TokenDataset::open({write("val.bin", le_bytes(toks, DType::u16))}, o);
  EXPECT_EQ(ds->file_dtype(0), DType::u16);
  expect_windows(*ds, toks);
}

TEST_F(TokenFiles, WindowCountsAtTheBoundaries) {
  // n tokens, seq_len T, stride S: (n - T - 1) / S + 1 windows, none when n < T + 1.
  struct Case {
    std::size_t n;
    std::int64_t t, stride;
    std::size_t windows;
  };
  const Case cases[] = {
      {5, 4, 0, 1},    {6, 4, 0, 1},    {8, 4, 0, 1},     {9, 4, 0, 2},   {4, 4, 0, 0},
      {5, 4, 1, 1},    {6, 4, 1, 2},    {10, 4, 1, 6},    {10, 4, 3, 2},  {11, 4, 3, 3},
      {12, 4, 9, 1},   {14, 4, 9, 2},   {2, 1, 0, 1},     {3, 1, 0, 2},   {1, 1, 0, 0},
      {100, 1, 1, 99}, {100, 99, 0, 1}, {100, 60, 1, 40}, {60, 60, 1, 0}, {30, 3, 100, 1},
  };
  const fs::path other = write("other.bin", le_bytes(tokens(64), DType::u16));  // >= 1 window
  for (const Case& c : cases) {
    const auto toks = tokens(c.n);
    const fs::path f = write("f.bin", le_bytes(toks, DType::u16));
    SCOPED_TRACE("n " + std::to_string(c.n) + " T " + std::to_string(c.t) + " stride " +
                 std::to_string(c.stride));
    const auto ds = TokenDataset::open({f, other}, small(c.t, c.stride));
    EXPECT_EQ(ds->file_windows(0), c.windows);
    EXPECT_EQ(ds->file_tokens(0), c.n);
    if (c.windows > 0) {
      const auto alone = TokenDataset::open({f}, small(c.t, c.stride));
      expect_windows(*alone, toks);
    }
  }
}

TEST_F(TokenFiles, SamplesCountTheFilesInTheOrderGivenAndNeverCrossThem) {
  // Files of 0, 3, 0, 1, 5 windows (T 4, stride 2): a file too short anywhere is skipped.
  const std::vector<std::size_t> lengths = {3, 10, 4, 5, 13};
  std::vector<fs::path> files;
  std::vector<std::vector<std::int64_t>> contents;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    contents.push_back(tokens(lengths[i], static_cast<std::int64_t>(1000 * (i + 1))));
    const std::string name = "part" + std::to_string(i);
    files.push_back(i % 2 == 0 ? write(name + ".npy",
                                       npy(npy_dict("<u2", "(" + std::to_string(lengths[i]) + ",)"),
                                           le_bytes(contents[i], DType::u16)))
                               : write(name + ".bin", llmc_u16(contents[i])));
  }
  const auto ds = TokenDataset::open(files, small(4, 2, DType::i32));
  EXPECT_EQ(ds->size(), 0U + 3 + 0 + 1 + 5);
  EXPECT_EQ(ds->num_tokens(), 3U + 10 + 4 + 5 + 13);
  EXPECT_EQ(ds->num_files(), 5U);
  EXPECT_EQ(ds->files(), files);
  std::size_t index = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    EXPECT_EQ(ds->file_tokens(f), lengths[f]);
    for (std::size_t w = 0; w < ds->file_windows(f); ++w, ++index) {
      const auto [in, out] = window(*ds, index);
      const auto s = static_cast<std::ptrdiff_t>(2 * w);
      const auto& c = contents[f];
      EXPECT_EQ(in, std::vector<std::int64_t>(c.begin() + s, c.begin() + s + 4)) << index;
      EXPECT_EQ(out, std::vector<std::int64_t>(c.begin() + s + 1, c.begin() + s + 5)) << index;
    }
  }
  EXPECT_EQ(index, ds->size());
  expect_error<ConfigError>([&] { (void)window(*ds, ds->size()); },
                            {"TokenDataset", "sample index 9 out of range (9 windows)"});
  expect_error<ConfigError>([&] { (void)ds->file_tokens(5); }, {"file 5 out of range (5 files)"});
}

TEST_F(TokenFiles, ThroughALoaderEveryWindowArrivesOnceAndExact) {
  std::vector<fs::path> files;
  std::vector<std::vector<std::int64_t>> contents;
  for (std::size_t i = 0; i < 3; ++i) {
    contents.push_back(tokens(200 + 37 * i, static_cast<std::int64_t>(i * 5000)));
    files.push_back(write("s" + std::to_string(i) + ".bin", llmc_u16(contents[i])));
  }
  const auto ds = TokenDataset::open(files, small(16, 5));
  // Where each window lies: (file, start).
  std::vector<std::pair<std::size_t, std::size_t>> where;
  for (std::size_t f = 0; f < 3; ++f) {
    for (std::size_t w = 0; w < ds->file_windows(f); ++w) where.emplace_back(f, w * 5);
  }
  ASSERT_EQ(where.size(), ds->size());
  ferry::LoaderOptions lo;
  lo.batch_size = 7;
  lo.shuffle = true;
  lo.seed = 11;
  lo.workers = 2;
  lo.device = ferry::Device::cpu();
  ferry::Loader loader(ds, lo);
  std::set<std::uint64_t> seen;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const ferry::Tensor& in = b["input"];
    const ferry::Tensor& out = b["target"];
    ASSERT_EQ(in.dtype(), DType::i64);
    ASSERT_EQ(in.shape(), (std::vector<std::int64_t>{static_cast<std::int64_t>(b.size()), 16}));
    for (std::size_t j = 0; j < b.size(); ++j) {
      const std::uint64_t i = b.indices()[j];
      EXPECT_TRUE(seen.insert(i).second) << i;
      const auto [f, s] = where[i];
      const auto& c = contents[f];
      for (std::size_t k = 0; k < 16; ++k) {
        ASSERT_EQ(in.data<std::int64_t>()[j * 16 + k], c[s + k]) << "window " << i;
        ASSERT_EQ(out.data<std::int64_t>()[j * 16 + k], c[s + k + 1]) << "window " << i;
      }
    }
  }
  EXPECT_EQ(seen.size(), ds->size());
}

TEST_F(TokenFiles, TokensBeyondI32AreADataErrorAtReadNamingFileAndToken) {
  // u32 tokens: 0x80000000 does not fit i32; i64 takes it.
  const std::vector<std::int64_t> toks = {1, 2, 3, 4, 5, 0x80000000, 7, 8, 9};
  const fs::path f = write("big.bin", llmc(20240801, 7, 9, le_bytes(toks, DType::u32)));
  const auto ds = TokenDataset::open({f}, small(4, 0, DType::i32));
  ASSERT_EQ(ds->size(), 2U);
  EXPECT_EQ(window(*ds, 0).second, (std::vector<std::int64_t>{2, 3, 4, 5}));  // fits
  expect_error<DataError>(
      [&] { (void)window(*ds, 1); },
      {"TokenDataset: " + f.string(), "byte 1044", "token 5 ", "2147483648", "beyond i32"});
  expect_windows(*TokenDataset::open({f}, small(4, 0, DType::i64)), toks);

  // i64 tokens in a .npy, beyond i32 either way; the target's last token is checked too.
  const std::vector<std::int64_t> wide = {1, 2, 3, 4, -2147483649LL};
  const fs::path g = write("wide.npy", npy(npy_dict("<i8", "(5,)"), le_bytes(wide, DType::i64)));
  expect_error<DataError>(
      [&] { (void)window(*TokenDataset::open({g}, small(4, 0, DType::i32)), 0); },
      {g.string(), "token 4 ", "-2147483649", "beyond i32"});

  // Through a loader: the epoch stops with the error naming the sample.
  ferry::LoaderOptions lo;
  lo.batch_size = 1;
  lo.workers = 1;
  lo.device = ferry::Device::cpu();
  ferry::Loader loader(ds, lo);
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : loader.epoch(0)) (void)b;
      },
      {"big.bin", "token 5 ", "sample 1"});
}

TEST_F(TokenFiles, LlmcHeadersThatAreWrongOrCutShortAreDataErrors) {
  const Bytes data = le_bytes(tokens(10), DType::u16);
  // Cut inside the header.
  Bytes cut = llmc(20240520, 1, 10, data);
  cut.resize(700);
  expect_bad(write("cut.bin", cut), {"cut short", "700 bytes", "1024"});
  expect_bad(write("v2.bin", llmc(20240520, 2, 10, data)), {"byte 4", "version 2", "expected 1"});
  expect_bad(write("v7.bin", llmc(20240520, 7, 10, data)), {"version 7", "expected 1"});
  expect_bad(write("v3.bin", llmc(20240801, 3, 5, le_bytes(tokens(5), DType::u32))),
             {"version 3", "expected 7 (or 1)"});
  expect_bad(write("neg.bin", llmc(20240520, 1, -4, data)), {"byte 8", "negative token count"});
  // A count beyond the file, and one short of it (bytes left over).
  expect_bad(write("more.bin", llmc(20240520, 1, 11, data)),
             {"says 11 u16 tokens (22 bytes", "the file has 20", "cut short"});
  expect_bad(write("less.bin", llmc(20240520, 1, 9, data)),
             {"says 9 u16 tokens", "the file has 20", "beyond the tokens"});
  expect_bad(write("huge.bin", llmc(20240520, 1, std::numeric_limits<std::int32_t>::max(), data)),
             {"2147483647", "the file has 20"});
  // An odd byte length: half a token at the end.
  Bytes odd = llmc(20240520, 1, 10, data);
  odd.push_back(7);
  expect_bad(write("odd.bin", odd), {"says 10 u16 tokens", "the file has 21"});
  Bytes odd32 = llmc(20240801, 7, 2, le_bytes({1, 2}, DType::u32));
  odd32.pop_back();
  expect_bad(write("odd32.bin", odd32), {"says 2 u32 tokens (8 bytes", "the file has 7"});
}

TEST_F(TokenFiles, NpyFilesThatAreWrongAreDataErrors) {
  const Bytes data = le_bytes(tokens(10), DType::u16);
  const std::string good = npy_dict("<u2", "(10,)");
  expect_bad(write("notnpy.npy", data), {"byte 0", "not a NumPy .npy file"});
  expect_bad(write("tiny.npy", {0x93, 'N', 'U'}), {"not a NumPy .npy file", "3 bytes"});
  Bytes v4 = npy(good, data);
  v4[6] = 4;
  expect_bad(write("v4.npy", v4), {"byte 6", "unsupported .npy format version 4.0"});
  Bytes long_header = npy(good, data);
  long_header[8] = 0xff;
  long_header[9] = 0xff;
  expect_bad(write("len.npy", long_header), {"byte 8", "header of 65535 bytes runs past the end"});
  const Bytes v2_cut = {0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0};
  expect_bad(write("v2cut.npy", v2_cut), {"cut short"});

  expect_bad(write("be.npy", npy(npy_dict(">u2", "(10,)"), data)), {"'>u2'", "big-endian"});
  expect_bad(write("native.npy", npy(npy_dict("=u2", "(10,)"), data)),
             {"'=u2'", "not little-endian"});
  expect_bad(write("f4.npy", npy(npy_dict("<f4", "(5,)"), data)),
             {"'<f4'", "u1, u2, u4, i4 or i8"});
  expect_bad(write("i2.npy", npy(npy_dict("<i2", "(10,)"), data)), {"'<i2'"});
  expect_bad(write("u8.npy", npy(npy_dict("<u8", "(10,)"), data)), {"'<u8'"});
  expect_bad(
      write("struct.npy",
            npy("{'descr': [('a', '<u2')], 'fortran_order': False, 'shape': (10,), }", data)),
      {"bad .npy header", "'descr' is not a string"});
  expect_bad(write("2d.npy", npy(npy_dict("<u2", "(2, 5)"), data)), {"shape (2, 5)", "2-D"});
  expect_bad(write("0d.npy", npy(npy_dict("<u2", "()"), data)), {"shape ()", "0-D"});
  expect_bad(write("short.npy", npy(npy_dict("<u2", "(11,)"), data)),
             {"shape (11,)", "22 bytes of data", "has 20", "cut short"});
  expect_bad(write("long.npy", npy(npy_dict("<u2", "(9,)"), data)),
             {"shape (9,)", "18 bytes of data", "has 20"});
  expect_bad(write("overflow.npy", npy(npy_dict("<i8", "(4611686018427387904,)"), data)),
             {"4611686018427387904", "does not fit"});
  expect_bad(write("beyond64.npy", npy(npy_dict("<u2", "(99999999999999999999,)"), data)),
             {"beyond 2^64"});
  expect_bad(write("negative.npy", npy(npy_dict("<u2", "(-10,)"), data)), {"non-negative integer"});

  // The dict itself.
  const std::pair<std::string, std::string_view> dicts[] = {
      {"'descr': '<u2'", "expected the header dict's '{'"},
      {"{'descr': '<u2', 'fortran_order': False}", "no 'shape'"},
      {"{'descr': '<u2', 'shape': (10,)}", "no 'fortran_order'"},
      {"{'fortran_order': False, 'shape': (10,)}", "no 'descr'"},
      {"{'descr': '<u2', 'descr': '<u2', 'fortran_order': False, 'shape': (10,)}",
       "key 'descr' appears twice"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (10,), 'x': 1}", "unexpected key 'x'"},
      {"{'descr': '<u2', 'fortran_order': 0, 'shape': (10,)}", "not True or False"},
      {"{'descr': '<u2, 'fortran_order': False, 'shape': (10,)}", "expected ',' or '}'"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (10,)", "expected ',' or '}'"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (10)}", "a number, not a tuple"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (10,)} x", "unexpected text after"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': (10 11)}", "expected ',' or ')'"},
      {"{'descr': '<u2', 'fortran_order': False, 'shape': [10]}", "expected '(' of the shape"},
      {"{descr: '<u2'}", "expected a key in quotes"},
      {"{'descr': '<u\\x32', 'fortran_order': False, 'shape': (10,)}", "escapes"},
      {"{'descr", "is not closed"},
  };
  for (const auto& [dict, what] : dicts) {
    SCOPED_TRACE(dict);
    expect_bad(write("dict.npy", npy(dict, data)), {"bad .npy header", what});
  }
}

TEST_F(TokenFiles, RawFilesOfAnOddLengthAndMissingFilesAreDataErrors) {
  expect_bad(write("odd.bin", {1, 0, 2, 0, 3}),
             {"5 bytes is not a whole number of u16 tokens of 2 bytes", "raw_dtype"});
  TokenOptions o = small();
  o.raw_dtype = DType::i64;
  expect_bad(write("odd64.bin", Bytes(44, 0)), {"44 bytes", "i64 tokens of 8 bytes"}, o);
  expect_bad(dir_ / "absent.bin", {"cannot open"});
  expect_bad(dir_, {"folder"});
  // The good files before a bad one do not make it acceptable.
  const fs::path fine = write("fine.bin", le_bytes(tokens(50), DType::u16));
  const fs::path bad = write("bad.bin", {1, 2, 3});
  const std::string m = expect_error<DataError>(
      [&] {
        (void)TokenDataset::open({fine, bad}, small());
      },
      {"bad.bin"});
  EXPECT_EQ(m.find("fine.bin"), std::string::npos) << m;
}

TEST_F(TokenFiles, OptionsMisuseIsAConfigError) {
  const fs::path f = write("f.bin", le_bytes(tokens(50), DType::u16));
  const auto refused = [&](TokenOptions o, std::initializer_list<std::string_view> parts) {
    expect_error<ConfigError>([&] { (void)TokenDataset::open({f}, o); }, parts);
  };
  refused(small(0), {"TokenDataset", "seq_len is 0", "at least 1"});
  refused(small(-3), {"seq_len is -3"});
  refused(small(4, -1), {"stride is -1"});
  for (const DType t :
       {DType::u8, DType::u16, DType::u32, DType::f32, DType::f16, DType::bf16, DType::f64}) {
    refused(small(4, 0, t),
            {"TokenOptions::dtype is " + std::string(ferry::dtype_name(t)), "i32 or i64"});
  }
  refused(small(4, 0, static_cast<DType>(42)), {"dtype is dtype 42"});
  for (const DType t : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
    TokenOptions o = small();
    o.raw_dtype = t;
    refused(o, {"raw_dtype is " + std::string(ferry::dtype_name(t)), "an integer type"});
  }
  refused(small(std::numeric_limits<std::int64_t>::max()),
          {"seq_len 9223372036854775807 needs 9223372036854775808 tokens"});
  expect_error<ConfigError>([&] { (void)TokenDataset::open({}, small()); }, {"no files"});
  // Files too short for one window: the message says what one needs and what the longest has.
  const fs::path g = write("g.bin", le_bytes(tokens(7), DType::u16));
  expect_error<ConfigError>(
      [&] {
        (void)TokenDataset::open({g, f}, small(64));
      },
      {"seq_len 64 needs 65 tokens", "longest of the 2 files", "f.bin", "has 50"});
}

}  // namespace
