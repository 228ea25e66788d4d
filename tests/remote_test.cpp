// Files given as URLs (lib/datasets/remote/): expand_braces, and datasets read over a real
// nginx started here on 127.0.0.1, directly or through a fault-injecting proxy, against the
// same files read locally. Skips (saying why) where /usr/sbin/nginx is missing.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "remote/nginx.hpp"
#include "source_dir.hpp"
#include "webdataset/tar_bytes.hpp"

// The packer and the uploader of samples/make_shards, tested here.
#include "../samples/make_shards/pack.hpp"
#include "../samples/make_shards/upload.hpp"

namespace fs = std::filesystem;
using ferry::ConfigError;
using ferry::DataError;
using ferry::expand_braces;
using ferry::testing::expect_error;
using Clock = std::chrono::steady_clock;
using ferry::testing::connect_to;
using ferry::testing::free_port;
using ferry::testing::lines_of;
using ferry::testing::Nginx;
using ferry::testing::read_text;

namespace {

// ---- expand_braces ------------------------------------------------------------------------

using Names = std::vector<std::string>;

TEST(ExpandBraces, RangesKeepTheirWidthListsAndProductsGoInOrder) {
  EXPECT_EQ(expand_braces("s3://b/train-{0000..0003}.tar"),
            (Names{"s3://b/train-0000.tar", "s3://b/train-0001.tar", "s3://b/train-0002.tar",
                   "s3://b/train-0003.tar"}));
  EXPECT_EQ(expand_braces("x{8..11}"), (Names{"x8", "x9", "x10", "x11"}));
  EXPECT_EQ(expand_braces("x{098..101}"), (Names{"x098", "x099", "x100", "x101"}));
  EXPECT_EQ(expand_braces("{a,bb}-{0..1}.tar"),
            (Names{"a-0.tar", "a-1.tar", "bb-0.tar", "bb-1.tar"}));
  EXPECT_EQ(expand_braces("plain.tar"), (Names{"plain.tar"}));
  EXPECT_EQ(expand_braces(""), (Names{""}));
  EXPECT_EQ(expand_braces("{7..7}"), (Names{"7"}));
  EXPECT_EQ(expand_braces("{0..999999}").size(), 1'000'000U);
}

TEST(ExpandBraces, MalformedPatternsAreConfigErrorsQuotingThem) {
  const auto bad = [](const char* pattern, const char* why) {
    expect_error<ConfigError>([&] { (void)expand_braces(pattern); },
                              {std::string("\"") + pattern + "\"", why});
  };
  bad("a{0..3", "without its '}'");
  bad("a}0", "without its '{'");
  bad("a{}b", "empty group");
  bad("{a,,b}", "empty item");
  bad("{a,}", "empty item");
  bad("{3..1}", "reversed");
  bad("{a..c}", "not of two decimal numbers");
  bad("{1..}", "not of two decimal numbers");
  bad("{abc}", "neither a list");
  bad("{a{b,c}}", "nested");
  bad("{0..1000000}", "more than 1000000 names");
  bad("{0..999}{0..999}{0..9}", "more than 1000000 names");
}

// ---- a real server ------------------------------------------------------------------------

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

// A proxy on 127.0.0.1 that forwards each request to nginx (one request per connection) and
// spoils the responses it is told to, one fault per request in order, then passes them whole.
class FaultProxy {
 public:
  enum class Fault {
    pass,
    status503,  // answers 503 without asking nginx
    truncate,   // half the body, then a clean close
    drop,       // half the body, then a reset (RST)
    stall,      // half the body, then silence for 3 s, then a close
    etag,       // the whole answer, its ETag another one each time (the file changed meanwhile)
  };

  explicit FaultProxy(int upstream) : upstream_(upstream) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("FaultProxy: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;
  ~FaultProxy() {
    stop_ = true;
    thread_.join();
    for (std::thread& t : handlers_) t.join();
    ::close(listener_);
  }

  std::string url(const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + name;
  }
  void push(Fault f) {
    const std::lock_guard lock(mutex_);
    faults_.push_back(f);
  }
  // The request heads seen, as the client sent them.
  std::vector<std::string> requests() const {
    const std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      handlers_.emplace_back([this, client] { handle(client); });  // a stalled one blocks none
    }
  }

  // Reads from `fd` until `done(text)` or EOF or 5 s without data.
  template <class Done>
  static std::string receive(int fd, Done&& done) {
    std::string text;
    char buf[65536];
    while (!done(text)) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    return text;
  }

  static void send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
  }

  void handle(int client) {
    const std::string head =
        receive(client, [](const std::string& t) { return t.find("\r\n\r\n") != t.npos; });
    Fault fault = Fault::pass;
    {
      const std::lock_guard lock(mutex_);
      requests_.push_back(head);
      if (!faults_.empty()) {
        fault = faults_.front();
        faults_.pop_front();
      }
    }
    if (fault == Fault::status503) {
      send_all(
          client,
          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
      ::close(client);
      return;
    }
    // The request again, asking nginx to close after its answer.
    std::string forward;
    for (const std::string& line : lines_of(head.substr(0, head.find("\r\n\r\n")))) {
      if (line.rfind("Connection:", 0) == 0 || line.rfind("connection:", 0) == 0) continue;
      forward += line + "\r\n";
    }
    forward += "Connection: close\r\n\r\n";
    const int up = connect_to(upstream_);
    std::string response;
    if (up >= 0) {
      send_all(up, forward);
      response = receive(up, [](const std::string&) { return false; });
      ::close(up);
    }
    const std::size_t body = response.find("\r\n\r\n");
    if (fault == Fault::etag && body != std::string::npos) {
      const std::size_t at = response.find("\r\nETag: ");
      if (at != std::string::npos && at < body) {
        const std::size_t from = at + 8, end = response.find("\r\n", from);
        response.replace(from, end - from, "\"changed-" + std::to_string(++changes_) + "\"");
      }
      fault = Fault::pass;
    }
    if (fault == Fault::pass || body == std::string::npos) {
      send_all(client, response);
      ::close(client);
      return;
    }
    const std::size_t half = body + 4 + (response.size() - body - 4) / 2;
    send_all(client, std::string_view(response).substr(0, half));
    if (fault == Fault::drop) {
      const linger l{1, 0};
      ::setsockopt(client, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    } else if (fault == Fault::stall) {
      for (int i = 0; i < 60 && !stop_; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } else {
      ::shutdown(client, SHUT_WR);
    }
    ::close(client);
  }

  int upstream_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::deque<Fault> faults_;
  std::vector<std::string> requests_;
  std::vector<std::thread> handlers_;  // the accepting thread's own
  std::atomic<int> changes_{0};
  std::thread thread_;
};

// ---- fixtures -------------------------------------------------------------------------------

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A shard of `samples` samples: "<prefix><i>.bin" (random bytes) and "<prefix><i>.cls".
std::string shard_bytes(const std::string& prefix, unsigned samples, std::uint64_t seed) {
  std::string tar;
  for (unsigned i = 0; i < samples; ++i) {
    const std::string key = prefix + std::to_string(i);
    tar += ferry::testing::tar_member(key + ".bin", random_bytes(1000 + 37 * i, seed + i));
    tar += ferry::testing::tar_member(key + ".cls", std::to_string(i));
  }
  return tar + std::string(1024, '\0');
}

ferry::LoaderOptions cpu_loader() {
  ferry::LoaderOptions o;
  o.batch_size = 1;
  o.workers = 1;
  o.prefetch = 2;
  o.device = ferry::Device::cpu();
  o.pin_memory = false;
  o.ragged = ferry::RaggedBatch::pack;
  return o;
}

// Every sample's fields, as a loader delivers them: one string per sample and field.
std::vector<std::string> samples_of(const std::shared_ptr<const ferry::Dataset>& ds) {
  ferry::Loader loader(ds, cpu_loader());
  std::vector<std::string> out;
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (const ferry::FieldSpec& f : ds->fields()) {
      const ferry::Tensor& t = b[f.name];
      out.emplace_back(static_cast<const char*>(t.data()), t.nbytes());
    }
  }
  return out;
}

// Bytes in the cache's files, lock and temporary files aside; and those files' names.
std::uint64_t cache_bytes(const fs::path& dir) {
  std::uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name[0] == '.' || name.ends_with(".lock")) continue;
    std::error_code ec;  // a file may go meanwhile (evicted by a transfer thread)
    const std::uintmax_t size = e.file_size(ec);
    if (!ec) n += size;
  }
  return n;
}
std::vector<std::string> cache_files(const fs::path& dir) {
  std::vector<std::string> names;
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".lock")) names.push_back(name);
  }
  return names;
}

