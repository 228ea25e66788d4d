#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace {

using ferry::Device;
using ferry::DeviceBuffer;
using ferry::HostBuffer;
using ferry::PinnedBuffer;
using ferry::PinnedPool;
using ferry::SharedBuffer;
using ferry::SharedRegion;

using ferry::testing::expect_error;

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

constexpr std::size_t k2to62 = std::size_t{1} << 62;
constexpr std::size_t kMaxSize = std::numeric_limits<std::size_t>::max();

TEST(HostBuffer, IsAlignedAndMoveOnly) {
  HostBuffer a = HostBuffer::allocate(1000);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), 1000U);
  EXPECT_EQ(address(a.data()) % 64, 0U);
  std::memset(a.data(), 7, a.size());
  void* p = a.data();
  HostBuffer b = std::move(a);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  EXPECT_EQ(a.size(), 0U);       // NOLINT(bugprone-use-after-move)
  HostBuffer c = HostBuffer::allocate(8);
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(static_cast<unsigned char*>(c.data())[999], 7);
  static_assert(!std::is_copy_constructible_v<HostBuffer>);
  static_assert(std::is_nothrow_destructible_v<HostBuffer>);
}

// The line of /proc/self/smaps that says `key` of the mapping holding `address`, or "".
std::string smaps_field(const void* address, const std::string& key) {
  std::ifstream in("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    unsigned long lo = 0;
    unsigned long hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind(key + ":", 0) == 0) {
      return line;
    }
  }
  return "";
}

TEST(HostBuffer, ALargeBufferAsksForHugePagesInsideItsOwnBytesOnly) {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.empty() || mode.find("[never]") != std::string::npos) {
    GTEST_SKIP() << "transparent huge pages are off here (" << mode << ")";
  }
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  constexpr std::size_t kBytes = std::size_t{16} << 20;
  HostBuffer big = HostBuffer::allocate(kBytes);
  auto* bytes = static_cast<std::uint8_t*>(big.data());
  std::memset(bytes, 0x5a, kBytes);
  // The huge pages inside the buffer may be huge; the bytes before the first of them keep
  // their own advice (they may share pages with other allocations).
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes);
  const std::uintptr_t first_huge = (begin + kHuge - 1) / kHuge * kHuge;
  const std::uint8_t* inside = bytes + (first_huge - begin) + kHuge;
  EXPECT_NE(smaps_field(inside, "VmFlags").find(" hg"), std::string::npos)
      << smaps_field(inside, "VmFlags");
  const std::string eligible = smaps_field(inside, "THPeligible");
  EXPECT_EQ(eligible.substr(eligible.find_last_of(' ') + 1), "1") << eligible;
  if (begin != first_huge) {
    EXPECT_EQ(smaps_field(bytes, "VmFlags").find(" hg"), std::string::npos)
        << smaps_field(bytes, "VmFlags");
  }
  EXPECT_EQ(bytes[0], 0x5a);
  EXPECT_EQ(bytes[kBytes - 1], 0x5a);
}

TEST(SharedBuffer, IsFoundFromAnyAddressInsideItAndSharedWithAnotherMapping) {
  SharedBuffer a = SharedBuffer::allocate(10000, /*pin=*/false);
  SharedBuffer b = SharedBuffer::allocate(4096, /*pin=*/false);
  ASSERT_NE(a.data(), nullptr);
  EXPECT_EQ(a.size(), 10000U);
  EXPECT_FALSE(a.locked());  // not pinned, and no GPU here
  EXPECT_GE(a.fd(), 0);
  EXPECT_NE(a.id(), 0U);
  EXPECT_GT(b.id(), a.id());
  auto* bytes = static_cast<unsigned char*>(a.data());
  SharedRegion r;
  ASSERT_TRUE(ferry::shared_region(bytes + 100, 50, r));
  EXPECT_EQ(r.id, a.id());
  EXPECT_EQ(r.fd, a.fd());
  EXPECT_EQ(r.size, 10000U);
  EXPECT_EQ(r.offset, 100U);
  ASSERT_TRUE(ferry::shared_region(bytes, 10000, r));
  EXPECT_EQ(r.offset, 0U);
  EXPECT_FALSE(ferry::shared_region(bytes + 9990, 20, r));  // runs past its end
  ASSERT_TRUE(ferry::shared_region(b.data(), 1, r));
  EXPECT_EQ(r.id, b.id());
  const HostBuffer other = HostBuffer::allocate(64);
  EXPECT_FALSE(ferry::shared_region(other.data(), 1, r));

  // Another mapping of its memfd (what another process maps) sees the same bytes, both ways.
  void* map = ::mmap(nullptr, 10000, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd(), 0);
  ASSERT_NE(map, MAP_FAILED);
  auto* seen = static_cast<unsigned char*>(map);
  bytes[5000] = 42;
  EXPECT_EQ(seen[5000], 42);
  seen[7] = 9;
  EXPECT_EQ(bytes[7], 9);
  ::munmap(map, 10000);
  // And a child process writes into it.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    bytes[9999] = 77;
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(bytes[9999], 77);

  // Moved, it is still found; freed, it is not, and the count of freed buffers moves.
  const std::uint64_t id = a.id();
  SharedBuffer c = std::move(a);
  EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from state is defined
  ASSERT_TRUE(ferry::shared_region(bytes + 1, 1, r));
  EXPECT_EQ(r.id, id);
  EXPECT_TRUE(ferry::shared_region_live(id));
  const std::uint64_t freed = ferry::shared_regions_freed();
  c = SharedBuffer();
  EXPECT_FALSE(ferry::shared_region_live(id));
  EXPECT_EQ(ferry::shared_regions_freed(), freed + 1);
  EXPECT_TRUE(ferry::shared_region_live(b.id()));
  static_assert(!std::is_copy_constructible_v<SharedBuffer>);
}

