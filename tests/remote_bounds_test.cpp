// The bounds of files fetched from a server (lib/datasets/remote/), against small misbehaving
// HTTP servers run here on 127.0.0.1 (a thread, a socket): a timeout counted from the last byte,
// downloads stopped at the size known (or the cache's room), file:// URLs opened as local files
// are, the cache's own files kept apart from its entries, and the optional shard index.

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "datasets/remote/range_reader.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "remote/tiny_server.hpp"
#include "webdataset/tar_bytes.hpp"

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::testing::expect_error;
using Clock = ferry::testing::TinyServer::Clock;
using ferry::testing::TinyServer;
namespace remote = ferry::detail::remote;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class RemoteBounds : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("ferry_remote_bounds_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "cache");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  ferry::RemoteOptions options(double timeout = 5, int retries = 0) const {
    ferry::RemoteOptions o;
    o.cache_dir = dir_ / "cache";
    o.retries = retries;
    o.timeout_seconds = timeout;
    o.connections = 1;
    return o;
  }
  // The cache's files that are not its own (no leading '.').
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_ / "cache")) {
      const std::string name = e.path().filename().string();
      if (name[0] != '.') names.push_back(name);
    }
    return names;
  }
  fs::path dir_;
};

std::string bytes_of(std::size_t n, char c = 'x') { return std::string(n, c); }

// ---- 1. timeout_seconds: no progress for that long ------------------------------------------

TEST_F(RemoteBounds, AStallAfterTheFirstBytesFailsAfterTimeoutSecondsNotAnAverageLater) {
  const TinyServer server([](const std::string&, int fd, const TinyServer& s) {
    TinyServer::send_all(fd,
                         "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + bytes_of(200'000));
    s.pause(15);  // then nothing
  });
  const std::string url = server.url("stall.bin");
  const auto start = Clock::now();
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{url, {}, false}}, options(1), "T");
      },
      {"T: " + url + ": cannot download", "no progress for 1 s", "RemoteOptions::timeout_seconds"});
  // 1 s without a byte, and the progress callback's period: not curl's window of seconds.
  EXPECT_LT(seconds_since(start), 3.0);
}

TEST_F(RemoteBounds, AnInfiniteOrHugeTimeoutMeansNever) {
  const std::string body = bytes_of(100'000, 'b');
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    TinyServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
                                 "\r\nConnection: close\r\n\r\n");
    s.pause(2.5);  // the body after a pause longer than an integer conversion's 1 s
    TinyServer::send_all(fd, body);
  });
  for (const double never : {std::numeric_limits<double>::infinity(), 1e300, 1e12}) {
    const std::string url = server.url("slow-" + std::to_string(std::log10(never)) + ".bin");
    const auto got = remote::fetch_files({{url, {}, false}}, options(never), "T");
    ASSERT_TRUE(got.at(0).has_value()) << never;
    EXPECT_EQ(fs::file_size(got[0]->path()), body.size()) << never;
  }
}

TEST_F(RemoteBounds, AZeroNegativeOrNanTimeoutIsAConfigErrorNamingTheOption) {
  for (const double bad : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(),
                           -std::numeric_limits<double>::infinity()}) {
    expect_error<ConfigError>(
        [&] {
          (void)remote::fetch_files({{"http://127.0.0.1:1/x", {}, false}}, options(bad), "T");
        },
        {"T: RemoteOptions::timeout_seconds", "must be > 0"});
  }
}

// ---- 2. downloads bounded by what is known ---------------------------------------------------

TEST_F(RemoteBounds, AContentLengthAboveTheKnownSizeIsRefusedAtOnce) {
  const TinyServer server([](const std::string&, int fd, const TinyServer& s) {
    TinyServer::send_all(fd,
                         "HTTP/1.1 200 OK\r\nContent-Length: 50000000\r\n\r\n" + bytes_of(1 << 20));
    s.pause(10);  // the rest comes slowly: waiting for it is what must not happen
  });
  const std::string url = server.url("big.tar");
  const auto start = Clock::now();
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{url, {}, false, 1000}}, options(30), "T");
      },
      {"T: " + url + ": cannot download", "Content-Length 50000000", "known size of 1000 bytes",
       "not retried"});
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_TRUE(entries().empty());
}

