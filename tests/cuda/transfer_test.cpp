// Host <-> GPU transfers through Tensor::to: round trips of every size from pageable and pinned
// memory, blocking and not, the same storage when a tensor is already on its device, and chains
// of non-blocking copies and conversions that must run in the order they were asked for.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DType;
using ferry::Tensor;
using ferry::cuda_testing::byte_tensor;
using ferry::cuda_testing::CudaParamTest;
using ferry::cuda_testing::CudaTest;
using ferry::cuda_testing::pattern;
using ferry::cuda_testing::same_bytes;
using ferry::cuda_testing::same_tensor;

constexpr std::size_t kMiB = std::size_t{1} << 20;

enum class Source { pageable, pinned };

struct RoundTrip {
  std::size_t bytes;
  Source source;
  bool non_blocking;
};

void PrintTo(const RoundTrip& p, std::ostream* os) {
  *os << p.bytes << " bytes from " << (p.source == Source::pinned ? "pinned" : "pageable")
      << " memory, " << (p.non_blocking ? "non-blocking" : "blocking");
}

std::string round_trip_name(const ::testing::TestParamInfo<RoundTrip>& info) {
  const RoundTrip& p = info.param;
  return std::to_string(p.bytes) + "_bytes_" +
         (p.source == Source::pinned ? "pinned" : "pageable") +
         (p.non_blocking ? "_non_blocking" : "_blocking");
}

std::vector<RoundTrip> round_trips() {
  // 0 and 1 byte, odd sizes around a page and a pool size class, and about 64 MiB.
  const std::size_t sizes[] = {0, 1, 3, 4095, 4097, 65537, kMiB + 13, 64 * kMiB - 3, 64 * kMiB};
  std::vector<RoundTrip> out;
  for (const std::size_t n : sizes) {
    for (const Source s : {Source::pageable, Source::pinned}) {
      for (const bool nb : {false, true}) out.push_back({n, s, nb});
    }
  }
  return out;
}

class GpuTransferRoundTrip : public CudaParamTest<RoundTrip> {};

TEST_P(GpuTransferRoundTrip, BytesComeBackUnchanged) {
  const RoundTrip p = GetParam();
  const std::vector<std::uint8_t> bytes = pattern(p.bytes, p.bytes + 1);
  Tensor host = byte_tensor(bytes);
  if (p.source == Source::pinned) {
    host = host.pin_memory();
    ASSERT_TRUE(host.is_pinned());
  }

  const Tensor gpu = host.to(Device::cuda(), p.non_blocking);
  EXPECT_EQ(gpu.device(), Device::cuda(0));
  EXPECT_EQ(gpu.shape(), host.shape());
  EXPECT_EQ(gpu.dtype(), DType::u8);
  EXPECT_EQ(gpu.nbytes(), p.bytes);
  EXPECT_FALSE(gpu.shares_storage_with(host));
  if (!p.non_blocking) {
    EXPECT_TRUE(gpu.ready_event().ready()) << "a blocking copy is complete when to() returns";
  }

  // Device to host, both ways: the same non-blocking flag, and the blocking cpu().
  const Tensor back = gpu.to(Device::cpu(), p.non_blocking);
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back.shape(), host.shape());
  back.synchronize();
  EXPECT_TRUE(back.ready_event().ready());
  EXPECT_TRUE(same_bytes(bytes.data(), back.data(), p.bytes));

  const Tensor again = gpu.cpu();
  EXPECT_TRUE(again.device().is_cpu());
  EXPECT_TRUE(again.ready_event().ready()) << "cpu() is blocking";
  EXPECT_TRUE(same_bytes(bytes.data(), again.data(), p.bytes));

  // The source is left as it was.
  EXPECT_TRUE(same_bytes(bytes.data(), host.data(), p.bytes));
}

INSTANTIATE_TEST_SUITE_P(Sizes, GpuTransferRoundTrip, ::testing::ValuesIn(round_trips()),
                         round_trip_name);

class GpuTransfer : public CudaTest {};

TEST_F(GpuTransfer, ShapedTensorsKeepShapeDtypeAndValues) {
  std::vector<std::int64_t> values(3 * 5 * 7);
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<std::int64_t>(i) * 0x0101010101LL - 17;
  }
  const Tensor host = Tensor::from(values, {3, 5, 7});
  const Tensor gpu = host.to(Device::cuda());
  EXPECT_EQ(gpu.shape(), (std::vector<std::int64_t>{3, 5, 7}));
  EXPECT_EQ(gpu.dtype(), DType::i64);
  EXPECT_TRUE(same_tensor(host, gpu.cpu()));
  EXPECT_TRUE(same_tensor(host, gpu.reshape({105}).cpu().reshape({3, 5, 7})));
}

