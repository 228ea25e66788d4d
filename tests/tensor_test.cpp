#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"
#include "test_util.hpp"

namespace {

using ferry::Device;
using ferry::DType;
using ferry::Tensor;
using ferry::testing::expect_error;

constexpr int64_t k2to32 = int64_t{1} << 32;
constexpr int64_t k2to62 = int64_t{1} << 62;
constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();

Tensor iota_f32(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> values(static_cast<std::size_t>(n));
  std::iota(values.begin(), values.end(), 0.5f);
  return Tensor::from(values, std::move(shape));
}

TEST(Tensor, EmptyHasShapeDtypeDeviceAndBytes) {
  const Tensor t = Tensor::empty({2, 3, 4}, DType::i64);
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(t.dim(), 3U);
  EXPECT_EQ(t.shape(1), 3);
  EXPECT_EQ(t.dtype(), DType::i64);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 24U * 8U);
  EXPECT_FALSE(t.is_pinned());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0U);
  const Tensor scalar = Tensor::empty({}, DType::f32);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(Tensor::empty({0, 5}, DType::u8).nbytes(), 0U);
  EXPECT_FALSE(Tensor().defined());
  EXPECT_THROW((void)Tensor::empty({2, -1}, DType::f32), ferry::ConfigError);
}

TEST(Tensor, FromCopiesValuesAndChecksShapeAndType) {
  const std::vector<std::int32_t> values = {1, 2, 3, 4, 5, 6};
  const Tensor t = Tensor::from(values, {2, 3});
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(std::vector<std::int32_t>(t.data<std::int32_t>(), t.data<std::int32_t>() + 6), values);
  EXPECT_THROW((void)Tensor::from(values, {4, 2}), ferry::ConfigError);
  EXPECT_THROW((void)t.data<float>(), ferry::ConfigError);
  const Tensor z = Tensor::zeros({3}, DType::f64);
  EXPECT_EQ(z.data<double>()[2], 0.0);
}

TEST(Tensor, ToTheSameDeviceAndDtypeSharesStorage) {
  const Tensor t = iota_f32({4, 4});
  EXPECT_TRUE(t.to(Device::cpu()).shares_storage_with(t));
  EXPECT_TRUE(t.to(Device::cpu(), /*non_blocking=*/true).shares_storage_with(t));
  EXPECT_TRUE(t.to(DType::f32).shares_storage_with(t));
  EXPECT_TRUE(t.to(Device::cpu(), DType::f32).shares_storage_with(t));
  EXPECT_TRUE(t.cpu().shares_storage_with(t));
  EXPECT_EQ(t.to(DType::f32).data(), t.data());
}

TEST(Tensor, ToAnotherDtypeMakesANewTensorAndLeavesTheSourceUnchanged) {
  const Tensor t = Tensor::from(std::vector<float>{-1.5f, 0.5f, 2.5f, 300.0f}, {4});
  const Tensor before = t.clone();
  const Tensor i = t.to(DType::i32);
  const Tensor u = t.to(Device::cpu(), DType::u8);
  EXPECT_FALSE(i.shares_storage_with(t));
  EXPECT_EQ(i.shape(), t.shape());
  EXPECT_EQ(std::vector<std::int32_t>(i.data<std::int32_t>(), i.data<std::int32_t>() + 4),
            (std::vector<std::int32_t>{-1, 0, 2, 300}));
  EXPECT_EQ(std::vector<std::uint8_t>(u.data<std::uint8_t>(), u.data<std::uint8_t>() + 4),
            (std::vector<std::uint8_t>{0, 0, 2, 255}));
  EXPECT_EQ(std::memcmp(t.data(), before.data(), t.nbytes()), 0);
  const Tensor h = t.to(DType::f16);
  EXPECT_EQ(h.data<ferry::Half>()[2].bits, ferry::to_half(2.5).bits);
  EXPECT_EQ(h.to(DType::f32).data<float>()[1], 0.5f);
}

