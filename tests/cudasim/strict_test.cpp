// cudasim enforces what a GPU enforces, each rule shown by a launch or an access broken on
// purpose: a launch beyond the device's limits fails with cudaErrorInvalidConfiguration (not
// sticky); a misaligned load or store faults with cudaErrorMisalignedAddress and one outside every
// live allocation (one element past a cudaMalloc block, freed memory) with
// cudaErrorIllegalAddress, both sticky; another device's memory is out of a kernel's reach
// without peer access, while copies across devices work; a kernel goes only into a stream of the
// current device. Faults are sticky for the whole process: each runs in a child of its own.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cudasim.hpp"
#include "cudasim_device.hpp"
#include "ferry/dtype.hpp"
#include "runtime/cuda_api.hpp"

namespace {

// ---- kernels, broken on purpose where their arguments say so ----------------------------------

template <class T>
__global__ void load_one(const T* src, int* flag) {
  const T value = FERRY_LD(src);
  (void)value;
  FERRY_ST(flag, 1);
}

template <class T>
__global__ void store_one(T* dst, T value) {
  FERRY_ST(dst, value);
}

// flag[i] = 1 for every thread i of the grid: what a launch ran.
__global__ void mark(int* flag) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  FERRY_ST(flag + block * blockDim.x * blockDim.y * blockDim.z + thread, 1);
}

struct OwnStream {
  cudaStream_t s = nullptr;
  OwnStream() { EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess); }
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  ~OwnStream() { (void)cudaStreamDestroy(s); }
};

// `bytes` of device memory on the current device, freed at the end.
struct DeviceMemory {
  void* p = nullptr;
  explicit DeviceMemory(std::size_t bytes) { EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess); }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { (void)cudaFree(p); }
  template <class T>
  T* as(std::size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<std::byte*>(p) + byte_offset);
  }
};

int read_int(const int* device) {
  int v = 0;
  EXPECT_EQ(cudaMemcpy(&v, device, sizeof v, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// In a child process: the device's error is `error` from the synchronization on, on every call
// (a stream, an allocation, cudaGetLastError twice): 7 when it is, else what differed.
int sticky_exit_code(cudaStream_t s, cudaError_t error) {
  if (cudaStreamSynchronize(s) != error) return 1;
  void* p = nullptr;
  if (cudaMalloc(&p, 64) != error) return 2;
  if (cudaGetLastError() != error || cudaGetLastError() != error) return 3;
  return 7;
}

// ---- 1. launch configuration ------------------------------------------------------------------

TEST(CudasimLaunch, ReportsAnH200sProperties) {
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 1), cudaSuccess);
  EXPECT_STREQ(p.name, "NVIDIA H200");
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.maxThreadsDim[0], 1024);
  EXPECT_EQ(p.maxThreadsDim[1], 1024);
  EXPECT_EQ(p.maxThreadsDim[2], 64);
  EXPECT_EQ(p.maxGridSize[0], 2147483647);
  EXPECT_EQ(p.maxGridSize[1], 65535);
  EXPECT_EQ(p.maxGridSize[2], 65535);
  EXPECT_EQ(p.sharedMemPerBlock, 49152U);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 232448U);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_GT(p.totalGlobalMem, std::size_t{140} << 30);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST(CudasimLaunch, ConfigurationsBeyondTheDevicesLimitsFailAtTheLaunchAndAreNotSticky) {
  const OwnStream stream;
  const DeviceMemory flags(4096 * sizeof(int));
  ASSERT_EQ(cudaMemset(flags.p, 0, 4096 * sizeof(int)), cudaSuccess);
  struct Config {
    dim3 grid, block;
    std::size_t shared;
  };
  const std::vector<Config> bad = {
      {{1}, {1025}, 0},         // threads per block
      {{1}, {32, 32, 2}, 0},    // 2048 threads per block
      {{1}, {1, 1025}, 0},      // block y
      {{1}, {1, 1, 65}, 0},     // block z (65 threads: only the dimension is over)
      {{1, 65536}, {1}, 0},     // grid y
      {{1, 1, 65536}, {1}, 0},  // grid z
      {{2147483648U}, {1}, 0},  // grid x
      {{0}, {1}, 0},            // a zero dimension
      {{1, 0}, {1}, 0},         //
      {{1}, {0}, 0},            //
      {{1}, {1, 1, 0}, 0},      //
      {{1}, {32}, 49153},       // dynamic shared memory
  };
  for (const Config& c : bad) {
    ::ferry_cudasim::device::Launch(mark, c.grid, c.block, stream.s, c.shared)(flags.as<int>());
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration)
        << "grid " << c.grid.x << "x" << c.grid.y << "x" << c.grid.z << ", block " << c.block.x
        << "x" << c.block.y << "x" << c.block.z << ", shared " << c.shared;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  }
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  EXPECT_EQ(read_int(flags.as<int>()), 0) << "a refused launch ran";

  // At the limits, every thread runs.
  ::ferry_cudasim::device::Launch(mark, dim3(2, 1, 2), dim3(16, 1, 64), stream.s,
                                  49152)(flags.as<int>());
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
  std::vector<int> seen(4096);
  ASSERT_EQ(cudaMemcpy(seen.data(), flags.p, 4096 * sizeof(int), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::vector<int>(4096, 1), seen);
}

