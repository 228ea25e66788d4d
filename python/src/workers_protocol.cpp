// Worker processes for a Python dataset, the parent's side: the messages to and from a process
// (ferry/_worker.py's framing, a multiprocessing Connection's). Its answers taken off its socket
// and waited for, tasks and staging regions sent to it, an answer's sample or failure delivered.

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "py_dataset.hpp"
#include "workers.hpp"
#include "workers_internal.hpp"

namespace ferry::python {

namespace {

constexpr int kSliceMs = 100;
constexpr std::size_t kReadBytes = 1U << 16U;     // what one read of a socket may take
constexpr std::uint32_t kMaxMessage = 1U << 30U;  // a longer message is a broken process

std::uint32_t get_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8U) | std::to_integer<std::uint32_t>(p[i]);
  return v;
}

std::string seconds_text(double s) {
  std::string t = std::to_string(s);
  while (t.size() > 1 && t.back() == '0') t.pop_back();
  if (!t.empty() && t.back() == '.') t.pop_back();
  return t + " s";
}

/// A message of `payload` (Connection framing) with descriptor `fd` attached (SCM_RIGHTS), or
/// without one where fd < 0. False when the other side is gone.
bool send_message(int socket, std::span<const std::byte> payload, int fd) {
  std::vector<std::byte> frame(4 + payload.size());
  const auto n = static_cast<std::uint32_t>(payload.size());
  for (unsigned i = 0; i < 4; ++i) frame[i] = static_cast<std::byte>(n >> (8U * (3 - i)));
  std::copy(payload.begin(), payload.end(), frame.begin() + 4);
  if (fd < 0) return send_all(socket, frame.data(), frame.size());
  iovec io{frame.data(), frame.size()};
  alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(int))> control{};
  msghdr message{};
  message.msg_iov = &io;
  message.msg_iovlen = 1;
  message.msg_control = control.data();
  message.msg_controllen = control.size();
  cmsghdr* header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(header), &fd, sizeof fd);
  for (;;) {
    const ssize_t k = ::sendmsg(socket, &message, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    // The descriptor went with the first byte; the rest (if any) goes plainly.
    const auto sent = static_cast<std::size_t>(k);
    return sent == frame.size() || send_all(socket, frame.data() + sent, frame.size() - sent);
  }
}

}  // namespace

bool send_all(int fd, const std::byte* data, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, data, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    data += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

void append_task(std::vector<std::byte>& out, std::size_t index, std::uint64_t seed,
                 std::size_t map_size, std::size_t state_at, std::size_t group, std::uint64_t token,
                 std::uint64_t region, std::span<const std::size_t> nbytes,
                 std::span<const std::size_t> offsets) {
  // Sized once and written in place: byte by byte (push_back), the tasks of a share were a
  // quarter of the training process's time on small samples.
  const std::size_t words = kTaskWords + 2 * nbytes.size();
  const auto n = static_cast<std::uint32_t>(8 * words);
  const std::size_t at = out.size();
  out.resize(at + 4 + n);
  std::byte* p = out.data() + at;
  for (unsigned i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(n >> (8U * (3 - i)));
  p += 4;
  const auto put = [&p](std::uint64_t v) {
    for (unsigned i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8U * i));
    p += 8;
  };
  for (const std::uint64_t v : {std::uint64_t{index}, seed, std::uint64_t{map_size},
                                std::uint64_t{state_at}, std::uint64_t{group}, token, region}) {
    put(v);
  }
  for (std::size_t f = 0; f < nbytes.size(); ++f) {
    put(nbytes[f]);
    put(offsets[f]);
  }
}

bool ProcessPool::drain(Child& c, bool wait) {
  const auto begin = std::chrono::steady_clock::now();
  while (c.stale > 0) {
    if (next_message(c)) {
      --c.stale;
      continue;
    }
    pollfd fd{c.fd, POLLIN, 0};
    const int ready = ::poll(&fd, 1, wait ? kSliceMs : 0);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if (!wait || stopping()) return false;
      // A read given up whose __getitem__ runs past the timeout (its epoch's error raised, or
      // its batch abandoned): the process is killed and replaced, as for a read of its own; it
      // held the next read for ever.
      if (options_.timeout > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() >
              options_.timeout) {
        ::kill(static_cast<pid_t>(c.pid), SIGKILL);
        retire(c);
        return true;
      }
      continue;
    }
    if (ready < 0 || !take_in(c)) {  // it ended meanwhile: replaced before its next task
      retire(c);
      return true;
    }
  }
  return true;
}

