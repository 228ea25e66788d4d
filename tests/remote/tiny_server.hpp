#pragma once

// A small HTTP server on 127.0.0.1 for tests of hostile servers (a thread, a socket): each
// connection's request head goes to a handler that answers as it likes.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ferry::testing {

// An HTTP server on 127.0.0.1: each connection's request head goes to `handler` (on a thread of
// its own), which answers on the socket as it likes; the connection is closed after it.
class TinyServer {
 public:
  using Clock = std::chrono::steady_clock;
  // The request's path (with its query) and the connected socket.
  using Handler = std::function<void(const std::string& path, int fd, const TinyServer&)>;

  explicit TinyServer(Handler handler) : handler_(std::move(handler)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener_, 16) != 0 ||
        ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error("TinyServer: cannot listen");
    }
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  TinyServer(const TinyServer&) = delete;
  TinyServer& operator=(const TinyServer&) = delete;
  ~TinyServer() {
    stop_ = true;
    thread_.join();
    for (std::thread& t : handlers_) t.join();
    ::close(listener_);
  }

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/" + path;
  }
  // The paths asked for, in order.
  std::vector<std::string> paths() const {
    const std::lock_guard lock(mutex_);
    return paths_;
  }
  bool stopping() const { return stop_.load(); }
  // The request head being answered (for the handler, on its thread).
  static const std::string& head() { return t_head; }

  // Sends all of `bytes`; false once the client is gone.
  static bool send_all(int fd, std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }
  // A whole answer: `status` with `body` and its Content-Length.
  static void answer(int fd, int status, const std::string& body) {
    send_all(fd, "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body);
  }
  // Sleeps up to `seconds`, less when the server stops.
  void pause(double seconds) const {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(seconds));
    while (!stop_ && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int client = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      handlers_.emplace_back([this, client] {
        std::string head;
        char buf[4096];
        while (head.find("\r\n\r\n") == std::string::npos) {
          pollfd q{client, POLLIN, 0};
          if (::poll(&q, 1, 5000) <= 0) break;
          const ssize_t n = ::recv(client, buf, sizeof buf, 0);
          if (n <= 0) break;
          head.append(buf, static_cast<std::size_t>(n));
        }
        t_head = head;
        // "GET /<path> HTTP/1.1"
        const std::size_t from = head.find(' ') + 2, to = head.find(' ', from);
        const std::string path =
            from < head.size() && to != std::string::npos ? head.substr(from, to - from) : "";
        {
          const std::lock_guard lock(mutex_);
          paths_.push_back(path);
        }
        handler_(path, client, *this);
        ::close(client);
      });
    }
  }

  static inline thread_local std::string t_head;
  Handler handler_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<std::string> paths_;
  std::vector<std::thread> handlers_;
  std::thread thread_;
};

}  // namespace ferry::testing