TEST(PinnedBuffer, LockedSaysTruthfullyWhetherThePagesAreLocked) {
  const std::size_t before = ferry::testing::locked_bytes();
  constexpr std::size_t kBytes = 4 << 20;
  std::size_t during = 0;
  {
    PinnedBuffer b = PinnedBuffer::allocate(kBytes);
    ASSERT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), kBytes);
    EXPECT_EQ(address(b.data()) % static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)), 0U);
    during = ferry::testing::locked_bytes();
    if (b.lock() == PinnedBuffer::Lock::mlock) {
      EXPECT_TRUE(b.locked());
      EXPECT_GE(during, before + kBytes);
    } else if (b.lock() == PinnedBuffer::Lock::none) {
      EXPECT_FALSE(b.locked());
      EXPECT_EQ(during, before);
    } else {
      EXPECT_GT(ferry::cuda_device_count(), 0);  // cudaHostAlloc only where CUDA is usable
    }
    std::memset(b.data(), 1, b.size());
    PinnedBuffer moved = std::move(b);
    EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
    EXPECT_FALSE(b.locked());      // NOLINT(bugprone-use-after-move)
  }
  EXPECT_EQ(ferry::testing::locked_bytes(), before) << "the destructor left pages locked";
  static_assert(!std::is_copy_assignable_v<PinnedBuffer>);
}

TEST(DeviceBuffer, HostStandInAllocatesAndFrees) {
  DeviceBuffer b = DeviceBuffer::allocate(Device::cpu(), 4096);
  ASSERT_NE(b.data(), nullptr);
  EXPECT_EQ(b.device(), Device::cpu());
  std::memset(b.data(), 3, 4096);
  DeviceBuffer c = std::move(b);
  EXPECT_EQ(b.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(c.size(), 4096U);
  if (ferry::cuda_device_count() == 0) {
    EXPECT_THROW((void)DeviceBuffer::allocate(Device::cuda(), 64), ferry::DeviceError);
  }
}

TEST(DeviceBuffer, AdoptedMemoryIsFreedExactlyOnce) {
  static int frees = 0;
  frees = 0;
  static int storage = 0;
  auto count_free = [](void* /*context*/, void* /*data*/) noexcept { ++frees; };
  {
    DeviceBuffer a(&storage, sizeof storage, Device::cpu(), count_free, nullptr);
    DeviceBuffer b = std::move(a);
    DeviceBuffer c;
    c = std::move(b);
    EXPECT_EQ(frees, 0);
  }
  EXPECT_EQ(frees, 1);
}

TEST(PinnedPool, SizeClassesArePowersOfTwoFromFourKiB) {
  EXPECT_EQ(PinnedPool::size_class(0), 4096U);
  EXPECT_EQ(PinnedPool::size_class(1), 4096U);
  EXPECT_EQ(PinnedPool::size_class(4096), 4096U);
  EXPECT_EQ(PinnedPool::size_class(4097), 8192U);
  EXPECT_EQ(PinnedPool::size_class(3 << 20), 4U << 20);
}

TEST(PinnedPool, ReusesReturnedBuffersOfTheSameClass) {
  PinnedPool pool;
  void* first = nullptr;
  {
    PinnedPool::Block b = pool.acquire(5000);
    first = b.data();
    EXPECT_EQ(b.size(), 8192U);
    EXPECT_EQ(pool.stats().misses, 1U);
    EXPECT_EQ(pool.stats().in_use_bytes, 8192U);
    EXPECT_EQ(pool.stats().cached_bytes, 0U);
  }
  EXPECT_EQ(pool.stats().cached_bytes, 8192U);
  EXPECT_EQ(pool.stats().in_use_bytes, 0U);
  {
    PinnedPool::Block again = pool.acquire(8000);  // same class
    EXPECT_EQ(again.data(), first);
    EXPECT_EQ(pool.stats().hits, 1U);
    PinnedPool::Block other = pool.acquire(100);  // another class: a new buffer
    EXPECT_NE(other.data(), first);
    EXPECT_EQ(pool.stats().misses, 2U);
    PinnedPool::Block moved = std::move(other);
    EXPECT_EQ(pool.stats().in_use_bytes, 8192U + 4096U);
  }
  EXPECT_EQ(pool.stats().cached_bytes, 8192U + 4096U);
  pool.trim();
  EXPECT_EQ(pool.stats().cached_bytes, 0U);
  (void)pool.acquire(8192);
  EXPECT_EQ(pool.stats().misses, 3U);
}

TEST(PinnedPool, KeepsAtMostItsCacheLimit) {
  PinnedPool pool(/*max_cached_bytes=*/8192);
  {
    std::vector<PinnedPool::Block> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(pool.acquire(4096));
  }
  EXPECT_EQ(pool.stats().cached_bytes, 8192U);
  EXPECT_EQ(pool.stats().in_use_bytes, 0U);
}

TEST(PinnedPool, BlocksMayOutliveThePool) {
  PinnedPool::Block survivor;
  {
    PinnedPool pool;
    survivor = pool.acquire(4096);
  }
  std::memset(survivor.data(), 9, survivor.size());
  survivor = PinnedPool::Block();  // returns to the orphaned cache and is freed with it
}

TEST(PinnedPool, ConcurrentAcquireAndReleaseKeepCountsExact) {
  PinnedPool pool;
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < kRounds; ++i) {
        PinnedPool::Block b = pool.acquire(static_cast<std::size_t>(4096 << ((i + t) % 3)));
        static_cast<unsigned char*>(b.data())[0] = static_cast<unsigned char>(i);
      }
    });
  }
  for (auto& th : threads) th.join();
  const PinnedPool::Stats s = pool.stats();
  EXPECT_EQ(s.hits + s.misses, static_cast<std::uint64_t>(kThreads * kRounds));
  EXPECT_LE(s.misses,
            static_cast<std::uint64_t>(kThreads * 3));  // at most one per thread per class
  EXPECT_EQ(s.in_use_bytes, 0U);
}