bool ProcessPool::take_in(Child& c) {
  if (c.in_at == c.in_end) {
    c.in_at = c.in_end = 0;
  } else if (c.in_at > 0 && c.in.size() - c.in_end < kReadBytes / 4) {
    std::memmove(c.in.data(), c.in.data() + c.in_at, c.in_end - c.in_at);
    c.in_end -= c.in_at;
    c.in_at = 0;
  }
  if (c.in.size() - c.in_end < kReadBytes / 4) c.in.resize(std::max(2 * c.in.size(), kReadBytes));
  for (;;) {
    const ssize_t k = ::read(c.fd, c.in.data() + c.in_end, c.in.size() - c.in_end);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    c.in_end += static_cast<std::size_t>(k);
    return true;
  }
}

bool ProcessPool::next_message(Child& c) {
  if (c.in_end - c.in_at < 4) return false;
  std::uint32_t size = 0;
  for (std::size_t i = 0; i < 4; ++i) {
    size = (size << 8U) | std::to_integer<std::uint32_t>(c.in[c.in_at + i]);
  }
  if (c.in_end - c.in_at - 4 < size) return false;
  const auto* at = c.in.data() + c.in_at + 4;
  c.taken.assign(at, at + size);
  c.in_at += 4 + std::size_t{size};
  return true;
}

bool ProcessPool::ended(const Child& c) noexcept {
  if (c.fd < 0) return true;
  pollfd fd{c.fd, 0, 0};
  return ::poll(&fd, 1, 0) > 0 && (fd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0;
}

const std::vector<std::byte>& ProcessPool::receive(Child& c, std::size_t index, bool answer,
                                                   int also_stale, DoneMark done) {
  bool timed = answer && options_.timeout > 0;
  // (The clock read only under a timeout: a read of a sample otherwise takes none.)
  auto begin = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  bool initializing = false;  // in its worker_init_fn: that has the timeout's time too
  for (;;) {
    if (abandoned_.load()) {
      // Its epoch was left: an answer still to come is discarded when it comes, and its sample
      // is not written (nor those of the tasks behind it).
      if (answer) cancel_in_flight(c, done);
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (answer) c.stale += 1 + also_stale;
      }
      release(c);
      throw Error("Python dataset: the read of sample " + std::to_string(index) +
                  " was abandoned (its epoch was left)");
    }
    if (next_message(c)) {
      if (c.taken.empty()) lost(c, index, "sent an empty message");
      if (!answer && c.taken.size() == 1 && c.taken[0] == std::byte{'I'}) {
        // Its dataset unpickled, it runs worker_init_fn now.
        initializing = true;
        timed = options_.timeout > 0;
        begin = std::chrono::steady_clock::now();
        continue;
      }
      return c.taken;
    }
    if (c.in_end - c.in_at >= 4) {
      std::uint32_t size = 0;
      for (std::size_t i = 0; i < 4; ++i) {
        size = (size << 8U) | std::to_integer<std::uint32_t>(c.in[c.in_at + i]);
      }
      if (size > kMaxMessage)
        lost(c, index, "sent a message of " + std::to_string(size) + " bytes");
    }
    std::array<pollfd, 2> fds{pollfd{c.fd, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}};
    int slice = kSliceMs;
    if (timed) {
      const double left =
          options_.timeout -
          std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
      if (left <= 0) {
        ::kill(static_cast<pid_t>(c.pid), SIGKILL);
        const std::string how = ending(c);
        if (initializing) {
          // Once costs its sample (a process starts again); twice, it would only hang again.
          const std::lock_guard<std::mutex> lock(mutex_);
          if (++init_overruns_ >= 2) {
            init_overran_ = "Python dataset: the worker_init_fn of worker process " +
                            std::to_string(c.id) + " (pid " + std::to_string(c.pid) +
                            ") overran timeout=" + seconds_text(options_.timeout) +
                            ", for the second time in this epoch; no process starts again "
                            "until the next epoch";
          }
        }
        lost(c, index,
             "overran timeout=" + seconds_text(options_.timeout) +
                 (initializing ? " in its worker_init_fn" : "") + " and " +
                 (how.rfind("was killed", 0) == 0 ? "was killed" : how),
             /*reading=*/!initializing);
      }
      slice = std::min(slice, static_cast<int>(left * 1000) + 1);
    }
    const int ready = ::poll(fds.data(), fds.size(), slice);
    if (ready < 0 && errno != EINTR) lost(c, index, std::string("poll: ") + std::strerror(errno));
    if (fds[1].revents != 0) {
      if (answer) cancel_in_flight(c, done);
      release(c);
      throw Error("Python dataset: the loader's worker processes are stopping");
    }
    if (ready > 0 && fds[0].revents != 0 && !take_in(c)) {
      // It ended. The samples it did before, their answers not sent yet (it answers in
      // groups), are whole, their tasks marked done: taken as answered. The first not done is
      // the one it ended on.
      const bool marked =
          answer && done.token != 0 && done.at + sizeof(std::uint64_t) <= c.map_size;
      const TaskState::Code code =
          marked ? TaskState(c.map + done.at, done.token).code() : TaskState::Code::reading;
      if (code == TaskState::Code::done) {
        c.taken.assign(1, std::byte{0});
        return c.taken;
      }
      if (code == TaskState::Code::pending) {  // it never began this one: not the sample's fault
        const std::string why = "worker process " + std::to_string(c.id) + " (pid " +
                                std::to_string(c.pid) + ") " + ending(c) +
                                " before reading sample " + std::to_string(index);
        retire(c);
        release(c);
        throw Unstarted("Python dataset: " + why);
      }
      lost(c, index, ending(c));
    }
  }
}

