// The loader's field operations: each written once against OpRunner, run by HostOps on the
// calling thread and by EngineOps on a copy engine's stream (the host engine here; the CUDA
// engine in tests/cuda). Both must give the same bytes, which are checked against values
// computed here, and a plan chains operations through its regions.

#include "pipeline/field_ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "copy/host/host_copy_engine.hpp"
#include "ferry/ferry.hpp"
#include "pipeline/batch_layout.hpp"

namespace {

using ferry::DType;
using ferry::FieldSpec;
using ferry::detail::BatchLayout;
using ferry::detail::EngineOps;
using ferry::detail::FieldOp;
using ferry::detail::HostCopyEngine;
using ferry::detail::HostOps;
using ferry::detail::OpSpan;

// Runs `layout`'s plans over a buffer whose written region holds `fill`, with both runners, and
// checks they agree; returns the host runner's buffer.
std::vector<std::byte> run_both(const BatchLayout& layout, std::size_t count,
                                const std::vector<std::byte>& written,
                                const std::uint64_t* indices = nullptr) {
  std::vector<std::byte> host(layout.bytes);
  std::vector<std::byte> engine(layout.bytes);
  std::copy(written.begin(), written.end(), host.begin());
  std::copy(written.begin(), written.end(), engine.begin());
  HostOps h;
  for (const auto& plan : layout.plans) plan.run(h, OpSpan{host.data(), indices, 0, count});
  HostCopyEngine e(HostCopyEngine::Options{});
  EngineOps q(e);
  for (const auto& plan : layout.plans) plan.run(q, OpSpan{engine.data(), indices, 0, count});
  e.synchronize();
  EXPECT_EQ(host, engine);
  return host;
}

TEST(FieldOps, HwcToChwThenDTypeChainsThroughRegions) {
  // One field u8 [2, 3, 2] (H, W, C), two samples: to CHW, then to f32.
  const FieldSpec image{"img", DType::u8, {2, 3, 2}};
  std::vector<std::vector<std::unique_ptr<FieldOp>>> ops(1);
  ops[0].push_back(ferry::detail::hwc_to_chw(image));
  ops[0].push_back(ferry::detail::convert_dtype(ops[0][0]->output(), DType::f32));
  const BatchLayout layout({image}, 2, std::move(ops));
  ASSERT_EQ(layout.plans[0].regions.size(), 3U);
  EXPECT_EQ(layout.plans[0].delivered.shape, (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(layout.plans[0].delivered.dtype, DType::f32);
  std::vector<std::byte> written(layout.written.bytes);
  for (std::size_t i = 0; i < 24; ++i) written[i] = static_cast<std::byte>(i * 3);
  const std::vector<std::byte> out = run_both(layout, 2, written);
  const auto* f = reinterpret_cast<const float*>(out.data() + layout.delivered_offset(0));
  for (int n = 0; n < 2; ++n) {
    for (int c = 0; c < 2; ++c) {
      for (int p = 0; p < 6; ++p) {
        const int hwc = n * 12 + p * 2 + c;
        EXPECT_EQ(f[n * 12 + c * 6 + p], static_cast<float>(hwc * 3)) << n << c << p;
      }
    }
  }
}

TEST(FieldOps, NormalizeMatchesTheFormula) {
  FieldSpec image{"img", DType::u8, {1, 2, 3}};
  image.normalize = ferry::Normalize{.mean = {0.5f, 0.25f, 0.f}, .std = {0.5f, 0.25f, 2.f}};
  std::vector<std::vector<std::unique_ptr<FieldOp>>> ops(1);
  ops[0].push_back(ferry::detail::normalize_image(image));
  const BatchLayout layout({image}, 1, std::move(ops));
  std::vector<std::byte> written(layout.written.bytes);
  const std::uint8_t px[6] = {0, 51, 255, 102, 204, 1};
  std::memcpy(written.data(), px, 6);
  const std::vector<std::byte> out = run_both(layout, 1, written);
  const auto* f = reinterpret_cast<const float*>(out.data() + layout.delivered_offset(0));
  const float mean[3] = {0.5f, 0.25f, 0.f};
  const float stdev[3] = {0.5f, 0.25f, 2.f};
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 2; ++p) {
      const float x = static_cast<float>(px[p * 3 + c]) / 255.f;
      EXPECT_NEAR(f[c * 2 + p], (x - mean[c]) / stdev[c], 1e-5f) << c << p;
    }
  }
}

TEST(FieldOps, GatherWritesRowsByIndexAndIsASource) {
  const FieldSpec row{"row", DType::i32, {3}};
  std::vector<std::int32_t> rows(30);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::int32_t>(i * 7);
  std::vector<std::vector<std::unique_ptr<FieldOp>>> ops(1);
  ops[0].push_back(
      ferry::detail::gather_rows(row, reinterpret_cast<const std::byte*>(rows.data())));
  const BatchLayout layout({row}, 4, std::move(ops));
  EXPECT_TRUE(layout.gather);
  EXPECT_TRUE(layout.plans[0].has_source());
  EXPECT_EQ(layout.delivered_offset(0), layout.written.offsets[0]);  // in place
  const std::uint64_t indices[4] = {9, 0, 4, 9};
  const std::vector<std::byte> out = run_both(layout, 4, {}, indices);
  const auto* got = reinterpret_cast<const std::int32_t*>(out.data() + layout.delivered_offset(0));
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(got[i * 3 + j], static_cast<std::int32_t>((indices[i] * 3 + j) * 7));
    }
  }
}

TEST(FieldOps, RefusesFieldsTheyCannotTake) {
  EXPECT_THROW((void)ferry::detail::hwc_to_chw(FieldSpec{"v", DType::f32, {4}}),
               ferry::ConfigError);
  FieldSpec f32_image{"img", DType::f32, {2, 2, 3}};
  f32_image.normalize = ferry::Normalize{};
  EXPECT_THROW((void)ferry::detail::normalize_image(f32_image), ferry::ConfigError);
  // A region whose batch overflows is refused by the layout.
  const FieldSpec wide{"wide", DType::u8, {int64_t{1} << 40, 1, 1}};
  std::vector<std::vector<std::unique_ptr<FieldOp>>> ops(1);
  ops[0].push_back(ferry::detail::convert_dtype(wide, DType::f64));
  EXPECT_THROW(BatchLayout({wide}, std::size_t{1} << 22, std::move(ops)), ferry::ConfigError);
}

}  // namespace