TEST_F(RemoteBounds, ABodyPastTheKnownSizeIsCutThereWithoutContentLength) {
  std::atomic<std::uint64_t> sent{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    if (!TinyServer::send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")) return;
    const std::string chunk = bytes_of(64 << 10);
    for (int i = 0; i < 3200 && !s.stopping(); ++i) {  // 200 MiB, unless stopped
      if (!TinyServer::send_all(fd, chunk)) return;
      sent += chunk.size();
    }
  });
  const std::string url = server.url("endless.tar");
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{url, {}, false, 100'000}}, options(30), "T");
      },
      {"T: " + url + ": cannot download", "more than 100000 bytes came",
       "known size of 100000 bytes"});
  EXPECT_LT(sent.load(), std::uint64_t{64} << 20);  // stopped, not read to the end
  EXPECT_TRUE(entries().empty());
}

TEST_F(RemoteBounds, AnUnknownLengthIsBoundedByTheCachesRoom) {
  const TinyServer server([](const std::string& path, int fd, const TinyServer& s) {
    if (path == "announced.csv") {
      TinyServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: 90000000\r\n\r\n");
      s.pause(10);
      return;
    }
    if (!TinyServer::send_all(fd, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")) return;
    const std::string chunk = bytes_of(64 << 10);
    for (int i = 0; i < 3200 && !s.stopping(); ++i) {
      if (!TinyServer::send_all(fd, chunk)) return;
    }
  });
  ferry::RemoteOptions o = options(30);
  o.cache_bytes = 1'000'000;
  for (const std::string name : {"endless.csv", "announced.csv"}) {
    const std::string url = server.url(name);
    const auto start = Clock::now();
    expect_error<DataError>(
        [&] {
          (void)remote::fetch_files({{url, {}, false}}, o, "T");
        },
        {"T: " + url + ": cannot download",
         "the cache's room of 1000000 bytes (RemoteOptions::cache_bytes)"});
    EXPECT_LT(seconds_since(start), 3.0) << name;
  }
  EXPECT_TRUE(entries().empty());
}

// ---- 3. file:// URLs follow the file rules -----------------------------------------------------

TEST_F(RemoteBounds, AFileUrlOfAFifoFailsAtOnceAndOfAFolderOrDeviceToo) {
  const fs::path fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string url = "file://" + fifo.string();
  auto fetched = std::async(std::launch::async, [&] {
    try {
      (void)remote::fetch_files({{url, {}, false}}, options(), "T");
      return std::string("nothing thrown");
    } catch (const DataError& e) {
      return std::string(e.what());
    }
  });
  if (fetched.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    // Blocked in open(): a writer lets it go, so that the test ends.
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "opening a FIFO named by a file:// URL blocked";
  }
  const std::string message = fetched.get();
  EXPECT_NE(message.find("T: " + url + ": cannot download"), std::string::npos) << message;
  EXPECT_NE(message.find("not a regular file"), std::string::npos) << message;

  const std::string folder = "file://" + dir_.string();
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{folder, {}, false}}, options(), "T");
      },
      {"T: " + folder + ": cannot download", "folder"});
  expect_error<DataError>([&] { (void)remote::read_head(url, 4096, options(), "T"); },
                          {"T: " + url + ": cannot download", "not a regular file"});
  // A device (an endless one, /dev/zero, would fill the cache's disk): /dev/null stands for it.
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{"file:///dev/null", {}, false}}, options(), "T");
      },
      {"T: file:///dev/null: cannot download", "not a regular file"});
  EXPECT_TRUE(entries().empty());
}