TEST_F(GpuTransfer, ToTheDeviceItIsOnReturnsTheSameStorage) {
  const Tensor host = byte_tensor(pattern(1000, 7));
  const Tensor gpu = host.to(Device::cuda(0));
  EXPECT_TRUE(gpu.to(Device::cuda(0)).shares_storage_with(gpu));
  EXPECT_TRUE(gpu.to(Device::cuda(0), /*non_blocking=*/true).shares_storage_with(gpu));
  EXPECT_TRUE(gpu.to(Device::parse("cuda")).shares_storage_with(gpu));
  EXPECT_TRUE(gpu.to(Device::best()).shares_storage_with(gpu));
  EXPECT_TRUE(gpu.to(DType::u8).shares_storage_with(gpu));
  EXPECT_TRUE(gpu.to(Device::cuda(0), DType::u8, true).shares_storage_with(gpu));
  EXPECT_TRUE(host.to(Device::cpu()).shares_storage_with(host));
  EXPECT_FALSE(gpu.cpu().shares_storage_with(host));
}

TEST_F(GpuTransfer, BestDeviceIsTheGpu) { EXPECT_EQ(Device::best(), Device::cuda(0)); }

TEST_F(GpuTransfer, NonBlockingCopyFromPinnedMemoryCarriesACudaEvent) {
  const std::vector<std::uint8_t> bytes = pattern(64 * kMiB, 11);
  const Tensor pinned = byte_tensor(bytes).pin_memory();
  ASSERT_TRUE(pinned.is_pinned());

  const Tensor gpu = pinned.to(Device::cuda(), /*non_blocking=*/true);
  const ferry::Event event = gpu.ready_event();
  EXPECT_NE(event.native_handle(), nullptr) << "a queued copy is marked by a CUDA event";
  event.synchronize();
  EXPECT_TRUE(event.ready());
  EXPECT_TRUE(gpu.ready_event().ready());
  gpu.synchronize();
  EXPECT_TRUE(same_bytes(bytes.data(), gpu.cpu().data(), bytes.size()));
}

TEST_F(GpuTransfer, PinnedSourceMayBeDroppedWhileItsCopyIsInFlight) {
  // If the source went back to the pinned pool before the copy read it, the next pin_memory()
  // of the same size would get that block and overwrite it.
  const std::vector<std::uint8_t> first = pattern(32 * kMiB, 21);
  const std::vector<std::uint8_t> second = pattern(32 * kMiB, 22);
  Tensor gpu;
  {
    const Tensor pinned = byte_tensor(first).pin_memory();
    gpu = pinned.to(Device::cuda(), /*non_blocking=*/true);
  }
  const Tensor other = byte_tensor(second).pin_memory();
  const Tensor other_gpu = other.to(Device::cuda(), /*non_blocking=*/true);
  EXPECT_TRUE(same_bytes(first.data(), gpu.cpu().data(), first.size()));
  EXPECT_TRUE(same_bytes(second.data(), other_gpu.cpu().data(), second.size()));
}

TEST_F(GpuTransfer, ManyNonBlockingCopiesEachDeliverTheirOwnBytes) {
  constexpr int kCount = 48;
  std::vector<std::vector<std::uint8_t>> sources;
  std::vector<Tensor> on_gpu;
  std::vector<Tensor> back;
  for (int i = 0; i < kCount; ++i) {
    sources.push_back(
        pattern(kMiB + static_cast<std::size_t>(i) * 4099, 100U + static_cast<unsigned>(i)));
    on_gpu.push_back(byte_tensor(sources.back()).pin_memory().to(Device::cuda(), true));
  }
  for (int i = 0; i < kCount; ++i)
    back.push_back(on_gpu[static_cast<std::size_t>(i)].to(Device::cpu(), true));
  for (std::size_t i = 0; i < sources.size(); ++i) {
    EXPECT_TRUE(same_bytes(sources[i].data(), back[i].data(), sources[i].size())) << "copy " << i;
  }
}

