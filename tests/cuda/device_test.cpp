// The GPU as a device: it is found and usable, pinned memory comes from CUDA, an out-of-range
// device is a DeviceError that says so, and DLPack exports name the GPU.

#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DeviceBuffer;
using ferry::DType;
using ferry::PinnedBuffer;
using ferry::Tensor;
using ferry::cuda_testing::byte_tensor;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_bytes;
using ferry::cuda_testing::same_tensor;

class GpuDevice : public CudaTest {};

TEST_F(GpuDevice, IsFoundAndUsable) {
  EXPECT_TRUE(ferry::built_with_cuda());
  EXPECT_GE(ferry::cuda_device_count(), 1);
  EXPECT_TRUE(ferry::cuda_is_available());
  EXPECT_EQ(ferry::cuda_unavailable_reason(), "");
  EXPECT_EQ(Device::best(), Device::cuda(0));
  EXPECT_NO_THROW(ferry::check_usable(Device::cuda(0)));
  EXPECT_NO_THROW(ferry::check_usable(Device::cuda(ferry::cuda_device_count() - 1)));
}

/// Runs `call` and checks that it throws DeviceError whose message contains `text`.
::testing::AssertionResult throws_device_error(const std::function<void()>& call,
                                               const std::string& text) {
  try {
    call();
  } catch (const ferry::DeviceError& e) {
    if (std::string(e.what()).find(text) != std::string::npos) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "DeviceError without \"" << text << "\": " << e.what();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "nothing was thrown";
}

TEST_F(GpuDevice, OutOfRangeIndexIsADeviceErrorNamingIt) {
  const Device bad = Device::cuda(99);
  const std::string text = "cuda:99 is not usable";
  EXPECT_TRUE(throws_device_error([&] { ferry::check_usable(bad); }, text));
  EXPECT_TRUE(throws_device_error([&] { (void)Tensor::empty({4}, DType::u8, bad); }, text));
  EXPECT_TRUE(throws_device_error([&] { (void)Tensor::zeros({4}, DType::f32, bad); }, text));
  EXPECT_TRUE(throws_device_error([&] { (void)byte_tensor({1, 2, 3}).to(bad); }, text));
  EXPECT_TRUE(throws_device_error([&] { (void)byte_tensor({1, 2, 3}).to(bad, true); }, text));
  EXPECT_TRUE(throws_device_error([&] { (void)DeviceBuffer::allocate(bad, 16); }, text));
  // Also from a tensor that is on a good GPU already.
  const Tensor gpu = byte_tensor({1, 2, 3}).to(Device::cuda());
  EXPECT_TRUE(throws_device_error([&] { (void)gpu.to(bad); }, text));
  EXPECT_TRUE(throws_device_error([] { ferry::check_usable(Device::parse("cuda:99")); }, text));
}

TEST_F(GpuDevice, PinnedBufferIsLockedByCuda) {
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{64} << 20}) {
    const PinnedBuffer b = PinnedBuffer::allocate(n);
    EXPECT_EQ(b.lock(), PinnedBuffer::Lock::cuda) << n << " bytes";
    EXPECT_TRUE(b.locked());
    EXPECT_NE(b.data(), nullptr);
    EXPECT_EQ(b.size(), n);
  }
}

TEST_F(GpuDevice, PinnedTensorsAreLockedByCuda) {
  const Tensor pinned = byte_tensor(pattern(100000, 1)).pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_TRUE(pinned.pin_memory().shares_storage_with(pinned));
  EXPECT_TRUE(Tensor::empty({3, 5}, DType::f32, Device::cpu(), /*pinned=*/true).is_pinned());
  const ferry::PinnedPool::Block block = ferry::PinnedPool::global().acquire(12345);
  EXPECT_TRUE(block.locked());
  EXPECT_GE(block.size(), 12345U);
}