TEST_F(RemoteBounds, AFileUrlOfARegularFileIsCopiedWithinItsKnownSize) {
  const fs::path file = dir_ / "f.bin";
  std::ofstream(file, std::ios::binary) << bytes_of(5000, 'f');
  const std::string url = "file://" + file.string();
  expect_error<DataError>(
      [&] {
        (void)remote::fetch_files({{url, {}, false, 4000}}, options(), "T");
      },
      {"T: " + url + ": cannot download", "5000 bytes", "known size of 4000 bytes"});
  const auto got = remote::fetch_files({{url, {}, false, 5000}}, options(), "T");
  ASSERT_TRUE(got.at(0).has_value());
  EXPECT_EQ(fs::file_size(got[0]->path()), 5000U);
  EXPECT_EQ(remote::read_head(url, 10, options(), "T").size, 5000U);
  // An optional file that is not there gives nothing.
  const auto none =
      remote::fetch_files({{"file://" + (dir_ / "nope").string(), {}, true}}, options(), "T");
  EXPECT_FALSE(none.at(0).has_value());
}

// ---- 4. the cache's own files apart from its entries -------------------------------------------

TEST_F(RemoteBounds, AUrlEndingInTheLockOrTemporarySuffixCountsAgainstTheBoundAndIsEvicted) {
  const TinyServer server([](const std::string&, int fd, const TinyServer&) {
    TinyServer::answer(fd, 200, bytes_of(600));
  });
  ferry::RemoteOptions o = options();
  o.cache_bytes = 1000;
  const fs::path cache = dir_ / "cache";
  for (const std::string name : {"evil.lock", "evil.tmp", "evil.meta"}) {
    const std::string url = server.url(name);
    {
      const auto held = remote::fetch_files({{url, {}, false}}, o, "T");
      ASSERT_TRUE(held.at(0).has_value());
      // Held: it counts (600 bytes and its note), and stays however small the bound.
      EXPECT_GE(remote::cache_size(cache), 600U) << name;
    }
    // Another file of 600 bytes: the first, no longer held, goes to keep the bound.
    const auto other =
        remote::fetch_files({{server.url("other-" + name + ".bin"), {}, false}}, o, "T");
    EXPECT_FALSE(fs::exists(remote::entry_path(cache, url))) << name;
    EXPECT_LE(remote::cache_size(cache), 1000U) << name;
  }
  // The locks are the cache's own files, apart from the entries by their leading '.'.
  for (const auto& e : fs::directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".lock")) {
      EXPECT_EQ(name[0], '.') << name;
      EXPECT_EQ(e.file_size(), 0U) << name;
    }
  }
}

// ---- 5. the optional shard index --------------------------------------------------------------

std::string shard_tar() {
  std::string tar;
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string key = std::string(1, 's') + std::to_string(i);
    tar += ferry::testing::tar_member(key + ".bin", bytes_of(100 + i, 'a'));
    tar += ferry::testing::tar_member(key + ".cls", std::to_string(i));
  }
  return tar + std::string(1024, '\0');
}

TEST_F(RemoteBounds, AnIndexTheServerForbidsIsAbsentNotAFailure) {
  for (const int status : {401, 403}) {
    const std::string tar = shard_tar();
    const TinyServer server([&](const std::string& path, int fd, const TinyServer&) {
      if (path.starts_with("shard.tar.idx")) {
        TinyServer::answer(fd, status, "<Error><Code>AccessDenied</Code></Error>");
      } else if (path.starts_with("shard.tar")) {
        TinyServer::answer(fd, 200, tar);
      } else {
        TinyServer::answer(fd, 404, "");
      }
    });
    ferry::WebDatasetOptions o;
    o.remote = options();
    o.remote.cache_dir = dir_ / ("cache" + std::to_string(status));
    const auto ds = ferry::WebDataset::open({server.url("shard.tar")}, o);
    EXPECT_EQ(ds->size(), 3U) << status;
    EXPECT_EQ(ds->key(2), "s2") << status;
  }
}

