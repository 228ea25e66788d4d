// How ferry opens and writes files (lib/datasets/common/): OpenFile, the one way to open a file
// to read, opens without blocking and refuses whatever is not a regular file (a FIFO, a
// symbolic link to one, a folder, a device), checked on the descriptor it opened; the
// AtomicFileWriter writes through an exclusive temporary file that nothing planted can redirect
// or block, renamed over the target, and leaves nothing behind on failure; every dataset's
// open() refuses a FIFO at any of its names without waiting on it. And the one rule for integer
// text (integer_text.hpp). A test that could hang (a FIFO opened by mistake) runs under a
// watchdog that aborts the process instead.

#include "datasets/common/file_io.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <vector>

#include "datasets/common/atomic_file.hpp"
#include "datasets/common/integer_text.hpp"
#include "datasets/image/image_decode.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::detail::AtomicFileWriter;
using ferry::detail::FileLabel;
using ferry::detail::IntegerText;
using ferry::detail::OpenFile;
using ferry::detail::parse_integer_text;
using ferry::testing::expect_error;

namespace {

// Runs f on another thread; a test that hangs fails and aborts instead of waiting for ever.
template <class F>
void within(std::chrono::seconds limit, F f) {
  auto done = std::async(std::launch::async, std::move(f));
  if (done.wait_for(limit) == std::future_status::timeout) {
    ADD_FAILURE() << "timed out after " << limit.count() << " s: something blocked on a file";
    std::fflush(nullptr);
    std::abort();
  }
  done.get();
}

class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           (std::string("ferry-fileio-") + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(const std::string& name, const std::string& bytes) const {
    fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  fs::path fifo(const std::string& name) const {
    fs::path p = dir_ / name;
    EXPECT_EQ(::mkfifo(p.c_str(), 0600), 0) << p;
    return p;
  }
  static std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::string bytes(static_cast<std::size_t>(fs::file_size(p)), '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return bytes;
  }
  std::set<std::string> entries() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
    return names;
  }

  fs::path dir_;
};

std::span<const std::byte> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace

// ---- OpenFile --------------------------------------------------------------------------

TEST_F(FileIo, OpenFileRefusesWhatIsNotARegularFileWithoutBlocking) {
  const fs::path file = write("f.bin", "12345");
  const fs::path pipe = fifo("pipe");
  fs::create_symlink(pipe, dir_ / "to-pipe");
  fs::create_symlink(file, dir_ / "to-file");
  fs::create_directories(dir_ / "folder");
  within(std::chrono::seconds(30), [&] {
    {
      const OpenFile f(file, {"T", "f.bin"});
      EXPECT_EQ(f.size(), 5U);
      struct stat st {};
      ASSERT_EQ(::stat(file.c_str(), &st), 0);
      EXPECT_EQ(f.mtime_ns(),
                static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
      // The descriptor does not block reads (O_NONBLOCK changes nothing for a regular file).
      std::string got(5, '\0');
      EXPECT_EQ(f.read_all({reinterpret_cast<std::byte*>(got.data()), got.size()}), 5U);
      EXPECT_EQ(got, "12345");
    }
    EXPECT_EQ(OpenFile(dir_ / "to-file", {"T", "to-file"}).size(), 5U);  // a link to a file
    expect_error<DataError>(
        [&] {
          OpenFile(pipe, {"T", "pipe"});
        },
        {"T: pipe: cannot read: not a regular file"});
    expect_error<DataError>(
        [&] {
          OpenFile(dir_ / "to-pipe", {"T", "to-pipe"});
        },
        {"T: to-pipe: cannot read: not a regular file"});
    expect_error<DataError>(
        [&] {
          OpenFile(dir_ / "folder", {"T", "folder"});
        },
        {"T: folder: cannot read: it is a folder"});
    expect_error<DataError>(
        [&] {
          OpenFile("/dev/null", {"T", "/dev/null"});
        },
        {"T: /dev/null: cannot read: not a regular file"});
    expect_error<DataError>(
        [&] {
          OpenFile(dir_ / "absent", {"T", "absent"});
        },
        {"T: absent: cannot open: No such file or directory"});
  });
}

TEST_F(FileIo, OpenFileGivesItsDescriptorAwayOnce) {
  const fs::path file = write("f.bin", "abc");
  int fd = -1;
  {
    OpenFile f(file, {"T", "f.bin"});
    ferry::detail::FileDescriptor kept = f.take();
    EXPECT_EQ(f.descriptor(), -1);
    fd = kept.get();
    EXPECT_GE(::fcntl(fd, F_GETFD), 0);  // still open after the OpenFile went
    ferry::detail::FileDescriptor moved = std::move(kept);
    EXPECT_FALSE(kept);  // NOLINT(bugprone-use-after-move): the moved-from one is empty
    EXPECT_EQ(moved.get(), fd);
  }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // closed by its last owner
}

// ---- AtomicFileWriter ----------------------------------------------------------------------

TEST_F(FileIo, AtomicWriteReplacesTheTargetAndLeavesNothingElse) {
  const fs::path target = dir_ / "out.idx";
  ferry::detail::write_file_atomically(target, bytes_of("first"), {"", "out.idx"});
  EXPECT_EQ(slurp(target), "first");
  ferry::detail::write_file_atomically(target, bytes_of("second"), {"", "out.idx"});
  EXPECT_EQ(slurp(target), "second");
  EXPECT_EQ(entries(), (std::set<std::string>{"out.idx"}));
  // The mode is 0644 less the umask, not mkstemp's 0600: others read an index as they read the
  // shard.
  const mode_t mask = ::umask(022);
  ::umask(mask);
  EXPECT_EQ(fs::status(target).permissions(),
            static_cast<fs::perms>(0644 & ~mask) & fs::perms::mask);
}

TEST_F(FileIo, TemporaryNamesAreUnpredictableAndExclusive) {
  const fs::path target = dir_ / "out.idx";
  AtomicFileWriter a(target, {"", "out.idx"});
  AtomicFileWriter b(target, {"", "out.idx"});
  EXPECT_NE(a.temporary(), b.temporary());
  EXPECT_EQ(a.temporary().parent_path(), dir_);  // beside the target: the rename is atomic
  const std::string name = a.temporary().filename().string();
  EXPECT_EQ(name.rfind(".out.idx.", 0), 0U) << name;
  EXPECT_EQ(name.size(), std::string(".out.idx.").size() + 16 + 4) << name;
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(a.temporary())));
  // Nothing was written through the old predictable name.
  EXPECT_FALSE(fs::exists(dir_ / ("out.idx.tmp" + std::to_string(::getpid()))));
}