TEST(HostBuffer, AnAbsurdSizeIsAConfigErrorNotBadAlloc) {
  expect_error<ferry::ConfigError>([] { (void)HostBuffer::allocate(k2to62); },
                                   {"HostBuffer::allocate", "4611686018427387904 bytes"});
  // Rounding up to the alignment wraps around to 0: it must not become a small buffer.
  expect_error<ferry::ConfigError>([] { (void)HostBuffer::allocate(kMaxSize - 10); },
                                   {"HostBuffer::allocate", "18446744073709551605 bytes"});
}

TEST(PinnedBuffer, AnAbsurdSizeIsAFerryErrorNotBadAlloc) {
  if (ferry::cuda_device_count() > 0) {  // cudaHostAlloc answers there
    EXPECT_THROW((void)PinnedBuffer::allocate(k2to62), ferry::DeviceError);
    return;
  }
  expect_error<ferry::ConfigError>([] { (void)PinnedBuffer::allocate(k2to62); },
                                   {"PinnedBuffer::allocate", "4611686018427387904 bytes"});
  expect_error<ferry::ConfigError>([] { (void)PinnedBuffer::allocate(kMaxSize - 10); },
                                   {"PinnedBuffer::allocate", "18446744073709551605 bytes"});
}

TEST(DeviceBuffer, AnAbsurdSizeOfTheHostStandInIsADeviceError) {
  expect_error<ferry::DeviceError>([] { (void)DeviceBuffer::allocate(Device::cpu(), k2to62); },
                                   {"DeviceBuffer::allocate", "4611686018427387904 bytes"});
  expect_error<ferry::DeviceError>([] { (void)DeviceBuffer::allocate(Device::cpu(), kMaxSize); },
                                   {"DeviceBuffer::allocate", "18446744073709551615 bytes"});
}

TEST(PinnedPool, SizesBeyondTheLargestClassAreConfigErrors) {
  constexpr std::size_t k2to63 = std::size_t{1} << 63;
  EXPECT_EQ(PinnedPool::size_class(k2to63), k2to63);
  EXPECT_EQ(PinnedPool::size_class(k2to63 + 1), k2to63 + 1);  // no power of two holds it
  EXPECT_EQ(PinnedPool::size_class(kMaxSize), kMaxSize);
  PinnedPool pool(kMaxSize);
  expect_error<ferry::ConfigError>([&] { (void)pool.acquire(kMaxSize); },
                                   {"PinnedPool::acquire", "18446744073709551615 bytes"});
  EXPECT_THROW((void)pool.acquire(k2to62), ferry::Error);  // a class, but no memory for it
  EXPECT_EQ(pool.stats().in_use_bytes, 0U);
  { const auto block = pool.acquire(100); }
  EXPECT_EQ(pool.stats().cached_bytes, 4096U);
}

}  // namespace
