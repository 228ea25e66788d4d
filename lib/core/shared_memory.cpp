// SharedBuffer: host memory in a memfd that other processes map (a Python dataset's worker
// processes write samples straight into the loader's staging slots), and the registry that finds
// the buffer behind an address.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "ferry/error.hpp"
#include "ferry/memory.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry {
namespace {

struct Live {
  std::size_t size = 0;
  int fd = -1;
  std::uint64_t id = 0;
};

struct Registry {
  std::shared_mutex mutex;
  std::map<std::uintptr_t, Live> by_start;  // the live buffers, by their first byte
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<std::uint64_t> freed{0};
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: buffers may outlive static destruction
  return *r;
}

std::size_t page_bytes() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

SharedBuffer SharedBuffer::allocate(std::size_t nbytes, bool pin) {
  const std::size_t page = page_bytes();
  if (nbytes > static_cast<std::size_t>(PTRDIFF_MAX) - page) {
    throw ConfigError("SharedBuffer::allocate: " + std::to_string(nbytes) + " bytes is too many");
  }
  SharedBuffer b;
  b.size_ = nbytes;
  b.mapped_ = (std::max<std::size_t>(nbytes, 1) + page - 1) / page * page;
  b.fd_ = ::memfd_create("ferry-staging", MFD_CLOEXEC);
  if (b.fd_ < 0) {
    throw ConfigError(std::string("SharedBuffer::allocate: memfd_create: ") + std::strerror(errno));
  }
  if (::ftruncate(b.fd_, static_cast<off_t>(b.mapped_)) != 0) {
    const int err = errno;
    b.reset();
    throw ConfigError("SharedBuffer::allocate: " + std::to_string(nbytes) +
                      " bytes of shared memory: " + std::strerror(err));
  }
  void* p = ::mmap(nullptr, b.mapped_, PROT_READ | PROT_WRITE, MAP_SHARED, b.fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    b.reset();
    throw ConfigError("SharedBuffer::allocate: mapping " + std::to_string(nbytes) +
                      " bytes of shared memory: " + std::strerror(err));
  }
  b.data_ = p;
  if (pin && detail::cuda::device_count() > 0) {
    try {
      detail::cuda::host_register(b.data_, b.mapped_);
    } catch (...) {
      b.reset();
      throw;
    }
    b.registered_ = true;
  }
  Registry& r = registry();
  b.id_ = r.next_id.fetch_add(1);
  const std::unique_lock lock(r.mutex);
  r.by_start[reinterpret_cast<std::uintptr_t>(b.data_)] = Live{b.size_, b.fd_, b.id_};
  return b;
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      id_(std::exchange(other.id_, 0)),
      registered_(std::exchange(other.registered_, false)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
    fd_ = std::exchange(other.fd_, -1);
    id_ = std::exchange(other.id_, 0);
    registered_ = std::exchange(other.registered_, false);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() { reset(); }

void SharedBuffer::reset() noexcept {
  if (id_ != 0) {
    Registry& r = registry();
    {
      const std::unique_lock lock(r.mutex);
      r.by_start.erase(reinterpret_cast<std::uintptr_t>(data_));
    }
    r.freed.fetch_add(1);
  }
  if (registered_) detail::cuda::host_unregister(data_);
  if (data_ != nullptr) ::munmap(data_, mapped_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  size_ = mapped_ = 0;
  fd_ = -1;
  id_ = 0;
  registered_ = false;
}

bool shared_region(const void* p, std::size_t bytes, SharedRegion& out) noexcept {
  Registry& r = registry();
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::shared_lock lock(r.mutex);
  auto it = r.by_start.upper_bound(at);
  if (it == r.by_start.begin()) return false;
  --it;
  const std::size_t offset = at - it->first;
  if (offset > it->second.size || bytes > it->second.size - offset) return false;
  out = SharedRegion{it->second.fd, it->second.id, it->second.size, offset};
  return true;
}

std::uint64_t shared_regions_freed() noexcept { return registry().freed.load(); }

bool shared_region_live(std::uint64_t id) noexcept {
  Registry& r = registry();
  const std::shared_lock lock(r.mutex);
  for (const auto& [start, live] : r.by_start) {
    if (live.id == id) return true;
  }
  return false;
}

}  // namespace ferry