TEST_F(FileIo, PlantedLinksAndFifosNeitherRedirectNorBlockAWrite) {
  const fs::path victim = write("victim", "keep me");
  const fs::path target = dir_ / "out.idx";
  // A symbolic link at the target is replaced, never followed.
  fs::create_symlink(victim, target);
  within(std::chrono::seconds(30), [&] {
    ferry::detail::write_file_atomically(target, bytes_of("index"), {"", "out.idx"});
  });
  EXPECT_EQ(slurp(victim), "keep me");
  EXPECT_FALSE(fs::is_symlink(target));
  EXPECT_EQ(slurp(target), "index");
  // A FIFO at the target is replaced too, without a reader ever being waited for.
  fs::remove(target);
  fifo("out.idx");
  within(std::chrono::seconds(30), [&] {
    ferry::detail::write_file_atomically(target, bytes_of("index 2"), {"", "out.idx"});
  });
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(target)));
  EXPECT_EQ(slurp(target), "index 2");
  EXPECT_EQ(entries(), (std::set<std::string>{"out.idx", "victim"}));
}

TEST_F(FileIo, AFailedWriteRemovesItsTemporaryFile) {
  // The target's name is a folder with something in it: the rename fails.
  fs::create_directories(dir_ / "out.idx" / "taken");
  expect_error<DataError>(
      [&] {
        ferry::detail::write_file_atomically(dir_ / "out.idx", bytes_of("x"), {"", "out.idx"});
      },
      {"out.idx: cannot write: "});
  EXPECT_EQ(entries(), (std::set<std::string>{"out.idx"}));
  // A writer that is never committed (an error between its writes) leaves nothing either.
  {
    AtomicFileWriter w(dir_ / "other", {"", "other"});
    w.write(bytes_of("half"));
    EXPECT_TRUE(fs::exists(w.temporary()));
  }
  EXPECT_EQ(entries(), (std::set<std::string>{"out.idx"}));
  // A folder that does not exist: nothing to remove, an error naming the target.
  expect_error<DataError>(
      [&] {
        ferry::detail::write_file_atomically(dir_ / "absent" / "x", bytes_of("x"), {"", "x"});
      },
      {"x: cannot write: No such file or directory"});
}

// ---- every dataset's open() --------------------------------------------------------------

