#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "expect_error.hpp"
#include "ferry/ferry.hpp"

namespace {

using ferry::DType;
using ferry::Tensor;

TEST(DLPack, ExportDescribesTheTensorAndSharesItsMemory) {
  const Tensor t = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  DLManagedTensor* m = t.to_dlpack();
  ASSERT_NE(m, nullptr);
  const DLTensor& d = m->dl_tensor;
  EXPECT_EQ(static_cast<char*>(d.data) + d.byte_offset, t.data());
  EXPECT_EQ(d.device.device_type, kDLCPU);
  EXPECT_EQ(d.ndim, 2);
  EXPECT_EQ(d.shape[0], 2);
  EXPECT_EQ(d.shape[1], 3);
  EXPECT_EQ(d.strides[0], 3);
  EXPECT_EQ(d.strides[1], 1);
  EXPECT_EQ(d.dtype.code, kDLFloat);
  EXPECT_EQ(d.dtype.bits, 32);
  EXPECT_EQ(d.dtype.lanes, 1);
  m->deleter(m);
}

TEST(DLPack, ExportKeepsStorageAliveAfterTheTensorGoes) {
  DLManagedTensor* m = nullptr;
  {
    const Tensor t = Tensor::from(std::vector<std::int64_t>{7, 8, 9, 10}, {4}).slice(1, 2);
    m = t.to_dlpack();
    // The slice's offset is in the pointer: at::fromDLPack 1.13 ignores byte_offset.
    EXPECT_EQ(m->dl_tensor.data, t.data());
    EXPECT_EQ(m->dl_tensor.byte_offset, 0U);
  }
  const auto* p = reinterpret_cast<const std::int64_t*>(static_cast<char*>(m->dl_tensor.data) +
                                                        m->dl_tensor.byte_offset);
  EXPECT_EQ(p[0], 8);
  EXPECT_EQ(p[1], 9);
  m->deleter(m);
}

TEST(DLPack, RoundTripViewsTheSameMemoryForEveryDtype) {
  for (const DType dtype : {DType::u8, DType::u16, DType::u32, DType::i32, DType::i64, DType::f16,
                            DType::bf16, DType::f32, DType::f64}) {
    const Tensor t = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2}).to(dtype);
    const Tensor back = Tensor::from_dlpack(t.to_dlpack());
    EXPECT_EQ(back.data(), t.data()) << ferry::dtype_name(dtype);
    EXPECT_EQ(back.dtype(), dtype);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.device(), ferry::Device::cpu());
    EXPECT_EQ(back.to(DType::f64).data<double>()[7], 8.0);
  }
  const Tensor scalar = Tensor::from(std::vector<float>{3.5f}, {});
  EXPECT_EQ(Tensor::from_dlpack(scalar.to_dlpack()).data<float>()[0], 3.5f);
}

TEST(DLPack, UnsignedSixteenAndThirtyTwoBitsExportAsUIntAndImportBack) {
  const Tensor u16 = Tensor::from(std::vector<std::uint16_t>{0, 1, 65535}, {3});
  DLManagedTensor* m = u16.to_dlpack();
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 16);
  EXPECT_EQ(m->dl_tensor.dtype.lanes, 1);
  const Tensor back16 = Tensor::from_dlpack(m);
  EXPECT_EQ(back16.dtype(), DType::u16);
  EXPECT_EQ(back16.data<std::uint16_t>()[2], 65535);

  const Tensor u32 = Tensor::from(std::vector<std::uint32_t>{0, 0x80000000u, 0xffffffffu}, {3});
  m = u32.to_dlpack();
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLUInt);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  const Tensor back32 = Tensor::from_dlpack(m);
  EXPECT_EQ(back32.dtype(), DType::u32);
  EXPECT_EQ(back32.data(), u32.data());
  EXPECT_EQ(back32.data<std::uint32_t>()[2], 0xffffffffu);
  // Widening after the round trip keeps every value.
  EXPECT_EQ(back32.to(DType::i64).data<std::int64_t>()[2], std::int64_t{0xffffffff});
}

