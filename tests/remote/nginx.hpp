#pragma once

// nginx started by a test on a free port of 127.0.0.1, serving a folder, with an access log of
// each request's status, body bytes sent and Range; and the small socket and file helpers the
// tests of files given as URLs share.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../table_writer.hpp"

namespace ferry::testing {

namespace fs = std::filesystem;

inline int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(s);
    return 0;
  }
  ::close(s);
  return ntohs(a.sin_port);
}

inline int connect_to(int port) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(s);
    return -1;
  }
  return s;
}

inline std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary | std::ios::ate);
  if (!in) return {};
  std::string text(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  return text;
}

// The lines of `text` (without their "\n" or "\r\n").
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

// nginx on a free port of 127.0.0.1, serving `root`; its logs and pid file in `dir`.
class Nginx {
 public:
  static constexpr const char* kBinary = "/usr/sbin/nginx";

  // `extra`: more directives for the server block (e.g. "limit_rate 2m;").
  Nginx(const fs::path& dir, const fs::path& root, const std::string& extra = "") : dir_(dir) {
    fs::create_directories(dir / "tmp");
    for (int tries = 0; tries < 5 && pid_ <= 0; ++tries) {
      port_ = free_port();
      std::ofstream(dir / "nginx.conf")
          << "daemon off;\nmaster_process off;\npid " << (dir / "nginx.pid").string()
          << ";\nerror_log " << (dir / "error.log").string()
          << ";\nevents { worker_connections 64; }\nhttp {\n  log_format ranged "
          << "'$remote_addr [$time_local] \"$request\" $status $body_bytes_sent "
          << "range=\"$http_range\" conn=$connection';\n  access_log "
          << (dir / "access.log").string() << " ranged;\n  client_body_temp_path "
          << (dir / "tmp").string() << ";\n  proxy_temp_path " << (dir / "tmp").string()
          << ";\n  fastcgi_temp_path " << (dir / "tmp").string()
          << ";\n  default_type application/octet-stream;\n  server { listen 127.0.0.1:" << port_
          << "; root " << root.string() << "; " << extra << " }\n}\n";
      const pid_t pid = ::fork();
      if (pid == 0) {
        const std::string prefix = dir.string(), conf = (dir / "nginx.conf").string(),
                          log = (dir / "error.log").string();
        ::execl(kBinary, "nginx", "-p", prefix.c_str(), "-c", conf.c_str(), "-e", log.c_str(),
                static_cast<char*>(nullptr));
        ::_exit(127);
      }
      // Up when it accepts a connection (at most 5 s); else gone, and another port is tried.
      for (int i = 0; i < 500; ++i) {
        if (const int s = connect_to(port_); s >= 0) {
          ::close(s);
          pid_ = pid;
          break;
        }
        int status = 0;
        if (::waitpid(pid, &status, WNOHANG) == pid) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (pid_ <= 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }
  Nginx(const Nginx&) = delete;
  Nginx& operator=(const Nginx&) = delete;
  ~Nginx() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }

  bool up() const { return pid_ > 0; }
  int port() const { return port_; }
  std::string url(const std::string& name) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + name;
  }
  // GET requests for /<name> in the access log that download it (whole, or the rest of it),
  // not those for its head (a TokenDataset's open: "Range: bytes=0-<n>").
  int gets(const std::string& name) const {
    int n = 0;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      if (line.find("\"GET /" + name + " ") != std::string::npos && !is_head(line)) ++n;
    }
    return n;
  }
  // GET requests for /<name>'s head.
  int heads(const std::string& name) const {
    int n = 0;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      if (line.find("\"GET /" + name + " ") != std::string::npos && is_head(line)) ++n;
    }
    return n;
  }
  // gets(name) once it reaches `n` (nginx logs a request just after its last byte left, so a
  // client may be done first), or after 2 s whatever it is.
  int gets_settled(const std::string& name, int n) const {
    for (int i = 0; i < 200 && gets(name) < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return gets(name);
  }
  // heads(name) once it reaches `n`, or after 2 s whatever it is.
  int heads_settled(const std::string& name, int n) const {
    for (int i = 0; i < 200 && heads(name) < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return heads(name);
  }
  std::string error_log() const { return read_text(dir_ / "error.log"); }
  // Whether an access log line is a request for a file's first bytes alone (fewer than 64 KiB:
  // a download's first part asks for more).
  static bool is_head(const std::string& line) {
    const std::size_t at = line.find("range=\"bytes=0-");
    if (at == std::string::npos || line.size() <= at + 15 ||
        std::isdigit(static_cast<unsigned char>(line[at + 15])) == 0) {
      return false;
    }
    return std::strtoull(line.c_str() + at + 15, nullptr, 10) < 65535;
  }
  // GET requests for /<name> that start a download: whole, or its first part.
  int starts(const std::string& name) const {
    int n = 0;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      if (line.find("\"GET /" + name + " ") == std::string::npos || is_head(line)) continue;
      if (line.find("range=\"\"") != std::string::npos ||
          line.find("range=\"bytes=0-") != std::string::npos) {
        ++n;
      }
    }
    return n;
  }
  // The ranged GET requests for /<name> that are not heads: each one's "<first>-<last>" and
  // the number of the connection it came on.
  std::vector<std::pair<std::string, std::string>> ranged(const std::string& name) const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      if (line.find("\"GET /" + name + " ") == std::string::npos || is_head(line)) continue;
      const std::size_t at = line.find("range=\"bytes=");
      const std::size_t conn = line.find(" conn=");
      if (at == std::string::npos || conn == std::string::npos) continue;
      const std::size_t from = at + 13;
      out.emplace_back(line.substr(from, line.find('"', from) - from), line.substr(conn + 6));
    }
    return out;
  }
  // The paths of the GET requests in the access log, in the order nginx logged them.
  std::vector<std::string> get_paths() const {
    std::vector<std::string> paths;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      const std::size_t at = line.find("\"GET /");
      if (at == std::string::npos || is_head(line)) continue;
      const std::string_view rest = std::string_view(line).substr(at + 6);
      paths.emplace_back(rest.substr(0, rest.find(' ')));
    }
    return paths;
  }

  // The body bytes nginx sent for GET requests of /<name> (all of them, heads included).
  std::uint64_t bytes_sent(const std::string& name) const {
    std::uint64_t n = 0;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      const std::size_t at = line.find("\"GET /" + name + " ");
      if (at == std::string::npos) continue;
      // "... HTTP/1.1" <status> <bytes> range=...
      const std::size_t q = line.find('"', at + 1);
      if (q == std::string::npos) continue;
      const std::size_t sp = line.find(' ', q + 2);
      if (sp == std::string::npos) continue;
      n += std::strtoull(line.c_str() + sp + 1, nullptr, 10);
    }
    return n;
  }
  // GET requests of /<name>, heads included.
  int requests(const std::string& name) const {
    int n = 0;
    for (const std::string& line : lines_of(read_text(dir_ / "access.log"))) {
      if (line.find("\"GET /" + name + " ") != std::string::npos) ++n;
    }
    return n;
  }

 private:
  fs::path dir_;
  int port_ = 0;
  pid_t pid_ = -1;
};