// ---- 2. alignment -----------------------------------------------------------------------------

// In a child: a load (or a store) of T at `offset` bytes into a cudaMalloc block.
template <class T>
int misaligned_access(std::size_t offset, bool store) {
  const OwnStream stream;
  void* block = nullptr;
  int* flag = nullptr;
  if (cudaMalloc(&block, 256) != cudaSuccess) return 10;
  if (cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int)) != cudaSuccess) return 11;
  T* at = reinterpret_cast<T*>(static_cast<std::byte*>(block) + offset);
  // First the aligned access at the same type: it works.
  T* aligned = reinterpret_cast<T*>(static_cast<std::byte*>(block) + 2 * alignof(T));
  FERRY_LAUNCH(1, 1, stream.s, load_one<T>)(aligned, flag);
  FERRY_LAUNCH(1, 1, stream.s, store_one<T>)(aligned, T{});
  if (cudaStreamSynchronize(stream.s) != cudaSuccess) return 12;
  if (store) {
    FERRY_LAUNCH(1, 1, stream.s, store_one<T>)(at, T{});
  } else {
    FERRY_LAUNCH(1, 1, stream.s, load_one<T>)(at, flag);
  }
  // The launch itself is fine. The kernel runs on the stream's thread, and under load it may
  // already have run and faulted by now; then the sticky fault is what every call reports.
  const cudaError_t launched = cudaGetLastError();
  if (launched != cudaSuccess && launched != cudaErrorMisalignedAddress) return 13;
  return sticky_exit_code(stream.s, cudaErrorMisalignedAddress);
}

TEST(CudasimKernelDeathTest, EveryLoadAndStoreIsCheckedForItsTypesAlignmentAndTheFaultIsSticky) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(misaligned_access<uint4>(8, false)), ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(std::exit(misaligned_access<uint4>(4, true)), ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(std::exit(misaligned_access<double>(4, false)), ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(std::exit(misaligned_access<std::uint64_t>(12, true)), ::testing::ExitedWithCode(7),
              "");
  EXPECT_EXIT(std::exit(misaligned_access<float>(2, false)), ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(std::exit(misaligned_access<std::int32_t>(1, true)), ::testing::ExitedWithCode(7),
              "");
  EXPECT_EXIT(std::exit(misaligned_access<ferry::Half>(1, false)), ::testing::ExitedWithCode(7),
              "");
  EXPECT_EXIT(std::exit(misaligned_access<std::uint16_t>(3, true)), ::testing::ExitedWithCode(7),
              "");
}

// ---- 3. bounds --------------------------------------------------------------------------------

TEST(CudasimKernelDeathTest, OneElementPastACudaMallocBlockFaultsWithIllegalAddressStickily) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const OwnStream stream;
        float* data = nullptr;
        int* flag = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&data), 100 * sizeof(float));
        (void)cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
        FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(data + 99, flag);  // the last one: fine
        if (cudaStreamSynchronize(stream.s) != cudaSuccess) std::exit(20);
        FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(data + 100, flag);
        std::exit(sticky_exit_code(stream.s, cudaErrorIllegalAddress));
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        const OwnStream stream;
        std::uint8_t* data = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&data), 100);
        FERRY_LAUNCH(1, 1, stream.s, store_one<std::uint8_t>)(data - 1, std::uint8_t{1});
        std::exit(sticky_exit_code(stream.s, cudaErrorIllegalAddress));
      },
      ::testing::ExitedWithCode(7), "");
}

TEST(CudasimKernelDeathTest, AKernelOnFreedMemoryFaultsWithIllegalAddressStickily) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const OwnStream stream;
        float* data = nullptr;
        int* flag = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&data), 256);
        (void)cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
        (void)cudaFree(data);
        FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(data, flag);
        std::exit(sticky_exit_code(stream.s, cudaErrorIllegalAddress));
      },
      ::testing::ExitedWithCode(7), "");
}

// ferry's caching allocator hands out blocks of a size class (600 bytes: a 640-byte block): as on
// a GPU, the block is what the kernel may touch, not the bytes asked for.
TEST(CudasimKernelDeathTest, ACachingAllocatorBlockReachesToItsSizeClassAndNoFurther) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const OwnStream stream;
        auto* data =
            static_cast<std::uint8_t*>(ferry::detail::cuda::device_alloc(0, 600, stream.s));
        FERRY_LAUNCH(1, 1, stream.s, store_one<std::uint8_t>)(data + 639, std::uint8_t{1});
        if (cudaStreamSynchronize(stream.s) != cudaSuccess) std::exit(30);
        FERRY_LAUNCH(1, 1, stream.s, store_one<std::uint8_t>)(data + 640, std::uint8_t{1});
        std::exit(sticky_exit_code(stream.s, cudaErrorIllegalAddress));
      },
      ::testing::ExitedWithCode(7), "");
}

