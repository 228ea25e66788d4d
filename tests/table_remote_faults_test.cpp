// Remote tables under README's fault rules, against hostile servers run here on 127.0.0.1
// (tests/remote/tiny_server.hpp) serving write_tables.js's wide.parquet (2000 rows, row groups of
// 500): a row group whose fetch fails fails once for every sample of it, a server that ignores
// Range and sends the whole file in chunks (no Content-Length) is read (one that sends chunks
// without end is cut at cache_bytes), and the timeout counts the bytes of an answer's headers as
// they come. Each case runs under a timer.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "remote/tiny_server.hpp"
#include "source_dir.hpp"
#include "table_writer.hpp"

namespace {

namespace fs = std::filesystem;
using ferry::DataError;
using ferry::ParquetDataset;
using ferry::TableOptions;
using ferry::testing::expect_error;
using ferry::testing::TinyServer;
using Clock = TinyServer::Clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class TableRemoteFaults : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("ferry_table_remote_faults_" + std::to_string(::getpid()));
    skip_ = ferry::testing::run_table_writer(FERRY_SOURCE_DIR, "write_tables.js",
                                             {"parquet-wasm", "apache-arrow"}, {dir_.string()});
    if (!skip_.empty()) return;
    std::ifstream in(dir_ / "wide.parquet", std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    file_ = bytes.str();
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
  }

  // The Range a request asks for ("bytes=<first>-<last>" or "bytes=-<n>", after "Range: "):
  // its first byte and count within the file; false without one.
  static bool asked(std::uint64_t& first, std::uint64_t& n) {
    const std::string& head = TinyServer::head();
    const std::size_t at = head.find("Range: bytes=");
    if (at == std::string::npos) return false;
    const std::string spec = head.substr(at + 13, head.find("\r\n", at) - at - 13);
    const std::size_t dash = spec.find('-');
    const std::uint64_t size = file_.size();
    if (dash == 0) {
      n = std::min<std::uint64_t>(std::stoull(spec.substr(1)), size);
      first = size - n;
    } else {
      first = std::stoull(spec.substr(0, dash));
      n = std::min<std::uint64_t>(std::stoull(spec.substr(dash + 1)), size - 1) - first + 1;
    }
    return true;
  }
  // The answer to a ranged GET: its head, then its bytes.
  static std::string range_head(std::uint64_t first, std::uint64_t n) {
    return "HTTP/1.1 206 Partial Content\r\nContent-Length: " + std::to_string(n) +
           "\r\nContent-Range: bytes " + std::to_string(first) + "-" +
           std::to_string(first + n - 1) + "/" + std::to_string(file_.size()) +
           "\r\nETag: \"w1\"\r\nConnection: close\r\n\r\n";
  }
  static void answer_range(int fd, std::uint64_t first, std::uint64_t n) {
    TinyServer::send_all(fd, range_head(first, n) + file_.substr(first, n));
  }

  static ferry::RemoteOptions remote(double timeout, int retries) {
    ferry::RemoteOptions o;
    o.timeout_seconds = timeout;
    o.retries = retries;
    return o;
  }
  static TableOptions c07_text(const ferry::RemoteOptions& r) {
    TableOptions o;
    o.columns = {"c07", "text"};
    o.remote = r;
    return o;
  }

  static std::string skip_;
  static fs::path dir_;
  static std::string file_;
};
std::string TableRemoteFaults::skip_;
fs::path TableRemoteFaults::dir_;
std::string TableRemoteFaults::file_;

// Row r of wide.parquet's c07 and text, as write_tables.js wrote them.
void expect_row(const ferry::Dataset& ds, std::size_t r) {
  const auto sample = ferry::read_sample(ds, r);
  ASSERT_EQ(sample.size(), 2U);
  double v = 0;
  std::memcpy(&v, sample[0].second.data(), 8);
  EXPECT_EQ(v, static_cast<double>(r) * 50 + 7 + 0.5) << "row " << r;
  const ferry::Tensor& text = sample[1].second;
  EXPECT_EQ(std::string(static_cast<const char*>(text.data()), text.nbytes()),
            "row " + std::to_string(r) + " " + std::string(r % 13, 'x'))
      << "row " << r;
}