TEST_F(FileIo, EveryDatasetRefusesAFifoAtItsFilesWithoutBlocking) {
  const fs::path pipe = fifo("pipe");
  fs::create_symlink(pipe, dir_ / "link");
  within(std::chrono::seconds(60), [&] {
    for (const fs::path& p : {pipe, dir_ / "link"}) {
      const std::string s = p.string();
      expect_error<DataError>([&] { ferry::CsvDataset::open(p); },
                              {"CsvDataset", s, "not a regular file"});
      expect_error<DataError>([&] { ferry::TokenDataset::open({p}); },
                              {"TokenDataset", s, "not a regular file"});
      expect_error<DataError>([&] { ferry::WebDataset::open({p}); },
                              {"WebDataset", s, "not a regular file"});
      // One 1 x 1 image, so that the labels' FIFO is the first fault.
      const fs::path images =
          write("images", std::string("\0\0\x08\x03\0\0\0\x01\0\0\0\x01\0\0\0\x01\x05", 17));
      expect_error<DataError>([&] { ferry::IdxDataset::open(p, images); },
                              {"IdxDataset", s, "not a regular file"});
      expect_error<DataError>([&] { ferry::IdxDataset::open(images, p); },
                              {"IdxDataset", s, "not a regular file"});
      std::vector<std::uint8_t> out(4 * 4 * 3);
      ferry::ImageOptions o;
      o.height = 4;
      o.width = 4;
      expect_error<DataError>([&] { ferry::decode_image_file(p, o, 0, out); },
                              {s, "not a regular file"});
    }
  });
}

// ---- buffers released after a failure ------------------------------------------------------

TEST_F(FileIo, ALargeFileThatFailsToDecodeLeavesNoLargeScratch) {
  // 20 MiB that are no image: read whole into this thread's file buffer, then refused by the
  // decoder. The buffer, over the 16 MiB kept between images, goes with the failure.
  const fs::path big = write("big.png", std::string(std::size_t{20} << 20, 'x'));
  std::vector<std::uint8_t> out(4 * 4 * 3);
  ferry::ImageOptions o;
  o.height = 4;
  o.width = 4;
  expect_error<DataError>([&] { ferry::decode_image_file(big, o, 0, out); },
                          {big.string(), "not a JPEG or PNG"});
  EXPECT_LE(ferry::detail::decode_scratch_bytes(), ferry::detail::kScratchKeepBytes);
}

// ---- integer text ------------------------------------------------------------------------

static_assert(parse_integer_text("0").kind == IntegerText::ok);
static_assert(parse_integer_text("-9223372036854775808").value == INT64_MIN);
static_assert(parse_integer_text("9223372036854775807").value == INT64_MAX);
static_assert(parse_integer_text("9223372036854775808").kind == IntegerText::too_large);
static_assert(parse_integer_text("-9223372036854775809").kind == IntegerText::too_small);

TEST(IntegerText, OnlyWhatToStringWritesIsAnInteger) {
  for (const std::int64_t v : {std::int64_t{0}, std::int64_t{5}, std::int64_t{-5},
                               std::int64_t{1048575}, INT64_MAX, INT64_MIN}) {
    const auto p = parse_integer_text(std::to_string(v));
    EXPECT_EQ(p.kind, IntegerText::ok) << v;
    EXPECT_EQ(p.value, v);
  }
  for (const char* text :
       {"",    "-",   "+",   "+5",    " 5",  "5 ",  "\t5", "5\n", "05",   "00",       "-0", "-05",
        "0x5", "5.0", "5e0", "5_000", "--5", "-+5", "+-5", "5-",  "five", "\xd9\xa5", "1 2"}) {
    const auto p = parse_integer_text(text);
    EXPECT_EQ(p.kind, IntegerText::malformed) << '"' << text << '"';
    EXPECT_EQ(p.value, 0);
  }
  EXPECT_EQ(parse_integer_text(std::string_view("5\0", 2)).kind, IntegerText::malformed);
  EXPECT_EQ(parse_integer_text(std::string(400, '9')).kind, IntegerText::too_large);
  EXPECT_EQ(parse_integer_text("-" + std::string(400, '9')).kind, IntegerText::too_small);
  // Out of range is only for digits written as an integer is: anything else is malformed.
  EXPECT_EQ(parse_integer_text(std::string(400, '9') + "x").kind, IntegerText::malformed);
  EXPECT_EQ(parse_integer_text("0" + std::string(40, '9')).kind, IntegerText::malformed);
  EXPECT_EQ(ferry::detail::trim_ascii_space(" \t\r\n\v\f5\n\n"), "5");
  EXPECT_EQ(ferry::detail::trim_ascii_space(" \n "), "");
}