TEST(CudasimKernelDeathTest, PageableHostMemoryIsOutOfAKernelsReach) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const OwnStream stream;
        std::vector<float> host(16);
        int* flag = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
        FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(host.data(), flag);
        std::exit(sticky_exit_code(stream.s, cudaErrorIllegalAddress));
      },
      ::testing::ExitedWithCode(7), "");
}

// ---- 4. devices -------------------------------------------------------------------------------

TEST(CudasimKernelDeathTest, AKernelTouchingAnotherDevicesMemoryWithoutPeerAccessFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        (void)cudaSetDevice(1);
        float* theirs = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&theirs), 256);
        (void)cudaSetDevice(0);
        const OwnStream stream;
        int* flag = nullptr;
        (void)cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
        FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(theirs, flag);
        const int code = sticky_exit_code(stream.s, cudaErrorIllegalAddress);
        (void)cudaSetDevice(1);  // the fault is device 0's: device 1 still works
        void* p = nullptr;
        std::exit(code == 7 && cudaMalloc(&p, 64) == cudaSuccess ? 7 : code + 40);
      },
      ::testing::ExitedWithCode(7), "");
}

TEST(CudasimDevices, WithPeerAccessEnabledAKernelReadsAnotherDevicesMemory) {
  int can = 0;
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
  EXPECT_EQ(can, 0);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  const DeviceMemory theirs(sizeof(float));
  const float value = 2.5F;
  ASSERT_EQ(cudaMemcpy(theirs.p, &value, sizeof value, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  {
    const OwnStream stream;
    const DeviceMemory mine(sizeof(float));
    ASSERT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
    // A kernel on device 0 loads device 1's float, then marks device 0's flag.
    FERRY_LAUNCH(1, 1, stream.s, store_one<float>)(mine.as<float>(), 0.0F);
    FERRY_LAUNCH(1, 1, stream.s, load_one<float>)(theirs.as<float>(), mine.as<int>());
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream.s), cudaSuccess);
    EXPECT_EQ(read_int(mine.as<int>()), 1) << "the kernel read device 1's memory";
    ASSERT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
    EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessNotEnabled);
  }
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
}

TEST(CudasimDevices, CopiesAcrossDevicesWorkWithoutPeerAccessAndAStreamTakesCopiesFromAnyDevice) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  const OwnStream theirs_stream;
  const DeviceMemory theirs(64);
  const std::vector<std::uint8_t> bytes = [] {
    std::vector<std::uint8_t> b(64);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return b;
  }();
  ASSERT_EQ(cudaMemcpy(theirs.p, bytes.data(), 64, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const OwnStream stream;
  const DeviceMemory mine(64);
  const DeviceMemory again(64);
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);

  ASSERT_EQ(cudaMemcpyPeer(mine.p, 0, theirs.p, 1, 64), cudaSuccess);
  EXPECT_EQ(cudaMemcpyPeer(mine.p, 1, theirs.p, 1, 64), cudaErrorInvalidValue) << "wrong device";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  // Device to device across devices with unified addressing: staged, it works.
  ASSERT_EQ(cudaMemcpyAsync(again.p, theirs.p, 64, cudaMemcpyDefault, stream.s), cudaSuccess);
  // A copy queued on device 1's stream while device 0 is current works, as CUDA documents.
  cudaEvent_t copied = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(copied, stream.s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(theirs_stream.s, copied, 0), cudaSuccess) << "across devices";
  ASSERT_EQ(cudaMemcpyAsync(pinned, again.p, 64, cudaMemcpyDeviceToHost, theirs_stream.s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(theirs_stream.s), cudaSuccess);
  EXPECT_EQ(std::memcmp(pinned, bytes.data(), 64), 0);
  std::vector<std::uint8_t> seen(64);
  ASSERT_EQ(cudaMemcpy(seen.data(), mine.p, 64, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(seen, bytes);

  // An event of device 0 recorded on device 1's stream, and a timing across devices, fail.
  EXPECT_EQ(cudaEventRecord(copied, theirs_stream.s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  cudaEvent_t start = nullptr;
  cudaEvent_t end = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&start, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(start, stream.s), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&end, cudaEventDefault), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(end, theirs_stream.s), cudaSuccess);
  ASSERT_EQ(cudaEventSynchronize(start), cudaSuccess) << "any device's event may be waited on";
  ASSERT_EQ(cudaEventSynchronize(end), cudaSuccess);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(end);
  (void)cudaEventDestroy(copied);
  (void)cudaFreeHost(pinned);
}

TEST(CudasimDevices, AKernelIntoAStreamOfAnotherDeviceFailsWithInvalidResourceHandle) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  const OwnStream theirs;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const DeviceMemory flag(sizeof(int));
  ASSERT_EQ(cudaMemset(flag.p, 0, sizeof(int)), cudaSuccess);
  FERRY_LAUNCH(1, 1, theirs.s, mark)(flag.as<int>());
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "not sticky";
  ASSERT_EQ(cudaStreamSynchronize(theirs.s), cudaSuccess);
  EXPECT_EQ(read_int(flag.as<int>()), 0) << "the refused kernel ran";
}

}  // namespace