TEST_F(TableRemoteFaults, AStalledRowGroupFailsOnceForEverySampleOfIt) {
  // The footer answered; every other range stalls (a head, then nothing).
  std::atomic<int> stalled{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    std::uint64_t first = 0, n = 0;
    if (!asked(first, n)) return;
    if (first + n == file_.size() && n >= (std::uint64_t{64} << 10)) {
      answer_range(fd, first, n);
      return;
    }
    ++stalled;
    TinyServer::send_all(fd, range_head(first, n));
    s.pause(30);
  });
  const std::string url = server.url("wide.parquet");
  TableOptions o;
  o.columns = {"c07"};
  o.remote = remote(1, 1);
  const auto ds = ParquetDataset::open({url}, o);
  ASSERT_EQ(stalled.load(), 0);
  // The first sample of row group 1: its fetch fails after its two tries.
  auto start = Clock::now();
  const std::string where = "ParquetDataset: " + url + ": row group 1 (rows 500 to 999): ";
  const auto read = [&](std::size_t i) {
    const std::string said = expect_error<DataError>(
        [&] { (void)ferry::read_sample(*ds, i); }, {where, "no progress for 1 s", "after 2 tries"});
    EXPECT_NE(said.find("sample " + std::to_string(i)), std::string::npos) << said;
  };
  read(500);
  const double first_read = seconds_since(start);
  EXPECT_LT(first_read, 8.0);
  EXPECT_EQ(stalled.load(), 2);
  // Every later sample of it: the same error at once, nothing fetched again.
  start = Clock::now();
  for (const std::size_t i : {501U, 777U, 999U, 500U}) read(i);
  EXPECT_LT(seconds_since(start), 0.5);
  EXPECT_EQ(stalled.load(), 2);
}

TEST_F(TableRemoteFaults, ALoaderSkipsAStalledRowGroupAfterOneFetch) {
  // The first range of a row group stalls, and every request for it after; the others are
  // answered (from the fifth such request on too, so that a reader that fetched it again for
  // each sample would end instead of waiting 500 times).
  std::mutex mutex;
  std::string stalled_range;
  std::atomic<int> stalled{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    std::uint64_t first = 0, n = 0;
    if (!asked(first, n)) return;
    const bool tail = first + n == file_.size() && n >= (std::uint64_t{64} << 10);
    bool stall = false;
    if (!tail) {
      const std::lock_guard lock(mutex);
      const std::string range = std::to_string(first) + "+" + std::to_string(n);
      if (stalled_range.empty()) stalled_range = range;
      stall = range == stalled_range && ++stalled <= 4;
    }
    if (!stall) return answer_range(fd, first, n);
    TinyServer::send_all(fd, range_head(first, n));
    s.pause(30);
  });
  TableOptions o;
  o.columns = {"c07"};
  o.remote = remote(1, 1);
  const auto ds = ParquetDataset::open({server.url("wide.parquet")}, o);
  ferry::LoaderOptions lo = ferry::testing::table_loader_options(64, false, 2, 0);
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader loader(ds, lo);
  const auto start = Clock::now();
  std::vector<std::uint64_t> rows;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) rows.push_back(b.indices()[j]);
  }
  EXPECT_LT(seconds_since(start), 10.0);
  EXPECT_EQ(stalled.load(), 2);  // one fetch of two tries
  // The row group stalled (the first fetched) is skipped whole, the others read.
  std::vector<bool> seen(2000, false);
  for (const std::uint64_t r : rows) seen.at(r) = true;
  const auto gap = std::find(seen.begin(), seen.end(), false) - seen.begin();
  EXPECT_EQ(gap % 500, 0);
  for (std::ptrdiff_t r = 0; r < 2000; ++r) {
    ASSERT_EQ(seen[static_cast<std::size_t>(r)], r < gap || r >= gap + 500) << "row " << r;
  }
  EXPECT_EQ(rows.size(), 1500U);
  EXPECT_EQ(loader.stats().skipped, 500U);
}

TEST_F(TableRemoteFaults, AServerThatIgnoresRangeAndSendsChunksIsReadUpToTheBytesAsked) {
  // Every answer is the whole file, 200, in chunks of 4 KiB, without a Content-Length.
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer&) {
    ++requests;
    if (!TinyServer::send_all(fd,
                              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: "
                              "\"w1\"\r\nConnection: close\r\n\r\n")) {
      return;
    }
    for (std::size_t at = 0; at < file_.size(); at += 4096) {
      const std::string chunk = file_.substr(at, 4096);
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
      if (!TinyServer::send_all(fd, size + chunk + "\r\n")) return;
    }
    TinyServer::send_all(fd, "0\r\n\r\n");
  });
  const auto start = Clock::now();
  const auto ds = ParquetDataset::open({server.url("wide.parquet")}, c07_text(remote(5, 0)));
  ASSERT_EQ(ds->size(), 2000U);
  for (const std::size_t r : {0U, 1U, 499U, 500U, 1234U, 1999U}) expect_row(*ds, r);
  EXPECT_LT(seconds_since(start), 20.0);
  EXPECT_GT(requests.load(), 1);
}