bool ProcessPool::map_region(Child& c, const SharedRegion& region) {
  const std::uint64_t freed = shared_regions_freed();
  if (freed != c.freed_seen) {
    c.freed_seen = freed;
    for (std::size_t i = 0; i < c.regions.size();) {
      if (shared_region_live(c.regions[i])) {
        ++i;
        continue;
      }
      std::vector<std::byte> drop;  // <Q id>: let it go
      put_u64(drop, c.regions[i]);
      if (!send_message(c.fd, drop, -1)) return false;
      c.regions.erase(c.regions.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  if (std::find(c.regions.begin(), c.regions.end(), region.id) != c.regions.end()) return true;
  std::vector<std::byte> map;  // <QQ id, size>, its memfd attached: map it
  put_u64(map, region.id);
  put_u64(map, region.size);
  if (!send_message(c.fd, map, region.fd)) return false;
  c.regions.push_back(region.id);
  return true;
}

void ProcessPool::deliver(const PyDataset& dataset, Child& c, std::size_t index,
                          const std::vector<std::byte>& answer, std::size_t base, bool direct,
                          SampleRef out) {
  const std::size_t size = answer.size();
  if (answer[0] == std::byte{0}) {
    if (direct) return;  // the process wrote the sample into its place in the slot
    // Each field at a 64-byte aligned offset from `base`, as the task said.
    for (std::size_t f = 0; f < field_count_; ++f) {
      const std::size_t n = out.nbytes(f);
      if (n != 0) std::memcpy(out.data(f), c.map + base, n);
      base += aligned(n);
    }
    return;
  }
  // A failure: its text, its traceback's text, the exception pickled. Marked 2: the process's
  // start failed (its worker_init_fn raised), so every task it gets fails alike; it is replaced
  // once let go, and the new one runs worker_init_fn again (as torch's next epoch's would).
  if (answer[0] == std::byte{2}) c.failed_start = true;
  const std::size_t head = 1 + 8;
  const std::uint32_t text_size = size >= head ? get_u32(answer.data() + 1) : 0;
  const std::uint32_t trace_size = size >= head ? get_u32(answer.data() + 5) : 0;
  if (size < head || size - head < static_cast<std::size_t>(text_size) + trace_size) {
    throw DataError("Python dataset: worker process " + std::to_string(c.id) +
                    " gave a malformed answer for sample " + std::to_string(index));
  }
  const auto* p = reinterpret_cast<const char*>(answer.data() + head);
  std::string text(p, text_size);
  std::string trace(p + text_size, trace_size);
  std::string pickled(p + text_size + trace_size, size - head - text_size - trace_size);
  // ferry's own DataError (nothing pickled) has its own text, "Python dataset: ..." included.
  if (pickled.empty()) throw DataError(text);
  dataset.keep_remote_failure(index, std::move(pickled), std::move(trace));
  throw DataError("Python dataset: " + text);
}

}  // namespace ferry::python