TEST(Tensor, CudaWithoutAGpuRaisesDeviceErrorAndTouchesNothing) {
  if (ferry::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is usable here: see tests/cuda";
  const Tensor t = iota_f32({8});
  for (bool non_blocking : {false, true}) {
    try {
      (void)t.to(Device::cuda(), non_blocking);
      FAIL() << "to(cuda) succeeded without a GPU";
    } catch (const ferry::DeviceError& e) {
      EXPECT_EQ(std::string(e.what()), "cuda:0 is not usable: " + ferry::cuda_unavailable_reason());
    }
  }
  EXPECT_THROW((void)t.pin_memory().to(Device::cuda(1), true), ferry::DeviceError);
  EXPECT_THROW((void)Tensor::empty({2}, DType::f32, Device::cuda()), ferry::DeviceError);
  EXPECT_THROW((void)ferry::DeviceBuffer::allocate(Device::cuda(), 16), ferry::DeviceError);
  EXPECT_EQ(t.data<float>()[7], 7.5f);
}

TEST(Tensor, PinnedMemoryIsHostMemoryOnly) {
  EXPECT_THROW((void)Tensor::empty({2}, DType::f32, Device::cuda(), /*pinned=*/true),
               ferry::ConfigError);
}

TEST(Tensor, PinMemoryCopiesIntoLockedPagesAndSaysSoTruthfully) {
  const Tensor t = iota_f32({256, 1024});  // 1 MiB
  const std::size_t locked_before = ferry::testing::locked_bytes();
  const Tensor p = t.pin_memory();
  const std::size_t locked_after = ferry::testing::locked_bytes();
  EXPECT_FALSE(p.shares_storage_with(t));
  EXPECT_EQ(p.shape(), t.shape());
  EXPECT_EQ(std::memcmp(p.data(), t.data(), t.nbytes()), 0);
  EXPECT_FALSE(t.is_pinned());
  if (p.is_pinned()) {
    // The pool may reuse a buffer locked earlier, so the count may not grow; but it holds this one.
    EXPECT_GE(locked_after, t.nbytes());
  } else {
    EXPECT_EQ(locked_after, locked_before) << "not pinned, yet more pages are locked";
  }
  EXPECT_TRUE(p.pin_memory().shares_storage_with(p));
  const Tensor pinned_empty = Tensor::empty({64}, DType::u8, Device::cpu(), /*pinned=*/true);
  EXPECT_EQ(pinned_empty.is_pinned(), p.is_pinned());
}

TEST(Tensor, SliceAndReshapeViewTheSameStorage) {
  const Tensor t = iota_f32({4, 3});
  const Tensor rows = t.slice(1, 2);
  EXPECT_TRUE(rows.shares_storage_with(t));
  EXPECT_EQ(rows.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.5f);
  EXPECT_EQ(rows.storage_offset(), 3U * sizeof(float));
  const Tensor flat = t.reshape({12});
  EXPECT_TRUE(flat.shares_storage_with(t));
  EXPECT_EQ(flat.data<float>()[11], 11.5f);
  EXPECT_THROW((void)t.slice(3, 2), ferry::ConfigError);
  EXPECT_THROW((void)t.slice(-1, 1), ferry::ConfigError);
  EXPECT_THROW((void)t.reshape({5}), ferry::ConfigError);
  EXPECT_THROW((void)Tensor::empty({}, DType::f32).slice(0, 1), ferry::ConfigError);
  // A converted slice converts only the slice.
  EXPECT_EQ(rows.to(DType::i64).data<std::int64_t>()[5], 8);
}

TEST(Tensor, CloneIsIndependent) {
  const Tensor t = iota_f32({5});
  const Tensor c = t.clone();
  EXPECT_FALSE(c.shares_storage_with(t));
  c.data<float>()[0] = 42.0f;
  EXPECT_EQ(t.data<float>()[0], 0.5f);
  EXPECT_EQ(c.data<float>()[4], 4.5f);
}

TEST(Tensor, WrapKeepsTheOwnerAliveUntilTheLastView) {
  auto released = std::make_shared<bool>(false);
  std::vector<float> memory = {1, 2, 3, 4};
  Tensor view;
  {
    std::shared_ptr<void> owner(nullptr, [released](void*) { *released = true; });
    view = Tensor::wrap(memory.data(), {2, 2}, DType::f32, Device::cpu(), false, owner);
  }
  EXPECT_FALSE(*released);
  EXPECT_EQ(view.data<float>()[3], 4.0f);
  Tensor row = view.slice(1, 1);
  view = Tensor();
  EXPECT_FALSE(*released);
  EXPECT_EQ(row.data<float>()[0], 3.0f);
  EXPECT_FALSE(row.is_pinned());
  row = Tensor();
  EXPECT_TRUE(*released);
}

TEST(Tensor, ReadyEventOfHostWorkIsComplete) {
  const Tensor t = iota_f32({3});
  EXPECT_TRUE(t.ready_event().ready());
  EXPECT_EQ(t.ready_event().native_handle(), nullptr);
  t.synchronize();
}

TEST(Tensor, UndefinedTensorsRefuseWork) {
  const Tensor t;
  EXPECT_THROW((void)t.to(Device::cpu()), ferry::ConfigError);
  EXPECT_THROW((void)t.to(DType::f32), ferry::ConfigError);
  EXPECT_THROW((void)t.pin_memory(), ferry::ConfigError);
  EXPECT_EQ(t.data(), nullptr);
  EXPECT_FALSE(t.clone().defined());
}

TEST(Tensor, ShapesWhoseSizeOverflowsAreConfigErrorsNamingTheCallAndShape) {
  using ferry::ConfigError;
  // 2^32 x 2^32 wraps to 0 elements in 64 bits: it must not become a tensor of no bytes.
  expect_error<ConfigError>(
      [] {
        (void)Tensor::empty({k2to32, k2to32}, DType::u8);
      },
      {"Tensor::empty", "[4294967296, 4294967296]"});
  expect_error<ConfigError>(
      [] {
        (void)Tensor::empty({k2to32, 3, k2to32}, DType::u8);
      },
      {"Tensor::empty", "[4294967296, 3, 4294967296]"});
  // The elements fit in int64, their bytes do not.
  expect_error<ConfigError>([] { (void)Tensor::empty({k2to62}, DType::f64); },
                            {"Tensor::empty", "[4611686018427387904]", "f64"});
  expect_error<ConfigError>(
      [] {
        (void)Tensor::empty({2, -1}, DType::f32);
      },
      {"Tensor::empty", "negative", "[2, -1]"});
  expect_error<ConfigError>(
      [] {
        (void)Tensor::zeros({k2to32, k2to32}, DType::f32);
      },
      {"Tensor::zeros", "[4294967296, 4294967296]"});
  const std::uint8_t byte = 7;
  expect_error<ConfigError>(
      [&] {
        (void)Tensor::from_bytes(&byte, 0, {k2to32, k2to32}, DType::u8);
      },
      {"Tensor::from", "[4294967296, 4294967296]"});
  expect_error<ConfigError>(
      [&] {
        (void)Tensor::from(std::vector<std::uint8_t>{1}, {kMax64, 2});
      },
      {"Tensor::from", "[9223372036854775807, 2]"});
  expect_error<ConfigError>(
      [&] {
        (void)Tensor::wrap(const_cast<std::uint8_t*>(&byte), {k2to32, k2to32}, DType::u8,
                           Device::cpu(), false, nullptr);
      },
      {"Tensor::wrap", "[4294967296, 4294967296]"});
  const Tensor t = iota_f32({4, 3});
  expect_error<ConfigError>(
      [&] {
        (void)t.reshape({k2to32, k2to32});
      },
      {"Tensor::reshape", "[4294967296, 4294967296]"});
  expect_error<ConfigError>([&] { (void)t.reshape({12, -1}); }, {"Tensor::reshape", "[12, -1]"});
  // An empty shape is empty however large its other dimensions.
  EXPECT_EQ(Tensor::empty({0, kMax64, kMax64}, DType::f64).nbytes(), 0U);
}

TEST(Tensor, AnUnknownDtypeIsAConfigError) {
  const auto bad = static_cast<DType>(99);
  expect_error<ferry::ConfigError>([&] { (void)Tensor::empty({2}, bad); },
                                   {"Tensor::empty", "unknown dtype 99"});
  expect_error<ferry::ConfigError>([&] { (void)iota_f32({2}).to(bad); },
                                   {"Tensor::to", "unknown dtype 99"});
}

TEST(Tensor, NullDataForANonEmptyShapeIsAConfigError) {
  expect_error<ferry::ConfigError>([] { (void)Tensor::from_bytes(nullptr, 8, {2}, DType::f32); },
                                   {"Tensor::from", "null data", "[2]"});
  expect_error<ferry::ConfigError>(
      [] {
        (void)Tensor::wrap(nullptr, {2, 2}, DType::u8, Device::cpu(), false, nullptr);
      },
      {"Tensor::wrap", "null data", "[2, 2]"});
  // Nothing to view: null is fine.
  EXPECT_EQ(Tensor::wrap(nullptr, {0, 2}, DType::u8, Device::cpu(), false, nullptr).numel(), 0);
  EXPECT_EQ(Tensor::from_bytes(nullptr, 0, {0}, DType::u8).numel(), 0);
}

TEST(Tensor, AnAbsurdAllocationIsAFerryErrorNotBadAlloc) {
  // 2^62 bytes: a size that is representable, but memory no machine has.
  expect_error<ferry::ConfigError>([] { (void)Tensor::empty({k2to62}, DType::u8); },
                                   {"Tensor::empty", "[4611686018427387904]", "HostBuffer"});
  expect_error<ferry::ConfigError>([] { (void)Tensor::zeros({k2to62 / 4}, DType::f32); },
                                   {"Tensor::zeros", "[1152921504606846976]"});
  if (ferry::cuda_device_count() == 0) {  // else cudaHostAlloc answers, with a DeviceError
    expect_error<ferry::ConfigError>(
        [] { (void)Tensor::empty({k2to62}, DType::u8, Device::cpu(), /*pinned=*/true); },
        {"Tensor::empty", "[4611686018427387904]", "PinnedBuffer"});
  }
}

TEST(Tensor, SliceBoundsThatOverflowAreConfigErrors) {
  const Tensor t = iota_f32({4, 3});
  // start + length wraps around int64: it must not pass for a row within [0, 4).
  expect_error<ferry::ConfigError>([&] { (void)t.slice(2, kMax64); },
                                   {"Tensor::slice", "[4, 3]", "9223372036854775807"});
  expect_error<ferry::ConfigError>([&] { (void)t.slice(kMax64, 2); }, {"Tensor::slice", "[4, 3]"});
  expect_error<ferry::ConfigError>([&] { (void)t.slice(1, -1); }, {"Tensor::slice", "[4, 3]"});
  expect_error<ferry::ConfigError>([] { (void)Tensor().slice(0, 0); },
                                   {"Tensor::slice", "undefined"});
  expect_error<ferry::ConfigError>([] { (void)Tensor().reshape({1}); },
                                   {"Tensor::reshape", "undefined"});
  EXPECT_EQ(t.slice(4, 0).numel(), 0);
}

TEST(Tensor, ShapeOfADimensionBeyondTheRankIsAConfigError) {
  const Tensor t = iota_f32({4, 3});
  EXPECT_EQ(t.shape(1), 3);
  expect_error<ferry::ConfigError>([&] { (void)t.shape(2); },
                                   {"Tensor::shape", "dim 2", "rank 2", "[4, 3]"});
  expect_error<ferry::ConfigError>([] { (void)Tensor().shape(0); }, {"Tensor::shape", "rank 0"});
}

// What a loader batch is: memory wrapped with `owner`, the lease on its ring slot, standing in.
struct Batch {
  std::vector<float> memory = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f};
  std::shared_ptr<int> lease = std::make_shared<int>(0);
  std::weak_ptr<int> watch = lease;
  Tensor tensor =
      Tensor::wrap(memory.data(), {2, 3}, DType::f32, Device::cpu(), false, std::move(lease));
};