TEST_F(TableRemoteFaults, AnEndlessChunkedAnswerWithoutRangeIsCutAtTheCachesRoom) {
  // Every answer is 200, in chunks of 64 KiB, without a Content-Length, and never ends: the
  // footer's read takes at most cache_bytes (1 MiB here), then is a DataError naming the URL.
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    if (!TinyServer::send_all(fd,
                              "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nETag: "
                              "\"w1\"\r\nConnection: close\r\n\r\n")) {
      return;
    }
    const std::string chunk = "10000\r\n" + std::string(65536, 'x') + "\r\n";
    while (!s.stopping() && TinyServer::send_all(fd, chunk)) {
    }
  });
  ferry::RemoteOptions r = remote(5, 0);
  r.cache_bytes = std::uint64_t{1} << 20;
  const std::string url = server.url("wide.parquet");
  const auto start = Clock::now();
  expect_error<DataError>([&] { (void)ParquetDataset::open({url}, c07_text(r)); },
                          {url, "sent more than 1048576 bytes without a size"});
  EXPECT_LT(seconds_since(start), 20.0);
}

TEST_F(TableRemoteFaults, HeadersThatComeOneByteAtATimeAreProgress) {
  // The footer's answer: its status line and first header one byte every 60 ms (3.5 s in all,
  // no pause of 1 s), then the rest; the other ranges answered at once.
  std::atomic<int> requests{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    std::uint64_t first = 0, n = 0;
    if (!asked(first, n)) return;
    if (requests++ == 0) {
      const int on = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      const std::string head = range_head(first, n);
      const std::size_t drip = head.find("\r\nContent-Range") + 2;
      for (std::size_t k = 0; k < drip && !s.stopping(); ++k) {
        if (!TinyServer::send_all(fd, head.substr(k, 1))) return;
        s.pause(0.06);
      }
      TinyServer::send_all(fd, head.substr(drip) + file_.substr(first, n));
      return;
    }
    answer_range(fd, first, n);
  });
  const auto start = Clock::now();
  const auto ds = ParquetDataset::open({server.url("wide.parquet")}, c07_text(remote(1, 0)));
  const double opened = seconds_since(start);
  EXPECT_GT(opened, 2.5);  // the drip was waited for
  EXPECT_LT(opened, 10.0);
  for (const std::size_t r : {0U, 1500U}) expect_row(*ds, r);
}

}  // namespace

TEST_F(TableRemoteFaults, AnEpochEndedDuringAStalledFetchDoesNotWaitItOutNorFailTheNext) {
  // Every range but the footer's stalls while `stall` holds (a head, then nothing); then all
  // are answered. The retries would wait 4 x 5 s for a stalled range.
  std::atomic<bool> stall{true};
  std::atomic<int> stalled{0};
  const TinyServer server([&](const std::string&, int fd, const TinyServer& s) {
    std::uint64_t first = 0, n = 0;
    if (!asked(first, n)) return;
    const bool tail = first + n == file_.size() && n >= (std::uint64_t{64} << 10);
    if (tail || !stall.load()) return answer_range(fd, first, n);
    ++stalled;
    TinyServer::send_all(fd, range_head(first, n));
    s.pause(30);
  });
  TableOptions o;
  o.columns = {"c07"};
  o.remote = remote(5, 3);
  const auto ds = ParquetDataset::open({server.url("wide.parquet")}, o);
  ferry::Loader loader(ds, ferry::testing::table_loader_options(64, false, 2, 0));
  double ended = 0;
  {
    ferry::Epoch epoch = loader.epoch(0);
    const ferry::Batch* batch = nullptr;
    EXPECT_FALSE(epoch.try_next(std::chrono::milliseconds(300), batch));
    for (const auto t0 = Clock::now(); stalled.load() == 0 && seconds_since(t0) < 5;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_GT(stalled.load(), 0);
    const auto start = Clock::now();
    epoch.cancel();
    { const ferry::Epoch gone = std::move(epoch); }  // joins the reads
    ended = seconds_since(start);
  }
  EXPECT_LT(ended, 2.0) << "the epoch waited for the stalled fetch's retries";
  // The dataset lives on, and its ranges are answered now: the next epoch reads every row
  // (no read of the first was kept as a row group's failure).
  // Nor waits for the fetch the dataset's own thread had under way for the first epoch (its
  // retries, 4 x 5 s): a new epoch's plan stops it.
  stall = false;
  const auto next = Clock::now();
  std::vector<double> seen(2000, -1);
  for (const ferry::Batch& b : loader.epoch(1)) {
    const auto* v = static_cast<const double*>(b["c07"].data());
    for (std::size_t j = 0; j < b.size(); ++j) seen.at(b.indices()[j]) = v[j];
  }
  EXPECT_LT(seconds_since(next), 3.0) << "the next epoch waited for the earlier fetch ahead";
  for (std::size_t r = 0; r < 2000; ++r) {
    ASSERT_EQ(seen[r], static_cast<double>(r) * 50 + 7 + 0.5) << "row " << r;
  }
}
