#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

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
  for (const DType dtype :
       {DType::u8, DType::i32, DType::i64, DType::f16, DType::bf16, DType::f32, DType::f64}) {
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
  EXPECT_THROW((void)Tensor::from_dlpack(nullptr), ferry::ConfigError);
}

}  // namespace