class Remote : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = fs::temp_directory_path() / ("ferry_remote_test_" + std::to_string(::getpid()) + "_" +
                                         std::to_string(Clock::now().time_since_epoch().count()));
    fs::create_directories(base_ / "www");
    // Token files: raw u16 tokens, and four small ones for the cache's bound.
    write_bytes(base_ / "www" / "tokens.bin", random_bytes(2 * 300'001, 1));
    write_bytes(base_ / "www" / "big.bin", random_bytes(8 << 20, 2));
    for (unsigned i = 0; i < 5; ++i) {
      write_bytes(base_ / "www" / ("small" + std::to_string(i) + ".bin"),
                  random_bytes(400'000, 10 + i));
    }
    write_bytes(base_ / "www" / "large.bin", random_bytes(1'500'000, 20));
    for (unsigned i = 0; i < 4; ++i) {
      write_bytes(base_ / "www" / ("shard-" + std::to_string(i) + ".tar"),
                  shard_bytes("s" + std::to_string(i) + "/", 20 + i, 100 * i));
    }
    if (fs::exists(Nginx::kBinary)) nginx_ = new Nginx(base_ / "nginx", base_ / "www");
  }
  static void TearDownTestSuite() {
    delete nginx_;
    nginx_ = nullptr;
    std::error_code ec;
    fs::remove_all(base_, ec);
  }

  void SetUp() override {
    if (nginx_ == nullptr)
      GTEST_SKIP() << Nginx::kBinary << " is missing (apt-get install nginx-light)";
    if (!nginx_->up()) {
      GTEST_SKIP() << "nginx did not start; its error log: " << nginx_->error_log();
    }
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    cache_ = base_ / "cache" / info->name();
  }

  ferry::RemoteOptions remote(std::uint64_t bytes = 0, int retries = 3) const {
    ferry::RemoteOptions r;
    r.cache_dir = cache_;
    r.cache_bytes = bytes;
    r.retries = retries;
    r.timeout_seconds = 5;
    return r;
  }
  ferry::TokenOptions tokens(std::uint64_t bytes = 0, int retries = 3) const {
    ferry::TokenOptions o;
    o.seq_len = 4096;
    o.raw_dtype = ferry::DType::u16;
    o.remote = remote(bytes, retries);
    return o;
  }
  static fs::path www(const std::string& name) { return base_ / "www" / name; }

  static inline fs::path base_;
  static inline Nginx* nginx_ = nullptr;
  fs::path cache_;
};

// ---- what arrives ----------------------------------------------------------------------------

TEST_F(Remote, TokenFilesOverHttpArriveByteForByteAsLocalOnesAndASecondOpenUsesTheCache) {
  const auto local = ferry::TokenDataset::open({www("tokens.bin"), www("small0.bin")}, tokens());
  const auto url =
      ferry::TokenDataset::open({nginx_->url("tokens.bin"), nginx_->url("small0.bin")}, tokens());
  ASSERT_EQ(url->size(), local->size());
  EXPECT_EQ(url->files()[0], nginx_->url("tokens.bin"));  // as given
  EXPECT_TRUE(url->wants_read_order());
  EXPECT_FALSE(local->wants_read_order());
  // Open read each file's head alone (one ranged GET), and downloaded nothing.
  EXPECT_EQ(nginx_->heads_settled("tokens.bin", 1), 1);
  EXPECT_EQ(nginx_->gets("tokens.bin"), 0);
  EXPECT_TRUE(cache_files(cache_).empty()) << cache_files(cache_).front();
  EXPECT_EQ(samples_of(url), samples_of(local));
  EXPECT_EQ(nginx_->gets_settled("tokens.bin", 1), 1);
  // Again, with the first still open: its head and windows come from the cache.
  const auto again = ferry::TokenDataset::open({nginx_->url("tokens.bin")}, tokens());
  EXPECT_EQ(again->num_tokens(), local->file_tokens(0));
  EXPECT_EQ(samples_of(again),
            samples_of(ferry::TokenDataset::open({www("tokens.bin")}, tokens())));
  EXPECT_EQ(nginx_->gets_settled("tokens.bin", 1), 1);
  EXPECT_EQ(nginx_->heads("tokens.bin"), 1);
  EXPECT_EQ(nginx_->gets_settled("small0.bin", 1), 1);
}

// An llm.c shard of `n` u16 tokens: its 256-int32 header (magic 20240520, version 1, n), then
// the tokens.
std::string llmc_bytes(std::uint32_t n, std::uint64_t seed) {
  std::string header(1024, '\0');
  const std::int32_t fields[3] = {20240520, 1, static_cast<std::int32_t>(n)};
  std::memcpy(header.data(), fields, sizeof fields);
  return header + random_bytes(2 * std::size_t{n}, seed);
}

// A .npy file (format 1.0) of `n` little-endian u16 tokens, its header padded to `header`
// bytes in all (a multiple of 64).
std::string npy_bytes(std::uint32_t n, std::size_t header, std::uint64_t seed) {
  std::string dict =
      "{'descr': '<u2', 'fortran_order': False, 'shape': (" + std::to_string(n) + ",), }";
  dict.resize(header - 10 - 1, ' ');
  dict += '\n';
  std::string out = "\x93NUMPY\x01";
  out += '\0';
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict + random_bytes(2 * std::size_t{n}, seed);
}

TEST_F(Remote, TokenFilesOfEachFormatComeWhileTheEpochRunsWithinTheCachesBound) {
  // Six files of ~400 KB: raw, an llm.c shard, a .npy whose header is longer than the 4 KiB
  // head open reads first; the cache holds two and a bit.
  fs::create_directories(www("lazy"));
  std::vector<fs::path> local, urls;
  for (unsigned i = 0; i < 6; ++i) {
    std::string name = "lazy/t" + std::to_string(i);
    std::string bytes;
    if (i % 3 == 0) {
      name += ".bin";
      bytes = random_bytes(400'000, 300 + i);
    } else if (i % 3 == 1) {
      name += ".llmc";
      bytes = llmc_bytes(200'000, 300 + i);
    } else {
      name += ".npy";
      bytes = npy_bytes(200'000, 6400, 300 + i);
    }
    write_bytes(www(name), bytes);
    local.push_back(www(name));
    urls.push_back(nginx_->url(name));
  }
  const std::uint64_t file = fs::file_size(local[0]);
  const std::uint64_t bound = 2 * file + 100'000;
  ferry::TokenOptions o = tokens(bound);
  o.remote.connections = 2;
  const auto ds = ferry::TokenDataset::open(urls, o);
  const auto l = ferry::TokenDataset::open(local, tokens());
  ASSERT_EQ(ds->size(), l->size());
  for (std::size_t f = 0; f < urls.size(); ++f) {
    EXPECT_EQ(ds->file_tokens(f), l->file_tokens(f)) << f;
    EXPECT_EQ(ds->file_dtype(f), l->file_dtype(f)) << f;
  }
  // Open asked for heads only (the .npy's twice: its header runs past the first 4 KiB), and
  // the cache holds nothing yet.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the log's last lines
  for (std::size_t f = 0; f < urls.size(); ++f) {
    const std::string name = "lazy/t" + std::to_string(f) + local[f].extension().string();
    EXPECT_EQ(nginx_->gets(name), 0) << name;
    EXPECT_EQ(nginx_->heads(name), f % 3 == 2 ? 2 : 1) << name;
  }
  EXPECT_EQ(cache_bytes(cache_), 0U);
  const std::vector<std::string> expected = samples_of(l);
  ferry::LoaderOptions lo = cpu_loader();
  lo.shuffle = true;
  lo.shuffle_window = 1;  // a file at a time, in a shuffled order of files
  ferry::Loader loader(ds, lo);
  ferry::Loader local_loader(l, lo);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> got, want;
    for (const ferry::Batch& b : loader.epoch(static_cast<std::uint64_t>(epoch))) {
      // Held: the file being read, and those fetched ahead within the bound.
      EXPECT_LE(cache_bytes(cache_), bound + file) << "epoch " << epoch;
      for (const ferry::FieldSpec& f : ds->fields()) {
        got.emplace_back(static_cast<const char*>(b[f.name].data()), b[f.name].nbytes());
      }
    }
    for (const ferry::Batch& b : local_loader.epoch(static_cast<std::uint64_t>(epoch))) {
      for (const ferry::FieldSpec& f : l->fields()) {
        want.emplace_back(static_cast<const char*>(b[f.name].data()), b[f.name].nbytes());
      }
    }
    EXPECT_TRUE(got == want) << "epoch " << epoch;
    EXPECT_EQ(got.size(), expected.size());
  }
  // The cache could not keep them all: the second epoch fetched again all but the two (at
  // most) left from the first.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  int downloads = 0;
  for (std::size_t f = 0; f < urls.size(); ++f) {
    downloads += nginx_->gets("lazy/t" + std::to_string(f) + local[f].extension().string());
  }
  EXPECT_GE(downloads, 10);
}

TEST_F(Remote, ATokenFileGoneFromTheServerAfterOpenIsADataErrorNamingItsUrl) {
  fs::copy_file(www("small1.bin"), www("gone.bin"), fs::copy_options::overwrite_existing);
  const std::string url = nginx_->url("gone.bin");
  const auto ds = ferry::TokenDataset::open({url}, tokens());
  fs::remove(www("gone.bin"));
  expect_error<DataError>([&] { (void)samples_of(ds); },
                          {"TokenDataset: " + url + ": cannot download", "HTTP 404"});
}

TEST_F(Remote, WebDatasetShardsOverHttpArriveByteForByteAsLocalOnes) {
  std::vector<fs::path> local, urls;
  for (const std::string& name : expand_braces("shard-{0..3}.tar")) {
    local.push_back(www(name));
    urls.push_back(nginx_->url(name));
  }
  ferry::WebDatasetOptions o;
  o.index_files = false;  // the local shards' folder is served: no sidecar written there
  o.remote = remote();
  o.remote.connections = 3;
  const auto l = ferry::WebDataset::open(local, o);
  o.index_files = true;
  const auto u = ferry::WebDataset::open(urls, o);
  ASSERT_EQ(u->size(), l->size());
  for (std::size_t i = 0; i < u->size(); ++i) ASSERT_EQ(u->key(i), l->key(i));
  EXPECT_EQ(samples_of(u), samples_of(l));
  // The server had no "<shard>.idx" (404): each was built from the shard, kept in the cache,
  // and the second open asks the server nothing.
  EXPECT_EQ(nginx_->gets_settled("shard-0.tar.idx", 1), 1);
  const auto again = ferry::WebDataset::open(urls, o);
  EXPECT_EQ(samples_of(again), samples_of(l));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(nginx_->gets_settled("shard-" + std::to_string(i) + ".tar", 1), 1);
    EXPECT_EQ(nginx_->gets_settled("shard-" + std::to_string(i) + ".tar.idx", 1), 1);
  }
}

TEST_F(Remote, AShardsIndexIsTakenFromTheServerWhereItHasOne) {
  // The index a local open writes beside the shard is served with it.
  fs::create_directories(base_ / "www" / "indexed");
  fs::copy_file(www("shard-2.tar"), www("indexed/shard-2.tar"));
  ferry::WebDatasetOptions o;
  o.remote = remote();
  const auto l = ferry::WebDataset::open({www("indexed/shard-2.tar")}, o);
  ASSERT_TRUE(fs::exists(www("indexed/shard-2.tar.idx")));
  const auto u = ferry::WebDataset::open({nginx_->url("indexed/shard-2.tar")}, o);
  EXPECT_EQ(samples_of(u), samples_of(l));
  EXPECT_EQ(nginx_->gets_settled("indexed/shard-2.tar.idx", 1), 1);
  // Its bytes are the server's (kept as they came), not an index built here.
  bool found = false;
  for (const std::string& name : cache_files(cache_)) {
    if (name.ends_with("-shard-2.tar.idx")) {
      found = true;
      EXPECT_EQ(read_text(cache_ / name), read_text(www("indexed/shard-2.tar.idx")));
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(Remote, FileUrlsAreReadToo) {
  const auto local = ferry::TokenDataset::open({www("small1.bin")}, tokens());
  const auto url = ferry::TokenDataset::open({"file://" + www("small1.bin").string()}, tokens());
  EXPECT_EQ(samples_of(url), samples_of(local));
  expect_error<DataError>(
      [&] { (void)ferry::TokenDataset::open({"file://" + www("nope.bin").string()}, tokens()); },
      {"TokenDataset: file://", "nope.bin", "cannot download"});
}

// Sets environment variables for a scope, and unsets them after.
class ScopedEnv {
 public:
  explicit ScopedEnv(std::vector<std::pair<std::string, std::string>> vars)
      : vars_(std::move(vars)) {
    for (const auto& [k, v] : vars_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) ::unsetenv(k.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST_F(Remote, S3UrlsGoToTheEndpointPathStyleSignedWithSigV4) {
  fs::create_directories(www("bucket/train"));
  fs::copy_file(www("small1.bin"), www("bucket/train/small1.bin"),
                fs::copy_options::overwrite_existing);
  FaultProxy proxy(nginx_->port());  // sees the request as signed
  const ScopedEnv env({{"AWS_ENDPOINT_URL", proxy.url("")},
                       {"AWS_REGION", "eu-west-1"},
                       {"AWS_ACCESS_KEY_ID", "AKIDFERRYTEST"},
                       {"AWS_SECRET_ACCESS_KEY", "secret"},
                       {"AWS_SESSION_TOKEN", "session-token"}});
  const auto local = ferry::TokenDataset::open({www("small1.bin")}, tokens());
  const auto url = ferry::TokenDataset::open({"s3://bucket/train/small1.bin"}, tokens());
  EXPECT_EQ(samples_of(url), samples_of(local));
  // The head at open, then the file.
  const auto requests = proxy.requests();
  ASSERT_EQ(requests.size(), 2U);
  EXPECT_NE(lower(requests[0]).find("range: bytes=0-4095"), std::string::npos) << requests[0];
  EXPECT_NE(lower(requests[0]).find("authorization: aws4-hmac-sha256"), std::string::npos)
      << requests[0];
  const std::string head = lower(requests[1]);
  EXPECT_EQ(head.rfind("get /bucket/train/small1.bin http/1.1\r\n", 0), 0U) << requests[1];
  EXPECT_NE(head.find("authorization: aws4-hmac-sha256 credential=akidferrytest/"),
            std::string::npos)
      << requests[1];
  EXPECT_NE(head.find("/eu-west-1/s3/aws4_request"), std::string::npos) << requests[1];
  EXPECT_NE(head.find("x-amz-date: "), std::string::npos) << requests[1];
  EXPECT_NE(head.find("x-amz-security-token: session-token"), std::string::npos) << requests[1];
  EXPECT_NE(head.find("x-amz-content-sha256: e3b0c442"), std::string::npos) << requests[1];
  // S3 wants both headers signed.
  const std::string signed_headers = head.substr(head.find("signedheaders="));
  EXPECT_NE(signed_headers.find("x-amz-content-sha256"), std::string::npos) << requests[1];
  EXPECT_NE(signed_headers.find("x-amz-security-token"), std::string::npos) << requests[1];
}

// ---- failures ---------------------------------------------------------------------------------

TEST_F(Remote, NotFoundFailsAtOnceNamingTheUrlAndTheStatus) {
  const auto start = Clock::now();
  const std::string url = nginx_->url("missing.bin");
  expect_error<DataError>(
      [&] { (void)ferry::TokenDataset::open({url}, tokens()); },
      {"TokenDataset: " + url + ": cannot download", "HTTP 404", "not retried"});
  // One request: the head's (nginx logs it just after answering).
  EXPECT_EQ(nginx_->gets_settled("missing.bin", 0), 0);
  for (int i = 0; i < 200 && nginx_->heads("missing.bin") < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(nginx_->heads("missing.bin"), 1);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  EXPECT_TRUE(cache_files(cache_).empty());
  expect_error<DataError>(
      [&] {
        ferry::WebDatasetOptions o;
        o.remote = remote();
        (void)ferry::WebDataset::open({nginx_->url("missing.tar")}, o);
      },
      {"WebDataset: " + nginx_->url("missing.tar") + ": cannot download", "HTTP 404"});
}

TEST_F(Remote, ARefusedConnectionIsRetriedThenADataErrorWithCurlsText) {
  const std::string url = "http://127.0.0.1:" + std::to_string(free_port()) + "/x.bin";
  const auto start = Clock::now();
  expect_error<DataError>(
      [&] { (void)ferry::TokenDataset::open({url}, tokens(0, 1)); },
      {"TokenDataset: " + url + ": cannot download", "curl: ", "after 2 tries"});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST_F(Remote, BadRemoteOptionsAreConfigErrors) {
  ferry::TokenOptions o = tokens();
  o.remote.connections = 0;
  expect_error<ConfigError>([&] { (void)ferry::TokenDataset::open({nginx_->url("x")}, o); },
                            {"RemoteOptions::connections"});
  o = tokens();
  o.remote.retries = -1;
  expect_error<ConfigError>([&] { (void)ferry::TokenDataset::open({nginx_->url("x")}, o); },
                            {"RemoteOptions::retries"});
  o = tokens();
  o.remote.timeout_seconds = 0;
  expect_error<ConfigError>([&] { (void)ferry::TokenDataset::open({nginx_->url("x")}, o); },
                            {"RemoteOptions::timeout_seconds"});
}

TEST_F(Remote, A503IsRetriedAndAlways503IsADataErrorAfterTheRetries) {
  FaultProxy proxy(nginx_->port());
  proxy.push(FaultProxy::Fault::status503);
  const auto local = ferry::TokenDataset::open({www("small2.bin")}, tokens());
  const auto url = ferry::TokenDataset::open({proxy.url("small2.bin")}, tokens());
  EXPECT_EQ(proxy.requests().size(), 2U);  // the head, again after its 503
  proxy.push(FaultProxy::Fault::status503);
  EXPECT_EQ(samples_of(url), samples_of(local));
  EXPECT_EQ(proxy.requests().size(), 4U);  // the file, again after its 503

  for (int i = 0; i < 3; ++i) proxy.push(FaultProxy::Fault::status503);
  expect_error<DataError>(
      [&] { (void)ferry::TokenDataset::open({proxy.url("small3.bin")}, tokens(0, 2)); },
      {"TokenDataset: " + proxy.url("small3.bin") + ": cannot download", "HTTP 503",
       "after 3 tries"});
  EXPECT_EQ(proxy.requests().size(), 7U);
}

TEST_F(Remote, ABodyCutShortResumesWithARangeRequest) {
  FaultProxy proxy(nginx_->port());
  const auto local = ferry::TokenDataset::open({www("big.bin")}, tokens());
  ferry::TokenOptions whole = tokens();
  whole.remote.part_bytes = 0;  // the file in one transfer (parts: AFileInPartsSurvives...)
  const auto url = ferry::TokenDataset::open({proxy.url("big.bin")}, whole);
  proxy.push(FaultProxy::Fault::truncate);  // the file's download, after its head
  EXPECT_EQ(samples_of(url), samples_of(local));
  const auto requests = proxy.requests();
  ASSERT_EQ(requests.size(), 3U);
  EXPECT_NE(requests[0].find("Range: bytes=0-4095"), std::string::npos) << requests[0];
  EXPECT_EQ(requests[1].find("Range:"), std::string::npos);
  // It asked for the rest, from where the first answer stopped, if the file is still the same.
  EXPECT_NE(requests[2].find("Range: bytes=" + std::to_string((8 << 20) / 2) + "-"),
            std::string::npos)
      << requests[2];
  EXPECT_NE(requests[2].find("If-Range: \""), std::string::npos) << requests[2];
}

TEST_F(Remote, AResetConnectionAndAStalledOneAreRetried) {
  FaultProxy proxy(nginx_->port());
  ferry::TokenOptions o = tokens();
  o.remote.timeout_seconds = 1;  // the stall: no progress for 1 s fails the transfer
  o.remote.part_bytes = 0;       // the file in one transfer
  const auto start = Clock::now();
  const auto local = ferry::TokenDataset::open({www("big.bin")}, tokens());
  const auto url = ferry::TokenDataset::open({proxy.url("big.bin")}, o);
  proxy.push(FaultProxy::Fault::drop);
  proxy.push(FaultProxy::Fault::stall);
  EXPECT_EQ(samples_of(url), samples_of(local));
  EXPECT_EQ(proxy.requests().size(), 4U);  // the head, then the file three times
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
}

TEST_F(Remote, NothingPartialIsEverTakenForTheWholeFile) {
  FaultProxy proxy(nginx_->port());
  // No retry: the cut transfer is a DataError (the read's), and leaves nothing in the cache.
  const auto url = ferry::TokenDataset::open({proxy.url("small4.bin")}, tokens(0, 0));
  proxy.push(FaultProxy::Fault::truncate);
  expect_error<DataError>([&] { (void)samples_of(url); },
                          {proxy.url("small4.bin"), "cannot download", "after 1 try"});
  EXPECT_TRUE(cache_files(cache_).empty()) << cache_files(cache_).front();
  // The next epoch downloads it whole.
  const auto local = ferry::TokenDataset::open({www("small4.bin")}, tokens());
  EXPECT_EQ(samples_of(url), samples_of(local));
  EXPECT_EQ(proxy.requests().size(), 3U);
  EXPECT_EQ(proxy.requests()[2].find("Range:"), std::string::npos);
}

// ---- the cache -----------------------------------------------------------------------------

TEST_F(Remote, TheCacheStaysWithinItsBoundAndNeverEvictsAFileInUse) {
  constexpr std::uint64_t bound = 1'000'000;  // two and a half small files
  {
    // A file over the bound stays while it is in use (an epoch under way has reads of it to
    // come)...
    const auto large = ferry::TokenDataset::open({nginx_->url("large.bin")}, tokens(bound));
    ferry::Loader large_loader(large, cpu_loader());
    ferry::Epoch large_epoch = large_loader.epoch(0);
    ASSERT_NE(large_epoch.next(), nullptr);
    EXPECT_GE(cache_bytes(cache_), 1'500'000U);
    const auto held = ferry::TokenDataset::open({nginx_->url("small0.bin")}, tokens(bound));
    ferry::Loader held_loader(held, cpu_loader());
    ferry::Epoch held_epoch = held_loader.epoch(0);
    ASSERT_NE(held_epoch.next(), nullptr);
    EXPECT_GE(cache_bytes(cache_), 1'900'000U);  // neither could go
  }
  // ... and goes once it is not.
  for (int i = 0; i < 5; ++i) {
    const std::string name = "small" + std::to_string(i) + ".bin";
    const auto ds = ferry::TokenDataset::open({nginx_->url(name)}, tokens(bound));
    EXPECT_EQ(samples_of(ds), samples_of(ferry::TokenDataset::open({www(name)}, tokens())));
    EXPECT_LE(cache_bytes(cache_), bound) << "after " << name;
  }
  // The least recently used went: small0 (used first) is fetched again, small4 is not.
  // (nginx logs a request just after its last byte: let the last lines come.)
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const int small0 = nginx_->gets("small0.bin"), small4 = nginx_->gets("small4.bin");
  (void)samples_of(ferry::TokenDataset::open({nginx_->url("small4.bin")}, tokens(bound)));
  (void)samples_of(ferry::TokenDataset::open({nginx_->url("small0.bin")}, tokens(bound)));
  EXPECT_EQ(nginx_->gets_settled("small4.bin", small4), small4);
  EXPECT_EQ(nginx_->gets_settled("small0.bin", small0 + 1), small0 + 1);
  EXPECT_LE(cache_bytes(cache_), bound);
}

TEST_F(Remote, ADeadDownloadsTemporaryFileGoesAfterADay) {
  fs::create_directories(cache_);
  const fs::path old_tmp = cache_ / ".0123456789abcdef-x.bin.0011223344556677.tmp";
  const fs::path new_tmp = cache_ / ".fedcba9876543210-y.bin.0011223344556677.tmp";
  write_bytes(old_tmp, "partial");
  write_bytes(new_tmp, "partial");
  fs::last_write_time(old_tmp, fs::file_time_type::clock::now() - std::chrono::hours(25));
  (void)samples_of(ferry::TokenDataset::open({nginx_->url("small1.bin")}, tokens()));
  EXPECT_FALSE(fs::exists(old_tmp));
  EXPECT_TRUE(fs::exists(new_tmp));  // perhaps a download under way in another process
}

TEST_F(Remote, TwoProcessesOpeningTheSameUrlDownloadItOnce) {
  const std::string url = nginx_->url("big.bin");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // earlier tests' log lines
  const int before = nginx_->starts("big.bin");
  int go[2];
  ASSERT_EQ(::pipe(go), 0);
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(go[1]);
      char byte = 0;
      const bool started = ::read(go[0], &byte, 1) == 1;
      int code = started ? 0 : 3;
      try {
        const auto ds = ferry::TokenDataset::open({url}, tokens());
        if (ds->num_tokens() != (8U << 20) / 2) code = 2;
        ferry::Loader loader(ds, cpu_loader());
        ferry::Epoch epoch = loader.epoch(0);
        if (epoch.next() == nullptr) code = 4;  // the first window: the file is here
      } catch (...) {
        code = 1;
      }
      ::_exit(code);
    }
    children.push_back(pid);
  }
  ::close(go[0]);
  ASSERT_EQ(::write(go[1], "gg", 2), 2);  // both at once
  ::close(go[1]);
  for (const pid_t pid : children) {
    int status = -1;
    // Bounded: a child still running after 30 s is killed and fails the test.
    for (int i = 0; i < 3000 && ::waitpid(pid, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!WIFEXITED(status)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "a child did not finish";
      continue;
    }
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  // (Its download in parts: the first part's request starts it.)
  for (int i = 0; i < 200 && nginx_->starts("big.bin") < before + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(nginx_->starts("big.bin"), before + 1);
}

// ---- shards fetched while the epoch runs ------------------------------------------------------

// `count` shards of 8 samples of 64 KiB ("<key>.bin", and "<key>.cls" = shard x 1000 + i) in
// www/<folder>/p-<s>.tar, each with the index a local open writes beside it; their URLs on
// `server`.
std::vector<fs::path> indexed_shards(const fs::path& www, const std::string& folder,
                                     unsigned count) {
  fs::create_directories(www / folder);
  std::vector<fs::path> local;
  for (unsigned s = 0; s < count; ++s) {
    std::string tar;
    for (unsigned i = 0; i < 8; ++i) {
      std::string key = "k";
      key += std::to_string(s);
      key += '_';
      key += std::to_string(i);
      tar += ferry::testing::tar_member(key + ".bin", random_bytes(64 << 10, 1000 * s + i));
      tar += ferry::testing::tar_member(key + ".cls", std::to_string(1000 * s + i));
    }
    local.push_back(www / folder / ("p-" + std::to_string(s) + ".tar"));
    write_bytes(local.back(), tar + std::string(1024, '\0'));
  }
  ferry::WebDatasetOptions o;
  (void)ferry::WebDataset::open(local, o);  // writes each "<shard>.idx"
  return local;
}

std::vector<fs::path> urls_of(const Nginx& server, const std::string& folder, unsigned count) {
  std::vector<fs::path> urls;
  for (unsigned s = 0; s < count; ++s) {
    urls.push_back(server.url(folder + "/p-" + std::to_string(s) + ".tar"));
  }
  return urls;
}

// The cached copy of a shard is there (complete: the cache shows only complete files).
bool cached(const fs::path& cache, const std::string& name) {
  for (const std::string& f : cache_files(cache)) {
    if (f.size() > 17 && std::string_view(f).substr(17) == name) return true;
  }
  return false;
}

TEST_F(Remote, OpenFetchesOnlyIndexesAndTheFirstBatchComesBeforeTheLastShard) {
  constexpr unsigned kShards = 6;  // 512 KiB each, at 2 MB/s a connection: 0.26 s each
  const auto local = indexed_shards(base_ / "www", "slow", kShards);
  Nginx slow(base_ / "nginx-slow", base_ / "www", "limit_rate 2m;");
  ASSERT_TRUE(slow.up()) << slow.error_log();
  ferry::WebDatasetOptions o;
  o.remote = remote();
  o.remote.connections = 1;
  const auto ds = ferry::WebDataset::open(urls_of(slow, "slow", kShards), o);
  // Open asked for the indexes only.
  for (unsigned s = 0; s < kShards; ++s) {
    EXPECT_EQ(slow.gets_settled("slow/p-" + std::to_string(s) + ".tar.idx", 1), 1);
    EXPECT_EQ(slow.gets("slow/p-" + std::to_string(s) + ".tar"), 0);
  }
  const auto l = ferry::WebDataset::open(local, {});
  ASSERT_EQ(ds->size(), l->size());
  ferry::Loader loader(ds, cpu_loader());
  std::vector<std::string> got;
  bool first = true;
  for (const ferry::Batch& b : loader.epoch(0)) {
    if (first) {
      // The first batch is here; the last shard is still on its way (each one takes 0.26 s, and
      // they come one after another).
      EXPECT_FALSE(cached(cache_, "p-" + std::to_string(kShards - 1) + ".tar"));
      first = false;
    }
    for (const ferry::FieldSpec& f : ds->fields()) {
      got.emplace_back(static_cast<const char*>(b[f.name].data()), b[f.name].nbytes());
    }
  }
  EXPECT_TRUE(got == samples_of(l));
  for (unsigned s = 0; s < kShards; ++s) {
    EXPECT_EQ(slow.gets_settled("slow/p-" + std::to_string(s) + ".tar", 1), 1) << s;
  }
  const ferry::LoaderStats stats = loader.stats();
  EXPECT_GT(stats.network_wait_seconds, 0.0);
  EXPECT_LE(stats.network_wait_seconds, stats.read_seconds);
  EXPECT_EQ(stats.summary().rfind("network-bound", 0), 0U) << stats.summary();
  // A second epoch reads the cache: nothing asked (the waits left are for files taken from the
  // cache, no transfer: far below one shard's 0.26 s).
  const double waited = loader.stats().network_wait_seconds;
  for (const ferry::Batch& b : loader.epoch(1)) (void)b;
  EXPECT_LT(loader.stats().network_wait_seconds - waited, 0.2);
  for (unsigned s = 0; s < kShards; ++s) {
    EXPECT_EQ(slow.gets_settled("slow/p-" + std::to_string(s) + ".tar", 1), 1) << s;
  }
}

TEST_F(Remote, ShardsAreFetchedInTheEpochsOwnOrder) {
  constexpr unsigned kShards = 8;
  (void)indexed_shards(base_ / "www", "order", kShards);
  ferry::WebDatasetOptions o;
  o.remote = remote();
  o.remote.connections = 1;  // one transfer at a time: the log's order is the fetching order
  const auto ds = ferry::WebDataset::open(urls_of(*nginx_, "order", kShards), o);
  ferry::LoaderOptions lo = cpu_loader();
  lo.shuffle = true;
  lo.seed = 7;
  lo.shuffle_window = 2;
  lo.batch_size = 4;
  ferry::Loader loader(ds, lo);
  std::vector<std::string> expected;  // shards by their first sample in the epoch
  for (const ferry::Batch& b : loader.epoch(0)) {
    for (const std::uint64_t i : b.indices()) {
      const std::string name = "order/p-" + std::to_string(ds->shard_of(i)) + ".tar";
      if (std::find(expected.begin(), expected.end(), name) == expected.end()) {
        expected.push_back(name);
      }
    }
  }
  std::vector<std::string> fetched;
  for (const std::string& p : nginx_->get_paths()) {
    if (p.starts_with("order/") && p.ends_with(".tar")) fetched.push_back(p);
  }
  EXPECT_EQ(fetched, expected);
  std::vector<std::string> identity;
  for (unsigned s = 0; s < kShards; ++s)
    identity.push_back("order/p-" + std::to_string(s) + ".tar");
  EXPECT_NE(expected, identity);  // the seed shuffles the shards
}

TEST_F(Remote, AShardThatCannotBeHadIsSkippedUnderSkipAndADataErrorUnderRaise) {
  constexpr unsigned kShards = 4;
  const auto local = indexed_shards(base_ / "www", "gone", kShards);
  fs::remove(local[2]);  // its index stays: the shard is known at open, a 404 mid-epoch
  ferry::WebDatasetOptions o;
  o.remote = remote();
  const auto urls = urls_of(*nginx_, "gone", kShards);
  const auto ds = ferry::WebDataset::open(urls, o);
  EXPECT_EQ(ds->size(), 8U * kShards);
  ferry::LoaderOptions lo = cpu_loader();
  lo.on_error = ferry::ErrorPolicy::skip;
  ferry::Loader loader(ds, lo);
  std::vector<std::int64_t> labels;
  for (const ferry::Batch& b : loader.epoch(0)) {
    const auto* cls = static_cast<const std::int64_t*>(b["cls"].data());
    labels.insert(labels.end(), cls, cls + b.size());
  }
  std::vector<std::int64_t> expected;
  for (unsigned s = 0; s < kShards; ++s) {
    for (unsigned i = 0; s != 2 && i < 8; ++i) expected.push_back(1000 * s + i);
  }
  EXPECT_EQ(labels, expected);
  const ferry::LoaderStats stats = loader.stats();
  EXPECT_EQ(stats.skipped, 8U);
  ASSERT_FALSE(stats.skip_reasons.empty());
  EXPECT_NE(stats.skip_reasons[0].find(urls[2].string()), std::string::npos)
      << stats.skip_reasons[0];
  EXPECT_NE(stats.skip_reasons[0].find("404"), std::string::npos) << stats.skip_reasons[0];
  EXPECT_EQ(nginx_->gets_settled("gone/p-2.tar", 1),
            1);  // once per epoch: not again for each sample
  // Under raise, the epoch fails with the URL.
  ferry::Loader raising(ds, cpu_loader());
  expect_error<DataError>(
      [&] {
        for (const ferry::Batch& b : raising.epoch(0)) (void)b;
      },
      {urls[2].string(), "404"});
}

TEST_F(Remote, AShardCutShortIsNeverReadAndResumes) {
  constexpr unsigned kShards = 2;
  const auto local = indexed_shards(base_ / "www", "cut", kShards);
  FaultProxy proxy(nginx_->port());
  // The indexes pass; the first shard's transfer is cut, then resumed with a Range request.
  proxy.push(FaultProxy::Fault::pass);
  proxy.push(FaultProxy::Fault::pass);
  proxy.push(FaultProxy::Fault::truncate);
  ferry::WebDatasetOptions o;
  o.remote = remote();
  o.remote.connections = 1;
  const auto ds = ferry::WebDataset::open({proxy.url("cut/p-0.tar"), proxy.url("cut/p-1.tar")}, o);
  EXPECT_TRUE(samples_of(ds) == samples_of(ferry::WebDataset::open(local, {})));
  bool ranged = false;
  for (const std::string& r : proxy.requests()) ranged |= r.find("Range:") != std::string::npos;
  EXPECT_TRUE(ranged);
}

TEST_F(Remote, AnEpochLargerThanTheCacheStaysWithinItsBound) {
  constexpr unsigned kShards = 6;
  const auto local = indexed_shards(base_ / "www", "bound", kShards);
  const std::uint64_t shard = fs::file_size(local[0]);
  const std::uint64_t bound = 2 * shard + (64 << 10);  // two shards (and their indexes)
  ferry::WebDatasetOptions o;
  o.remote = remote(bound);
  o.remote.connections = 2;
  const auto ds = ferry::WebDataset::open(urls_of(*nginx_, "bound", kShards), o);
  ferry::Loader loader(ds, cpu_loader());
  const auto l = ferry::WebDataset::open(local, {});
  const std::vector<std::string> expected = samples_of(l);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::string> got;
    for (const ferry::Batch& b : loader.epoch(static_cast<std::uint64_t>(epoch))) {
      // Held: the shard being read, and those fetched ahead within the bound.
      EXPECT_LE(cache_bytes(cache_), bound + shard) << "epoch " << epoch;
      for (const ferry::FieldSpec& f : ds->fields()) {
        got.emplace_back(static_cast<const char*>(b[f.name].data()), b[f.name].nbytes());
      }
    }
    EXPECT_TRUE(got == expected) << "epoch " << epoch;
  }
  // The first shards went to make room, and came again for the second epoch.
  EXPECT_EQ(nginx_->gets_settled("bound/p-0.tar", 2), 2);
}

TEST_F(Remote, AMixtureOfShardsFromUrlsTellsEachSourceItsReadsSoItsHoldsStayBounded) {
  // Without the order, a source's shards would each stay held once fetched (all ten here).
  constexpr unsigned kShards = 5;
  const auto local_a = indexed_shards(base_ / "www", "mixa", kShards);
  const auto local_b = indexed_shards(base_ / "www", "mixb", kShards);
  const std::uint64_t shard = fs::file_size(local_a[0]);
  const std::uint64_t bound = 2 * shard + (64 << 10);
  ferry::WebDatasetOptions o;
  o.remote = remote(bound);
  o.remote.connections = 2;
  const auto source_a = ferry::WebDataset::open(urls_of(*nginx_, "mixa", kShards), o);
  const auto source_b = ferry::WebDataset::open(urls_of(*nginx_, "mixb", kShards), o);
  const auto remote_mix = ferry::Mixture::open({{source_a, 1}, {source_b, 1}});
  const auto local_mix = ferry::Mixture::open(
      {{ferry::WebDataset::open(local_a, {}), 1}, {ferry::WebDataset::open(local_b, {}), 1}});
  ASSERT_TRUE(remote_mix->wants_read_order());
  EXPECT_FALSE(local_mix->wants_read_order());
  const std::vector<std::string> expected = samples_of(local_mix);
  ferry::Loader loader(remote_mix, cpu_loader());
  std::vector<std::string> got;
  std::uint64_t most = 0;
  for (const ferry::Batch& b : loader.epoch(0)) {
    most = std::max(most, cache_bytes(cache_));
    for (const ferry::FieldSpec& f : remote_mix->fields()) {
      got.emplace_back(static_cast<const char*>(b[f.name].data()), b[f.name].nbytes());
    }
  }
  EXPECT_TRUE(got == expected);
  // Each source keeps its own bound (its fetches ahead), so two sources hold at most twice it,
  // plus the shard being read.
  EXPECT_LE(most, 2 * bound + shard);
  EXPECT_LT(most, 2 * kShards * shard);
  EXPECT_EQ(remote_mix->network_wait_seconds(),
            source_a->network_wait_seconds() + source_b->network_wait_seconds());
}

// ---- CsvDataset and IdxDataset: fetched once at open ------------------------------------------

// An IDX file, uncompressed: big-endian magic 0x000008<ndims> and dimensions, then the bytes.
std::string idx_bytes(const std::vector<std::uint32_t>& dims, const std::string& data) {
  std::string out;
  const auto put = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8)
      out.push_back(static_cast<char>(v >> shift & 0xff));
  };
  put(0x00000800U | static_cast<std::uint32_t>(dims.size()));
  for (const std::uint32_t d : dims) put(d);
  return out + data;
}

TEST_F(Remote, CsvAndIdxFilesOverHttpArriveAsLocalOnesFetchedOnce) {
  fs::create_directories(base_ / "www" / "tables");
  write_bytes(www("tables/t.csv"), "a,b,label\n1,2.5,0\n3,4,1\n-5,6e2,2\n");
  write_bytes(www("tables/images.idx"), idx_bytes({3, 4, 5}, random_bytes(60, 77)));
  write_bytes(www("tables/labels.idx"), idx_bytes({3}, std::string("\x01\x02\x03", 3)));
  ferry::CsvOptions co;
  co.remote = remote();
  const auto csv_local = ferry::CsvDataset::open(www("tables/t.csv"), co);
  const auto csv_url = ferry::CsvDataset::open(nginx_->url("tables/t.csv"), co);
  EXPECT_EQ(samples_of(csv_url), samples_of(csv_local));
  (void)ferry::CsvDataset::open(nginx_->url("tables/t.csv"), co);  // from the cache
  EXPECT_EQ(nginx_->gets_settled("tables/t.csv", 1), 1);
  ferry::IdxOptions io;
  io.remote = remote();
  const auto idx_local =
      ferry::IdxDataset::open(www("tables/images.idx"), www("tables/labels.idx"), io);
  const auto idx_url = ferry::IdxDataset::open(nginx_->url("tables/images.idx"),
                                               nginx_->url("tables/labels.idx"), io);
  EXPECT_EQ(samples_of(idx_url), samples_of(idx_local));
  (void)ferry::IdxDataset::open(nginx_->url("tables/images.idx"), www("tables/labels.idx"), io);
  EXPECT_EQ(nginx_->gets_settled("tables/images.idx", 1), 1);
  EXPECT_EQ(nginx_->gets_settled("tables/labels.idx", 1), 1);
  // Errors name the URL: the server's, and the file's own.
  expect_error<DataError>(
      [&] { (void)ferry::CsvDataset::open(nginx_->url("tables/none.csv"), co); },
      {"CsvDataset: " + nginx_->url("tables/none.csv"), "HTTP 404"});
  expect_error<DataError>(
      [&] {
        (void)ferry::IdxDataset::open(nginx_->url("tables/labels.idx"),
                                      nginx_->url("tables/labels.idx"), io);
      },
      {nginx_->url("tables/labels.idx")});
}

// ---- files in parts ----------------------------------------------------------------------------

// The bytes of the cached copy of the file whose name ends with "-<leaf>" in `cache`, or "" when
// there is none (temporary files aside).
std::string cached_copy(const fs::path& cache, const std::string& leaf) {
  for (const std::string& name : cache_files(cache)) {
    if (name[0] != '.' && name.ends_with("-" + leaf)) return read_text(cache / name);
  }
  return {};
}

// Every window of `url` read through a loader, against the local file's, and the cached copy
// against the file itself.
void expect_same_file(const std::shared_ptr<const ferry::Dataset>& url,
                      const std::shared_ptr<const ferry::Dataset>& local, const fs::path& cache,
                      const fs::path& file) {
  EXPECT_TRUE(samples_of(url) == samples_of(local)) << file;
  EXPECT_TRUE(cached_copy(cache, file.filename().string()) == read_text(file)) << file;
}

// The ranges "<first>-<last>" a download in parts of `size` bytes asks, in parts of `part`.
std::vector<std::string> part_ranges(std::uint64_t size, std::uint64_t part) {
  std::vector<std::string> out;
  for (std::uint64_t a = 0; a < size; a += part) {
    out.push_back(std::to_string(a) + "-" + std::to_string(std::min(size, a + part) - 1));
  }
  return out;
}

TEST_F(Remote, AFileInPartsArrivesByteForByteWhateverThePartSize) {
  fs::create_directories(www("parts"));
  // A file that is an exact multiple of two of the part sizes, and one whose last part is short.
  const std::vector<std::pair<std::string, std::uint64_t>> files = {{"exact.bin", 1U << 20},
                                                                    {"short.bin", 1'000'002}};
  for (const auto& [name, size] : files) {
    write_bytes(www("parts/" + name), random_bytes(size, size));
  }
  for (const std::uint64_t part :
       {std::uint64_t{65536}, std::uint64_t{100'000}, std::uint64_t{262'144}}) {
    for (const auto& [name, size] : files) {
      SCOPED_TRACE(name + " in parts of " + std::to_string(part));
      // A name of its own for each part size: each is downloaded afresh.
      const std::string served = "parts/" + std::to_string(part) + "-" + name;
      fs::copy_file(www("parts/" + name), www(served), fs::copy_options::overwrite_existing);
      ferry::TokenOptions o = tokens();
      o.remote.connections = 4;
      o.remote.part_bytes = part;
      const auto url = ferry::TokenDataset::open({nginx_->url(served)}, o);
      expect_same_file(url, ferry::TokenDataset::open({www(served)}, tokens()), cache_,
                       www(served));
      // One ranged GET per part, each asking its own bytes.
      const std::vector<std::string> want = part_ranges(size, part);
      std::vector<std::string> asked;
      for (int i = 0; i < 200; ++i) {
        asked.clear();
        for (const auto& [range, conn] : nginx_->ranged(served)) asked.push_back(range);
        if (asked.size() >= want.size()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      std::sort(asked.begin(), asked.end());
      std::vector<std::string> sorted = want;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(asked, sorted);
      EXPECT_EQ(nginx_->gets(served), static_cast<int>(want.size()));
    }
  }
  // A file no larger than a part comes whole, in one GET without a Range.
  ferry::TokenOptions o = tokens();
  o.remote.part_bytes = 1U << 20;
  const auto url = ferry::TokenDataset::open({nginx_->url("parts/exact.bin")}, o);
  expect_same_file(url, ferry::TokenDataset::open({www("parts/exact.bin")}, tokens()), cache_,
                   www("parts/exact.bin"));
  EXPECT_EQ(nginx_->gets_settled("parts/exact.bin", 1), 1);
  EXPECT_TRUE(nginx_->ranged("parts/exact.bin").empty());
}

TEST_F(Remote, TheFileAReadWaitsForComesOnSeveralConnectionsAtOnce) {
  // A server that sends each connection 4 MB/s: 16 parts of 64 KiB take one connection ~0.26 s,
  // time enough for the idle threads to take parts too.
  Nginx slow(base_ / "nginx-slow", base_ / "www", "limit_rate 4m;");
  ASSERT_TRUE(slow.up()) << slow.error_log();
  fs::create_directories(www("wait"));
  write_bytes(www("wait/first.bin"), random_bytes(1U << 20, 41));
  write_bytes(www("wait/second.bin"), random_bytes(1U << 20, 42));
  ferry::TokenOptions o = tokens();
  o.remote.connections = 4;
  o.remote.part_bytes = 65536;
  const auto url =
      ferry::TokenDataset::open({slow.url("wait/first.bin"), slow.url("wait/second.bin")}, o);
  const auto local =
      ferry::TokenDataset::open({www("wait/first.bin"), www("wait/second.bin")}, tokens());
  {
    // The first window: the loader waits for the first file.
    ferry::Loader loader(url, cpu_loader());
    ferry::Epoch epoch = loader.epoch(0);
    ASSERT_NE(epoch.next(), nullptr);
  }
  std::vector<std::pair<std::string, std::string>> parts;
  for (int i = 0; i < 300 && (parts = slow.ranged("wait/first.bin")).size() < 16; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(parts.size(), 16U);
  std::vector<std::string> connections;
  for (const auto& [range, conn] : parts) connections.push_back(conn);
  std::sort(connections.begin(), connections.end());
  connections.erase(std::unique(connections.begin(), connections.end()), connections.end());
  EXPECT_GE(connections.size(), 3U)
      << "the first file's parts came on " << connections.size() << " connection(s)";
  expect_same_file(url, local, cache_, www("wait/first.bin"));
  EXPECT_TRUE(cached_copy(cache_, "second.bin") == read_text(www("wait/second.bin")));
}

TEST_F(Remote, AFileInPartsSurvivesDroppedCutAndRefusedPartsAndIsNeverTakenPartial) {
  FaultProxy proxy(nginx_->port());
  fs::create_directories(www("faults"));
  write_bytes(www("faults/f.bin"), random_bytes(1'000'000, 51));
  const auto local = ferry::TokenDataset::open({www("faults/f.bin")}, tokens());
  ferry::TokenOptions o = tokens(0, 4);
  o.remote.connections = 4;
  o.remote.part_bytes = 100'000;
  const auto url = ferry::TokenDataset::open({proxy.url("faults/f.bin")}, o);
  // The first three part requests fail: cut short (a clean close), dropped (a reset), a 503.
  proxy.push(FaultProxy::Fault::truncate);
  proxy.push(FaultProxy::Fault::drop);
  proxy.push(FaultProxy::Fault::status503);
  expect_same_file(url, local, cache_, www("faults/f.bin"));
  // The head, ten parts, and three more: the two broken parts resumed from where they stopped
  // (not from a part's start), the refused one asked again.
  const std::vector<std::string> requests = proxy.requests();
  EXPECT_EQ(requests.size(), 14U);
  int resumed = 0, if_match = 0;
  for (std::size_t r = 1; r < requests.size(); ++r) {
    const std::size_t at = requests[r].find("Range: bytes=");
    ASSERT_NE(at, std::string::npos) << requests[r];
    const std::uint64_t first = std::strtoull(requests[r].c_str() + at + 13, nullptr, 10);
    if (first % 100'000 != 0) ++resumed;
    if (requests[r].find("If-Match: \"") != std::string::npos) ++if_match;
  }
  EXPECT_GE(resumed, 2) << [&] {
    std::string all;
    for (const std::string& r : requests) all += r.substr(0, r.find("User-Agent")) + "\n";
    return all;
  }();
  EXPECT_GE(if_match, 3);  // at least the three asked again, once an ETag was known

  // Without retries a broken part fails the download: a DataError naming the URL, and nothing
  // in the cache that a later read could take for the file.
  write_bytes(www("faults/g.bin"), random_bytes(1'000'000, 52));
  ferry::TokenOptions none = o;
  none.remote.retries = 0;
  const auto g = ferry::TokenDataset::open({proxy.url("faults/g.bin")}, none);
  proxy.push(FaultProxy::Fault::truncate);
  expect_error<DataError>([&] { (void)samples_of(g); },
                          {"TokenDataset: " + proxy.url("faults/g.bin") + ": cannot download",
                           "HTTP 206", "after 1 try"});
  EXPECT_TRUE(cached_copy(cache_, "g.bin").empty());
  for (const std::string& name : cache_files(cache_)) {
    EXPECT_FALSE(name.find("g.bin") != std::string::npos && name.ends_with(".tmp")) << name;
  }
  // The next epoch downloads it again, whole and right.
  expect_same_file(g, ferry::TokenDataset::open({www("faults/g.bin")}, tokens()), cache_,
                   www("faults/g.bin"));
}

TEST_F(Remote, AFileThatChangesMidDownloadStartsOverAndIsNeverTornElseADataError) {
  FaultProxy proxy(nginx_->port());
  fs::create_directories(www("change"));
  write_bytes(www("change/f.bin"), random_bytes(1'000'000, 71));
  ferry::TokenOptions o = tokens(0, 2);
  o.remote.connections = 4;
  o.remote.part_bytes = 100'000;
  const auto url = ferry::TokenDataset::open({proxy.url("change/f.bin")}, o);
  // The second part's answer carries another ETag: the first try stops, the next starts over
  // (a new temporary file: nothing of the first try is kept) and brings the file whole.
  proxy.push(FaultProxy::Fault::pass);
  proxy.push(FaultProxy::Fault::etag);
  expect_same_file(url, ferry::TokenDataset::open({www("change/f.bin")}, tokens()), cache_,
                   www("change/f.bin"));
  // The head, some parts of the first try, all ten of the second.
  EXPECT_GE(proxy.requests().size(), 1U + 2U + 10U);

  // A file that changes at every try: a DataError naming the URL and the change.
  write_bytes(www("change/g.bin"), random_bytes(1'000'000, 72));
  const auto g = ferry::TokenDataset::open({proxy.url("change/g.bin")}, o);
  for (int i = 0; i < 100; ++i) proxy.push(FaultProxy::Fault::etag);
  expect_error<DataError>([&] { (void)samples_of(g); },
                          {"TokenDataset: " + proxy.url("change/g.bin") + ": cannot download",
                           "the file changed on the server during the download", "after 3 tries"});
  EXPECT_TRUE(cached_copy(cache_, "g.bin").empty());
}

TEST_F(Remote, ClosingADatasetStopsEveryPartUnderWayAndLeavesNothingBehind) {
  // 8 MiB at 1 MiB/s a connection, on 4: some 2 s of transfers, stopped well before.
  Nginx slow(base_ / "nginx-cancel", base_ / "www", "limit_rate 1m;");
  ASSERT_TRUE(slow.up()) << slow.error_log();
  fs::create_directories(www("cancel"));
  write_bytes(www("cancel/f.bin"), random_bytes(8U << 20, 81));
  ferry::TokenOptions o = tokens();
  o.remote.connections = 4;
  o.remote.part_bytes = 1U << 20;
  const auto start = Clock::now();
  {
    const auto ds = ferry::TokenDataset::open({slow.url("cancel/f.bin")}, o);
    std::vector<std::size_t> all(ds->size());
    std::iota(all.begin(), all.end(), std::size_t{0});
    ds->will_read(all);    // the plan: the download in parts starts
    bool started = false;  // its temporary file is there (within 5 s)
    for (int i = 0; i < 500 && !started; ++i) {
      for (const std::string& name : cache_files(cache_)) started |= name.ends_with(".tmp");
      if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(started);
  }  // the dataset goes: its transfers stop, and its threads end
  // Had the parts gone on, the file would be here: neither it nor its temporary file is.
  EXPECT_TRUE(cache_files(cache_).empty()) << cache_files(cache_).front();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
}

TEST_F(Remote, AFileInPartsGoneFromTheServerIsADataErrorAtOnceNamingItsUrl) {
  fs::create_directories(www("gone"));
  write_bytes(www("gone/f.bin"), random_bytes(1'000'000, 91));
  ferry::TokenOptions o = tokens();
  o.remote.connections = 4;
  o.remote.part_bytes = 100'000;
  const std::string url = nginx_->url("gone/f.bin");
  const auto ds = ferry::TokenDataset::open({url}, o);
  fs::remove(www("gone/f.bin"));
  const auto start = Clock::now();
  expect_error<DataError>(
      [&] { (void)samples_of(ds); },
      {"TokenDataset: " + url + ": cannot download", "HTTP 404", "not retried"});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));  // no backoff: not retried
  EXPECT_TRUE(cache_files(cache_).empty()) << cache_files(cache_).front();
}

TEST_F(Remote, AServerThatIgnoresRangeAndFileUrlsSendFilesInPartsWhole) {
  // nginx with max_ranges 0 answers every GET with the whole file (200).
  Nginx plain(base_ / "nginx-norange", base_ / "www", "max_ranges 0;");
  ASSERT_TRUE(plain.up()) << plain.error_log();
  fs::create_directories(www("norange"));
  write_bytes(www("norange/f.bin"), random_bytes(1'000'000, 61));
  ferry::TokenOptions o = tokens();
  o.remote.connections = 4;
  o.remote.part_bytes = 65536;
  const auto local = ferry::TokenDataset::open({www("norange/f.bin")}, tokens());
  const auto url = ferry::TokenDataset::open({plain.url("norange/f.bin")}, o);
  expect_same_file(url, local, cache_, www("norange/f.bin"));
  // The first answer brought the whole file; the parts asked meanwhile (at most one a
  // connection) ended, and no part was asked after.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the log's last lines
  EXPECT_LE(plain.ranged("norange/f.bin").size(), 4U);
  // file:// comes whole.
  ferry::TokenOptions f = o;
  f.remote.cache_dir = cache_ / "file";
  const auto file = ferry::TokenDataset::open({"file://" + www("norange/f.bin").string()}, f);
  expect_same_file(file, local, cache_ / "file", www("norange/f.bin"));
}

// ---- S3: a real server (s3rver) -----------------------------------------------------------------

// s3rver on a free port of 127.0.0.1 (tests/remote/s3rver.js: a bucket "ferry", keys
// S3RVER / S3RVER), its objects in `dir`; uploads with curl's own SigV4 signing.
class S3rver {
 public:
  static fs::path script() { return fs::path(FERRY_SOURCE_DIR) / "tests" / "remote" / "s3rver.js"; }
  // Why the server cannot run here, or empty when it can.
  static std::string missing() {
    if (std::system("command -v node >/dev/null 2>&1") != 0) return "node is missing";
    if (!fs::exists(script().parent_path() / "node_modules" / "s3rver")) {
      return "s3rver is missing (scripts/setup, or `npm ci` in tests/remote)";
    }
    if (std::system("command -v curl >/dev/null 2>&1") != 0) return "curl is missing";
    return {};
  }

  explicit S3rver(const fs::path& dir) {
    fs::create_directories(dir);
    for (int tries = 0; tries < 5 && pid_ <= 0; ++tries) {
      port_ = free_port();
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string s = script().string(), port = std::to_string(port_), d = dir.string();
        ::execlp("node", "node", s.c_str(), port.c_str(), d.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      for (int i = 0; i < 1000; ++i) {  // node starts in well under 10 s
        if (const int c = connect_to(port_); c >= 0) {
          ::close(c);
          pid_ = pid;
          break;
        }
        if (::waitpid(pid, nullptr, WNOHANG) == pid) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (pid_ <= 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }
  S3rver(const S3rver&) = delete;
  S3rver& operator=(const S3rver&) = delete;
  ~S3rver() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool up() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // PUTs `file` as s3://ferry/<key>, signed by curl (--aws-sigv4).
  bool upload(const fs::path& file, const std::string& key) const {
    const std::string cmd =
        "curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user S3RVER:S3RVER "
        "-H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -T '" +
        file.string() + "' '" + endpoint() + "/ferry/" + key + "' >/dev/null";
    return std::system(cmd.c_str()) == 0;
  }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

TEST_F(Remote, S3FromARealServerArrivesByteForByteAndAWrongKeyOrSecretIsADataErrorAtOnce) {
  if (const std::string why = S3rver::missing(); !why.empty()) GTEST_SKIP() << why;
  S3rver s3(base_ / "s3rver");
  ASSERT_TRUE(s3.up()) << "s3rver did not start";
  const auto local = indexed_shards(base_ / "www", "s3", 2);
  ASSERT_TRUE(s3.upload(www("tokens.bin"), "data/tokens.bin"));
  for (unsigned s = 0; s < 2; ++s) {
    const std::string name = "p-" + std::to_string(s) + ".tar";
    ASSERT_TRUE(s3.upload(local[s], "shards/" + name));
    if (s == 0) {
      ASSERT_TRUE(s3.upload(fs::path(local[s].string() + ".idx"), "shards/" + name + ".idx"));
    }
  }
  {
    ScopedEnv env({{"AWS_ENDPOINT_URL", s3.endpoint()},
                   {"AWS_REGION", "us-east-1"},
                   {"AWS_ACCESS_KEY_ID", "S3RVER"},
                   {"AWS_SECRET_ACCESS_KEY", "S3RVER"}});
    const auto tokens_local = ferry::TokenDataset::open({www("tokens.bin")}, tokens());
    const auto tokens_s3 = ferry::TokenDataset::open({"s3://ferry/data/tokens.bin"}, tokens());
    EXPECT_TRUE(samples_of(tokens_s3) == samples_of(tokens_local));
    // One shard with its index on the server (fetched while reading), one without (at open).
    ferry::WebDatasetOptions o;
    o.remote = remote();
    const auto shards =
        ferry::WebDataset::open({"s3://ferry/shards/p-0.tar", "s3://ferry/shards/p-1.tar"}, o);
    EXPECT_TRUE(samples_of(shards) == samples_of(ferry::WebDataset::open(local, {})));
  }
  {
    // In parts (through a proxy that shows the requests): ten ranged GETs, each signed.
    FaultProxy proxy(s3.port());
    const ScopedEnv env({{"AWS_ENDPOINT_URL", proxy.url("")},
                         {"AWS_REGION", "us-east-1"},
                         {"AWS_ACCESS_KEY_ID", "S3RVER"},
                         {"AWS_SECRET_ACCESS_KEY", "S3RVER"}});
    ferry::TokenOptions parted = tokens();
    parted.remote.cache_dir = cache_ / "parts";
    parted.remote.connections = 4;
    parted.remote.part_bytes = 65536;
    const auto in_parts = ferry::TokenDataset::open({"s3://ferry/data/tokens.bin"}, parted);
    EXPECT_TRUE(samples_of(in_parts) ==
                samples_of(ferry::TokenDataset::open({www("tokens.bin")}, tokens())));
    EXPECT_TRUE(cached_copy(cache_ / "parts", "tokens.bin") == read_text(www("tokens.bin")));
    const auto requests = proxy.requests();
    ASSERT_EQ(requests.size(), 11U);  // the head, then ten parts of 64 KiB (600,002 bytes)
    std::vector<std::string> ranges;
    for (std::size_t r = 1; r < requests.size(); ++r) {
      const std::string head = lower(requests[r]);
      EXPECT_NE(head.find("authorization: aws4-hmac-sha256 credential=s3rver/"), std::string::npos)
          << requests[r];
      const std::size_t at = head.find("range: bytes=");
      ASSERT_NE(at, std::string::npos) << requests[r];
      ranges.push_back(head.substr(at + 13, head.find('\r', at) - at - 13));
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::string> want = part_ranges(600'002, 65536);
    std::sort(want.begin(), want.end());
    EXPECT_EQ(ranges, want);
  }
  // An unknown key id is refused (403 InvalidAccessKeyId), and so is a wrong secret (403
  // SignatureDoesNotMatch: tests/remote/s3rver.js checks SigV4 signatures), each a DataError
  // naming the URL, the status and S3's word for it, at once (not retried).
  for (const auto& [key, secret, code] : {std::tuple<std::string, std::string, std::string>{
                                              "NOT-A-KEY", "wrong", "InvalidAccessKeyId"},
                                          {"S3RVER", "not-the-secret", "SignatureDoesNotMatch"}}) {
    const ScopedEnv env({{"AWS_ENDPOINT_URL", s3.endpoint()},
                         {"AWS_REGION", "us-east-1"},
                         {"AWS_ACCESS_KEY_ID", key},
                         {"AWS_SECRET_ACCESS_KEY", secret}});
    ferry::TokenOptions t = tokens();
    t.remote.cache_dir = cache_ / "other";
    const auto start = Clock::now();
    expect_error<DataError>(
        [&] { (void)ferry::TokenDataset::open({"s3://ferry/data/tokens.bin"}, t); },
        {"TokenDataset: s3://ferry/data/tokens.bin: cannot download", "HTTP 403 " + code,
         "not retried"});
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
    ferry::WebDatasetOptions o;
    o.remote = remote();
    o.remote.cache_dir = cache_ / "other";
    expect_error<DataError>(
        [&] { (void)ferry::WebDataset::open({"s3://ferry/shards/p-1.tar"}, o); },
        {"WebDataset: s3://ferry/shards/p-1.tar", "HTTP 403 " + code});
  }
}

TEST_F(Remote, MakeShardsUploadsShardsAndIndexesToS3AndTheyReadBackByteForByte) {
  if (const std::string why = S3rver::missing(); !why.empty()) GTEST_SKIP() << why;
  S3rver s3(base_ / "s3rver-upload");
  ASSERT_TRUE(s3.up()) << "s3rver did not start";
  // Shards as make_shards packs them; a local open writes each one's index beside it.
  fs::create_directories(base_ / "packed");
  make_shards::PackOptions pack;
  pack.out = base_ / "packed";
  pack.shard_bytes = 200'000;
  const auto shards = make_shards::pack(
      24,
      [](std::size_t i) {
        return std::vector<make_shards::Member>{{"bin", random_bytes(20'000 + i, 500 + i)},
                                                {"cls", std::to_string(i % 7)}};
      },
      pack);
  ASSERT_GE(shards.size(), 2U);
  const auto local = ferry::WebDataset::open(shards);
  std::vector<fs::path> urls;
  {
    const ScopedEnv env({{"AWS_ENDPOINT_URL", s3.endpoint()},
                         {"AWS_REGION", "us-east-1"},
                         {"AWS_ACCESS_KEY_ID", "S3RVER"},
                         {"AWS_SECRET_ACCESS_KEY", "S3RVER"}});
    const auto [bucket, prefix] = make_shards::split_s3("s3://ferry/up/train/");
    EXPECT_EQ(bucket, "ferry");
    EXPECT_EQ(prefix, "up/train");
    for (const fs::path& shard : shards) {
      const std::string key = prefix + "/" + shard.filename().string();
      make_shards::upload(fs::path(shard.string() + ".idx"), bucket, key + ".idx");
      make_shards::upload(shard, bucket, key);
      urls.emplace_back("s3://ferry/" + key);
    }
    ferry::WebDatasetOptions o;
    o.remote = remote();
    const auto remote_ds = ferry::WebDataset::open(urls, o);
    ASSERT_EQ(remote_ds->size(), local->size());
    EXPECT_TRUE(remote_ds->wants_read_order());  // the indexes came: shards while reading
    EXPECT_TRUE(samples_of(remote_ds) == samples_of(local));
  }
  // A wrong secret: the server's refusal, named.
  const ScopedEnv env({{"AWS_ENDPOINT_URL", s3.endpoint()},
                       {"AWS_REGION", "us-east-1"},
                       {"AWS_ACCESS_KEY_ID", "S3RVER"},
                       {"AWS_SECRET_ACCESS_KEY", "wrong"}});
  try {
    make_shards::upload(shards[0], "ferry", "up/other.tar");
    ADD_FAILURE() << "an upload with a wrong secret went through";
  } catch (const std::runtime_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("s3://ferry/up/other.tar: cannot upload"), std::string::npos) << m;
    EXPECT_NE(m.find("HTTP 403 SignatureDoesNotMatch"), std::string::npos) << m;
  }
}

}  // namespace