/// For a test suite of tables given as URLs: runs tests/table's writer `script` (with node and
/// tests/table's node_modules, which must hold `packages`) into `dir`/www, then serves that folder
/// by a new nginx (`nginx`, its files in `dir`/nginx). Returns why the suite must be skipped, or
/// an empty string when all is up.
inline std::string serve_written_tables(const fs::path& source_dir, const std::string& script,
                                        const std::vector<std::string>& packages,
                                        const fs::path& dir, Nginx*& nginx) {
  if (!fs::exists(Nginx::kBinary)) {
    return std::string(Nginx::kBinary) + " is missing (apt-get install nginx-light)";
  }
  fs::remove_all(dir);
  const std::string failed =
      run_table_writer(source_dir, script, packages, {(dir / "www").string()});
  if (!failed.empty()) return failed;
  nginx = new Nginx(dir / "nginx", dir / "www");
  if (!nginx->up()) return "nginx did not start; its error log: " + nginx->error_log();
  return {};
}

/// `value()` once it reaches `want` (nginx logs a request just after its last byte left, so a
/// client may be done first), or after 2 s whatever it is.
template <class T, class Value>
T settled(const Value& value, T want) {
  for (int i = 0; i < 200 && value() < want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return value();
}

}  // namespace ferry::testing
