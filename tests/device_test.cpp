#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "ferry/ferry.hpp"

namespace {

using ferry::Device;
using ferry::DeviceKind;

TEST(Device, ParsesAndFormatsEveryValidForm) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cpu").kind(), DeviceKind::cpu);
  EXPECT_EQ(Device::parse("cpu").index(), -1);
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:12").index(), 12);
  EXPECT_EQ(Device::parse("cuda:12").kind(), DeviceKind::cuda);
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::cuda().str(), "cuda:0");
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  for (const char* text : {"cpu", "cuda:0", "cuda:7"}) {
    EXPECT_EQ(Device::parse(text).str(), text);
  }
  std::ostringstream os;
  os << Device::cuda(2) << ' ' << Device::cpu();
  EXPECT_EQ(os.str(), "cuda:2 cpu");
}

TEST(Device, BadTextRaisesConfigErrorQuotingIt) {
  for (const char* text : {"", "gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "CUDA", " cpu",
                           "cpu ", "cuda:0:1", "cuda:99999999999"}) {
    try {
      (void)Device::parse(text);
      ADD_FAILURE() << "parsed \"" << text << "\"";
    } catch (const ferry::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("\"" + std::string(text) + "\""), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW((void)Device::cuda(-1), ferry::ConfigError);
}

TEST(Device, BestIsCudaExactlyWhenAGpuIsUsable) {
  const int count = ferry::cuda_device_count();
  EXPECT_GE(count, 0);
  EXPECT_EQ(ferry::cuda_device_count(), count);  // stable
  EXPECT_EQ(Device::best(), count > 0 ? Device::cuda(0) : Device::cpu());
  EXPECT_EQ(ferry::cuda_is_available(), count > 0);
  EXPECT_EQ(ferry::cuda_unavailable_reason().empty(), count > 0);
}

TEST(Device, UnusableCudaDeviceRaisesDeviceErrorWithCudaText) {
  const int count = ferry::cuda_device_count();
  const Device beyond = Device::cuda(count);  // never usable
  try {
    ferry::check_usable(beyond);
    FAIL() << beyond.str() << " reported usable";
  } catch (const ferry::DeviceError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(beyond.str() + " is not usable: ", 0), 0U) << message;
    if (count == 0) {
      EXPECT_NE(message.find(ferry::cuda_unavailable_reason()), std::string::npos) << message;
    }
  }
  EXPECT_NO_THROW(ferry::check_usable(Device::cpu()));
}

TEST(Device, WithoutGpuTheReasonIsCudasOwnText) {
  if (ferry::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is usable here";
  const std::string reason = ferry::cuda_unavailable_reason();
  if (!ferry::built_with_cuda()) {
    EXPECT_EQ(reason, "ferry was built without CUDA");
  } else {
    // Whatever the machine lacks (driver, device), the text is the CUDA runtime's.
    EXPECT_FALSE(reason.empty());
    EXPECT_EQ(reason.find("ferry"), std::string::npos) << reason;
  }
}

}  // namespace