TEST_F(GpuTransfer, NonBlockingCopyThenConversionsThenCpuRunInOrder) {
  // 16 Mi u8 values: the copy is long enough that a conversion not ordered after it would read
  // device memory that the copy has not written yet.
  const std::vector<std::uint8_t> bytes = pattern(16 * kMiB, 31);
  const Tensor host = byte_tensor(bytes);
  const Tensor pinned = host.pin_memory();

  const Tensor f32 = pinned.to(Device::cuda(), true).to(DType::f32);
  const Tensor f16 = f32.to(DType::f16);
  const Tensor i32 = f16.to(DType::i32);
  EXPECT_EQ(f32.device(), Device::cuda(0));
  EXPECT_EQ(f16.dtype(), DType::f16);

  EXPECT_TRUE(same_tensor(host.to(DType::f32), f32.cpu()));
  EXPECT_TRUE(same_tensor(host.to(DType::f32).to(DType::f16), f16.to(Device::cpu(), true)));
  EXPECT_TRUE(same_tensor(host.to(DType::f32).to(DType::f16).to(DType::i32), i32.cpu()));
  // The fused form: copy, then convert on the device.
  EXPECT_TRUE(
      same_tensor(host.to(DType::bf16), pinned.to(Device::cuda(), DType::bf16, true).cpu()));
}

TEST_F(GpuTransfer, NonBlockingDeviceToHostThenHostConversionWaitsForTheCopy) {
  const std::vector<std::uint8_t> bytes = pattern(16 * kMiB, 41);
  const Tensor host = byte_tensor(bytes);
  const Tensor gpu = host.pin_memory().to(Device::cuda(), true);
  // The host conversion reads data(), which must wait for the queued device-to-host copy.
  const Tensor f64 = gpu.to(Device::cpu(), true).to(DType::f64);
  EXPECT_TRUE(same_tensor(host.to(DType::f64), f64));
}

TEST_F(GpuTransfer, CopyToHostAndBackAgainKeepsOrder) {
  // gpu -> pinned host (non-blocking) -> gpu (non-blocking) -> host: each step reads what the
  // one before is still writing.
  const std::vector<std::uint8_t> bytes = pattern(32 * kMiB + 5, 51);
  const Tensor gpu = byte_tensor(bytes).to(Device::cuda());
  const Tensor host = gpu.to(Device::cpu(), true);
  const Tensor gpu2 = host.to(Device::cuda(), true);
  EXPECT_TRUE(same_bytes(bytes.data(), gpu2.cpu().data(), bytes.size()));
}

TEST_F(GpuTransfer, CloneOnTheGpuCopiesTheBytes) {
  const std::vector<std::uint8_t> bytes = pattern(8 * kMiB + 1, 61);
  const Tensor gpu = byte_tensor(bytes).pin_memory().to(Device::cuda(), true);
  const Tensor copy = gpu.clone();
  EXPECT_EQ(copy.device(), Device::cuda(0));
  EXPECT_FALSE(copy.shares_storage_with(gpu));
  EXPECT_TRUE(same_bytes(bytes.data(), copy.cpu().data(), bytes.size()));
}

TEST_F(GpuTransfer, SliceOfADeviceTensorCopiesItsOwnRows) {
  const std::vector<std::uint8_t> bytes = pattern(10 * 333, 71);
  const Tensor gpu = Tensor::from(bytes, {10, 333}).to(Device::cuda());
  const Tensor rows = gpu.slice(3, 4).cpu();
  EXPECT_EQ(rows.shape(), (std::vector<std::int64_t>{4, 333}));
  EXPECT_TRUE(same_bytes(bytes.data() + 3 * 333, rows.data(), 4 * 333));
}

TEST_F(GpuTransfer, ZerosOnTheGpuAreZero) {
  const Tensor z = Tensor::zeros({1001}, DType::f32, Device::cuda());
  EXPECT_EQ(z.device(), Device::cuda(0));
  const std::vector<std::uint8_t> zero(1001 * 4, 0);
  EXPECT_TRUE(same_bytes(zero.data(), z.cpu().data(), zero.size()));
}

TEST_F(GpuTransfer, EmptyTensorOnTheGpu) {
  const Tensor e = Tensor::empty({0, 7}, DType::f64, Device::cuda());
  EXPECT_EQ(e.nbytes(), 0U);
  const Tensor back = e.cpu();
  EXPECT_EQ(back.shape(), (std::vector<std::int64_t>{0, 7}));
  EXPECT_EQ(e.to(DType::f16).cpu().nbytes(), 0U);
}

}  // namespace
