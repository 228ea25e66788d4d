// Uses an installed ferry from outside its tree: parses devices, makes a tensor, converts it,
// sends it to the best device and back, and checks every value. Exits non-zero on a mismatch.

#include <cstdint>
#include <exception>
#include <ferry/ferry.hpp>
#include <iostream>
#include <string>
#include <vector>

#if defined(__linux__) && __has_include(<dlfcn.h>)
#include <dlfcn.h>
#define CONSUMER_HAS_DLADDR 1
#endif

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::cout << (ok ? "  ok    " : "  FAIL  ") << what << '\n';
  if (!ok) ++failures;
}

}  // namespace

int main() {
  try {
    std::cout << "ferry " << ferry::kVersion << ", built with CUDA: " << std::boolalpha
              << ferry::built_with_cuda() << ", cuda devices: " << ferry::cuda_device_count()
              << '\n';
#ifdef CONSUMER_HAS_DLADDR
    // The install test checks that this is the installed library, not the build tree's.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&ferry::cuda_device_count), &info) != 0 &&
        info.dli_fname != nullptr) {
      std::cout << "libferry loaded from " << info.dli_fname << '\n';
    }
#endif

    check(ferry::Device::parse("cpu") == ferry::Device::cpu(), "parse(\"cpu\")");
    check(ferry::Device::parse("cuda").str() == "cuda:0", "parse(\"cuda\") is cuda:0");
    check(ferry::Device::parse("cuda:3").index() == 3, "parse(\"cuda:3\").index() == 3");
    bool threw = false;
    try {
      ferry::Device::parse("gpu");
    } catch (const ferry::Error&) {
      // Thrown in libferry, caught here: the exception's type info crosses the library boundary.
      threw = true;
    }
    check(threw, "parse(\"gpu\") throws ferry::Error");

    // Integers that f32 holds exactly, so the round trip must give them back bit for bit.
    const std::vector<std::int32_t> values = {-70000, -3, -1, 0, 1, 2, 255, 1 << 24};
    const ferry::Tensor ints = ferry::Tensor::from(values, {2, 4});
    const ferry::Tensor floats = ints.to(ferry::DType::f32);
    const ferry::Device device = ferry::Device::best();
    const ferry::Tensor there = floats.to(device);
    const ferry::Tensor back = there.cpu();
    std::cout << "tensor [2, 4] i32 -> f32 -> " << there.device() << " -> " << back.device()
              << '\n';

    check(there.device() == device, "to(Device::best()) lands on " + device.str());
    check(back.device() == ferry::Device::cpu(), "cpu() lands on the CPU");
    check(back.shape() == std::vector<int64_t>{2, 4}, "shape [2, 4] kept");
    check(back.dtype() == ferry::DType::f32, "dtype f32 kept");
    const float* got = back.data<float>();
    bool same = true;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto expected = static_cast<float>(values[i]);
      std::cout << "    [" << i << "] " << values[i] << " -> " << got[i] << '\n';
      same = same && got[i] == expected;
    }
    check(same, "values survive i32 -> f32 -> device -> cpu");
    const ferry::Tensor again = back.to(ferry::DType::i32);
    check(std::vector<std::int32_t>(again.data<std::int32_t>(),
                                    again.data<std::int32_t>() + again.numel()) == values,
          "f32 -> i32 gives the integers back");
  } catch (const std::exception& e) {
    std::cout << "  FAIL  exception: " << e.what() << '\n';
    ++failures;
  }
  std::cout << (failures == 0 ? "consumer: all checks passed" : "consumer: checks FAILED") << '\n';
  return failures == 0 ? 0 : 1;
}