TEST(Tensor, CopiesOfABatchDoNotKeepItsBufferAlive) {
  Batch batch;
  const Tensor cloned = batch.tensor.clone();
  const Tensor half = batch.tensor.to(DType::f16);
  const Tensor floats = batch.tensor.to(Device::cpu(), DType::f64, /*non_blocking=*/true);
  Tensor same = batch.tensor.to(Device::cpu(), DType::f32, /*non_blocking=*/true);
  Tensor moved = batch.tensor.to(Device::cpu(), /*non_blocking=*/true);
  // To the device and dtype it has: the same storage, by contract, so the same lease.
  EXPECT_TRUE(moved.shares_storage_with(batch.tensor));
  EXPECT_TRUE(same.shares_storage_with(batch.tensor));
  batch.tensor = Tensor();
  EXPECT_FALSE(batch.watch.expired());
  moved = Tensor();
  EXPECT_FALSE(batch.watch.expired());
  same = Tensor();
  EXPECT_TRUE(batch.watch.expired()) << "a copy keeps the batch's buffer alive";
  // The copies hold their values.
  for (std::size_t i = 0; i < 6; ++i) {
    const float v = 0.5f + static_cast<float>(i);
    EXPECT_EQ(cloned.data<float>()[i], v);
    EXPECT_EQ(half.data<ferry::Half>()[i].bits, ferry::to_half(v).bits);
    EXPECT_EQ(floats.data<double>()[i], static_cast<double>(v));
  }
  EXPECT_TRUE(cloned.ready_event().ready());
  EXPECT_TRUE(half.ready_event().ready());
}

TEST(Tensor, PinnedCopiesOfABatchDoNotKeepItsBufferAlive) {
  Batch batch;
  const Tensor pinned = batch.tensor.pin_memory();
  const Tensor cloned = pinned.clone();
  batch.tensor = Tensor();
  EXPECT_TRUE(batch.watch.expired());
  EXPECT_EQ(pinned.data<float>()[5], 5.5f);
  EXPECT_EQ(cloned.data<float>()[0], 0.5f);
}

}  // namespace