TEST_F(RemoteBounds, APresignedShardsIndexIsAskedForBeforeTheQuery) {
  const std::string tar = shard_tar();
  const TinyServer server([&](const std::string& path, int fd, const TinyServer&) {
    const std::string file = path.substr(0, path.find('?'));
    if (file == "shard.tar") {
      TinyServer::answer(fd, 200, tar);
    } else {
      TinyServer::answer(fd, 404, "");
    }
  });
  EXPECT_EQ(remote::url_with_suffix("https://h/s.tar?X-Amz-Signature=ab&X=1", ".idx"),
            "https://h/s.tar.idx?X-Amz-Signature=ab&X=1");
  EXPECT_EQ(remote::url_with_suffix("https://h/s.tar#f", ".idx"), "https://h/s.tar.idx#f");
  EXPECT_EQ(remote::url_with_suffix("s3://b/s.tar", ".idx"), "s3://b/s.tar.idx");
  ferry::WebDatasetOptions o;
  o.remote = options();
  const auto ds = ferry::WebDataset::open({server.url("shard.tar?X-Amz-Signature=abc")}, o);
  EXPECT_EQ(ds->size(), 3U);
  const std::vector<std::string> paths = server.paths();
  EXPECT_NE(std::find(paths.begin(), paths.end(), "shard.tar.idx?X-Amz-Signature=abc"),
            paths.end());
  for (const std::string& p : paths) EXPECT_FALSE(p.ends_with(".idx")) << p;
}

// ---- 6. RangeReader: a URL read by ranges into memory ---------------------------------------

// Byte i of the served file.
char file_byte(std::uint64_t i) { return static_cast<char>('a' + i % 26); }
std::string file_bytes(std::uint64_t first, std::uint64_t n) {
  std::string out;
  for (std::uint64_t i = 0; i < n; ++i) out += file_byte(first + i);
  return out;
}
// A 206 of bytes [first, first + n) of a file of `size`, with `etag`.
void answer_range(int fd, std::uint64_t first, std::uint64_t n, std::uint64_t size,
                  const std::string& etag = "\"e1\"") {
  TinyServer::send_all(fd, "HTTP/1.1 206 Partial\r\nContent-Length: " + std::to_string(n) +
                               "\r\nContent-Range: bytes " + std::to_string(first) + "-" +
                               std::to_string(first + n - 1) + "/" + std::to_string(size) +
                               "\r\nETag: " + etag + "\r\nConnection: close\r\n\r\n" +
                               file_bytes(first, n));
}

TEST_F(RemoteBounds, ARangeReaderRetriesA503AndReadsTheBytesAsked) {
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer&) {
    const int k = requests++;
    if (k == 0) return answer_range(fd, 900, 100, 1000);  // the tail
    if (k == 1) return TinyServer::answer(fd, 503, "busy");
    answer_range(fd, 10, 20, 1000);
  });
  remote::RangeReader r(server.url("t.parquet"), options(5, 2), "T");
  EXPECT_EQ(r.tail(100), [] {
    std::vector<std::byte> v;
    for (char c : file_bytes(900, 100)) v.push_back(static_cast<std::byte>(c));
    return v;
  }());
  EXPECT_EQ(r.size(), 1000U);
  const std::vector<std::byte> got = r.read(10, 20);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), file_bytes(10, 20));
  EXPECT_EQ(requests.load(), 3);
  EXPECT_EQ(r.requests(), 2U);
  EXPECT_EQ(r.bytes_received(), 120U);
  expect_error<DataError>([&] { (void)r.read(990, 20); },
                          {"T: " + server.url("t.parquet"), "bytes 990 to 1009", "beyond"});
}