TEST_F(GpuDevice, DeviceBufferIsOnTheGpu) {
  const DeviceBuffer b = DeviceBuffer::allocate(Device::cuda(0), 4097);
  EXPECT_NE(b.data(), nullptr);
  EXPECT_EQ(b.size(), 4097U);
  EXPECT_EQ(b.device(), Device::cuda(0));
}

class GpuDlpack : public CudaTest {};

TEST_F(GpuDlpack, ExportOfAGpuTensorNamesTheGpu) {
  std::vector<float> values(2 * 3 * 5);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 3.0f;
  const Tensor gpu = Tensor::from(values, {2, 3, 5}).to(Device::cuda(0));

  DLManagedTensor* managed = gpu.to_dlpack();
  ASSERT_NE(managed, nullptr);
  const DLTensor& t = managed->dl_tensor;
  EXPECT_EQ(t.device.device_type, kDLCUDA);
  EXPECT_EQ(t.device.device_id, 0);
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(std::vector<std::int64_t>(t.shape, t.shape + 3), (std::vector<std::int64_t>{2, 3, 5}));
  ASSERT_NE(t.strides, nullptr);
  EXPECT_EQ(std::vector<std::int64_t>(t.strides, t.strides + 3),
            (std::vector<std::int64_t>{15, 5, 1}));
  EXPECT_EQ(t.dtype.code, kDLFloat);
  EXPECT_EQ(t.dtype.bits, 32);
  EXPECT_EQ(t.dtype.lanes, 1);
  EXPECT_EQ(static_cast<char*>(t.data) + t.byte_offset, gpu.data()) << "shares the device memory";

  // Back in as a ferry tensor: the same device memory, the same values.
  const Tensor imported = Tensor::from_dlpack(managed);
  EXPECT_EQ(imported.device(), Device::cuda(0));
  EXPECT_EQ(imported.data(), gpu.data());
  EXPECT_TRUE(same_tensor(gpu.cpu(), imported.cpu()));
}

TEST_F(GpuDlpack, ExportWaitsForTheCopyThatWritesTheTensor) {
  const std::vector<std::uint8_t> bytes = pattern(32 << 20, 2);
  const Tensor gpu = byte_tensor(bytes).pin_memory().to(Device::cuda(), /*non_blocking=*/true);
  DLManagedTensor* managed = gpu.to_dlpack();
  // The consumer knows nothing of ferry's events, so the bytes are there when it gets them.
  EXPECT_TRUE(gpu.ready_event().ready());
  EXPECT_EQ(managed->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(managed->dl_tensor.dtype.code, kDLUInt);
  const Tensor imported = Tensor::from_dlpack(managed);
  EXPECT_TRUE(same_bytes(bytes.data(), imported.cpu().data(), bytes.size()));
}

TEST_F(GpuDlpack, ExportOfARowSliceKeepsItsOffset) {
  const std::vector<std::uint8_t> bytes = pattern(8 * 100, 3);
  const Tensor gpu = Tensor::from(bytes, {8, 100}).to(Device::cuda());
  const Tensor rows = gpu.slice(5, 2);
  DLManagedTensor* managed = rows.to_dlpack();
  EXPECT_EQ(managed->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(static_cast<char*>(managed->dl_tensor.data) + managed->dl_tensor.byte_offset,
            rows.data());
  const Tensor imported = Tensor::from_dlpack(managed);
  EXPECT_TRUE(same_bytes(bytes.data() + 500, imported.cpu().data(), 200));
}

TEST_F(GpuDlpack, ExportOutlivesTheTensor) {
  const std::vector<std::uint8_t> bytes = pattern(4096, 4);
  DLManagedTensor* managed = nullptr;
  {
    const Tensor gpu = byte_tensor(bytes).to(Device::cuda());
    managed = gpu.to_dlpack();
  }
  // The export holds the storage: the device memory is still there.
  const Tensor imported = Tensor::from_dlpack(managed);
  EXPECT_TRUE(same_bytes(bytes.data(), imported.cpu().data(), bytes.size()));
}

}  // namespace