struct Foreign {
  std::vector<float> values;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLManagedTensor managed{};
  bool* deleted = nullptr;
};

DLManagedTensor* foreign(bool* deleted, std::vector<int64_t> strides, DLDataType dtype) {
  auto* f = new Foreign{{1, 2, 3, 4, 5, 6}, {2, 3}, std::move(strides), {}, deleted};
  DLTensor& t = f->managed.dl_tensor;
  t.data = f->values.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = dtype;
  t.shape = f->shape.data();
  t.strides = f->strides.empty() ? nullptr : f->strides.data();
  f->managed.manager_ctx = f;
  f->managed.deleter = [](DLManagedTensor* self) {
    auto* owner = static_cast<Foreign*>(self->manager_ctx);
    *owner->deleted = true;
    delete owner;
  };
  return &f->managed;
}

TEST(DLPack, ImportRunsTheDeleterWhenTheLastViewGoes) {
  bool deleted = false;
  Tensor t = Tensor::from_dlpack(foreign(&deleted, {}, {kDLFloat, 32, 1}));
  EXPECT_EQ(t.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t.data<float>()[5], 6.0f);
  Tensor row = t.slice(1, 1);
  t = Tensor();
  EXPECT_FALSE(deleted);
  EXPECT_EQ(row.data<float>()[0], 4.0f);
  row = Tensor();
  EXPECT_TRUE(deleted);
}

TEST(DLPack, ImportRefusesWhatItCannotViewAndStillFreesIt) {
  bool deleted = false;
  EXPECT_THROW((void)Tensor::from_dlpack(foreign(&deleted, {1, 2}, {kDLFloat, 32, 1})),
               ferry::ConfigError);  // column-major
  EXPECT_TRUE(deleted);
  deleted = false;
  EXPECT_THROW((void)Tensor::from_dlpack(foreign(&deleted, {3, 1}, {kDLFloat, 32, 2})),
               ferry::ConfigError);  // two lanes
  EXPECT_TRUE(deleted);
  // Unsigned and signed widths ferry has no dtype for.
  for (const DLDataType unsupported :
       {DLDataType{kDLUInt, 128, 1}, DLDataType{kDLInt, 4, 1}, DLDataType{kDLUInt, 1, 1}}) {
    deleted = false;
    ferry::testing::expect_error<ferry::ConfigError>(
        [&] { (void)Tensor::from_dlpack(foreign(&deleted, {}, unsupported)); },
        {"unsupported DLPack dtype", "bits " + std::to_string(unsupported.bits)});
    EXPECT_TRUE(deleted);
  }
  EXPECT_THROW((void)Tensor::from_dlpack(nullptr), ferry::ConfigError);
}