TEST_F(RemoteBounds, ARangeReaderRefusesAnAnswerLargerThanAskedOrFromAnotherByte) {
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    const int k = requests++;
    if (k == 0) return answer_range(fd, 900, 100, 1000);
    if (k == 1) return answer_range(fd, 10, 500, 1000);  // 500 bytes for 20 asked
    if (k == 2) return answer_range(fd, 0, 20, 1000);    // not from byte 10
    // A 206 that says 20 bytes and sends more.
    TinyServer::send_all(fd,
                         "HTTP/1.1 206 Partial\r\nContent-Range: bytes 10-29/1000\r\n"
                         "Connection: close\r\n\r\n" +
                             bytes_of(1 << 20));
    s.pause(10);
  });
  const std::string url = server.url("t.parquet");
  remote::RangeReader r(url, options(30, 3), "T");
  (void)r.tail(100);
  expect_error<DataError>(
      [&] { (void)r.read(10, 20); },
      {"T: " + url, "bytes 10 to 29", "500 bytes, more than the 20 asked", "not retried"});
  expect_error<DataError>([&] { (void)r.read(10, 20); },
                          {"T: " + url, "from byte 0, not byte 10", "not retried"});
  const auto start = Clock::now();
  expect_error<DataError>([&] { (void)r.read(10, 20); },
                          {"T: " + url, "more bytes came than the 20 asked", "not retried"});
  EXPECT_LT(seconds_since(start), 3.0);
  EXPECT_EQ(requests.load(), 4);  // none retried
}

TEST_F(RemoteBounds, ARangeReaderTakesTheBytesAskedOfAWholeFileAndStops) {
  // A server that ignores Range: every answer is the whole file, 64 MiB, streamed.
  constexpr std::uint64_t kSize = std::uint64_t{64} << 20;
  std::atomic<std::uint64_t> sent[2] = {0, 0};  // by the first answer, by the second
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    const int k = std::min(requests++, 1);
    if (!TinyServer::send_all(fd, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kSize) +
                                      "\r\nConnection: close\r\n\r\n")) {
      return;
    }
    std::string chunk;
    for (std::uint64_t at = 0; at < kSize && !s.stopping(); at += chunk.size()) {
      chunk = file_bytes(at, 64 << 10);
      if (!TinyServer::send_all(fd, chunk)) return;
      sent[k] += chunk.size();
    }
  });
  remote::RangeReader r(server.url("t.parquet"), options(30), "T");
  // The last bytes of a whole file: all of it comes, the last 100 bytes alone are kept.
  const std::vector<std::byte> tail = r.tail(100);
  EXPECT_EQ(r.size(), kSize);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(tail.data()), tail.size()),
            file_bytes(kSize - 100, 100));
  // Bytes from its start: the transfer stops once they came.
  const std::vector<std::byte> got = r.read(1000, 5000);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()),
            file_bytes(1000, 5000));
  EXPECT_EQ(requests.load(), 2);
  EXPECT_LT(sent[1].load(), kSize / 4);
  EXPECT_EQ(r.bytes_received(), 5100U);
}

TEST_F(RemoteBounds, ARangeReaderFailsWhenTheFileChangesBetweenRanges) {
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer&) {
    const int k = requests++;
    if (k == 0) return answer_range(fd, 900, 100, 1000);
    if (k == 1) return answer_range(fd, 10, 20, 1000, "\"e2\"");
    answer_range(fd, 10, 20, 1200);
  });
  const std::string url = server.url("t.parquet");
  remote::RangeReader r(url, options(5, 0), "T");
  (void)r.tail(100);
  expect_error<DataError>([&] { (void)r.read(10, 20); },
                          {"T: " + url, "changed on the server", "ETag \"e2\"", "was \"e1\""});
  expect_error<DataError>([&] { (void)r.read(10, 20); },
                          {"T: " + url, "changed on the server", "1200 bytes", "was 1000"});
}

}  // namespace