TEST(DLPack, ImportOfForeignUnsignedSixteenAndThirtyTwoBits) {
  // The six floats' bytes, seen as u16 [2, 3] and u32 [2, 3] (the latter is the floats' bits).
  bool deleted = false;
  const Tensor u16 = Tensor::from_dlpack(foreign(&deleted, {}, {kDLUInt, 16, 1}));
  EXPECT_EQ(u16.dtype(), DType::u16);
  EXPECT_EQ(u16.shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(u16.data<std::uint16_t>()[1], 0x3f80);  // the high half of 1.0f
  const Tensor u32 = Tensor::from_dlpack(foreign(&deleted, {3, 1}, {kDLUInt, 32, 1}));
  EXPECT_EQ(u32.dtype(), DType::u32);
  EXPECT_EQ(u32.data<std::uint32_t>()[5], 0x40c00000u);  // 6.0f
}

// Hands from_dlpack a foreign tensor that `edit` made hostile: a ConfigError naming the call and
// `parts`, and the producer's deleter still runs.
void expect_refused(const std::function<void(DLTensor&, Foreign&)>& edit,
                    std::initializer_list<std::string_view> parts) {
  bool deleted = false;
  DLManagedTensor* m = foreign(&deleted, {}, {kDLFloat, 32, 1});
  edit(m->dl_tensor, *static_cast<Foreign*>(m->manager_ctx));
  const std::string message = ferry::testing::expect_error<ferry::ConfigError>(
      [&] { (void)Tensor::from_dlpack(m); }, parts);
  EXPECT_NE(message.find("Tensor::from_dlpack"), std::string::npos) << message;
  EXPECT_TRUE(deleted) << "the deleter did not run";
}

// Points the DLTensor at a new shape held by the Foreign.
void set_shape(DLTensor& t, Foreign& f, std::vector<int64_t> shape) {
  f.shape = std::move(shape);
  t.shape = f.shape.data();
  t.ndim = static_cast<int32_t>(f.shape.size());
}

TEST(DLPack, ImportRefusesHostileDescriptionsWithConfigError) {
  constexpr int64_t k2to32 = int64_t{1} << 32;
  expect_refused([](DLTensor& t, Foreign&) { t.ndim = -1; }, {"ndim -1"});
  expect_refused([](DLTensor& t, Foreign&) { t.ndim = 1 << 30; }, {"ndim 1073741824"});
  expect_refused([](DLTensor& t, Foreign&) { t.shape = nullptr; }, {"null shape"});
  expect_refused(
      [](DLTensor& t, Foreign& f) {
        set_shape(t, f, {2, -3});
      },
      {"negative", "[2, -3]"});
  expect_refused(
      [](DLTensor& t, Foreign& f) {
        set_shape(t, f, {k2to32, k2to32});
      },
      {"[4294967296, 4294967296]"});
  expect_refused(
      [](DLTensor& t, Foreign& f) {
        set_shape(t, f, {int64_t{1} << 62, 1});
      },
      {"[4611686018427387904, 1]", "bytes"});
  expect_refused(
      [](DLTensor& t, Foreign& f) {
        f.strides = {1, 2};  // column-major
        t.strides = f.strides.data();
      },
      {"contiguous", "[2, 3]", "stride 2 in dimension 1"});
  expect_refused([](DLTensor& t, Foreign&) { t.data = nullptr; }, {"null data", "[2, 3]"});
  expect_refused(
      [](DLTensor& t, Foreign&) { t.byte_offset = std::numeric_limits<std::uint64_t>::max() - 2; },
      {"byte_offset 18446744073709551613", "[2, 3]"});
  expect_refused([](DLTensor& t, Foreign&) { t.byte_offset = std::uint64_t{1} << 63; },
                 {"byte_offset 9223372036854775808"});
  expect_refused(
      [](DLTensor& t, Foreign&) {
        t.device = {kDLCUDA, -1};
      },
      {"negative CUDA device id -1"});
}

TEST(DLPack, ImportOfAnEmptyTensorIgnoresItsStridesAndNullData) {
  bool deleted = false;
  DLManagedTensor* m = foreign(&deleted, {}, {kDLFloat, 32, 1});
  auto& f = *static_cast<Foreign*>(m->manager_ctx);
  set_shape(m->dl_tensor, f, {0, int64_t{1} << 40, int64_t{1} << 40});
  f.strides = {1, 1, 1};  // their products would not fit; an empty tensor has no layout
  m->dl_tensor.strides = f.strides.data();
  m->dl_tensor.data = nullptr;
  Tensor t = Tensor::from_dlpack(m);
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.nbytes(), 0U);
  t = Tensor();
  EXPECT_TRUE(deleted);
}

TEST(DLPack, ExportOfAnEmptyTensorWithHugeDimensionsRoundTrips) {
  constexpr int64_t kHuge = int64_t{1} << 40;
  const Tensor t = Tensor::empty({kHuge, 0, kHuge, kHuge}, DType::u8);
  EXPECT_EQ(t.numel(), 0);
  DLManagedTensor* m = t.to_dlpack();
  EXPECT_EQ(m->dl_tensor.strides[3], 1);
  EXPECT_EQ(m->dl_tensor.strides[2], kHuge);
  const Tensor back = Tensor::from_dlpack(m);
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.nbytes(), 0U);
}

}  // namespace
