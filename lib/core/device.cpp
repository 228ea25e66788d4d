#include "ferry/device.hpp"

#include <charconv>
#include <ostream>
#include <string>

#include "ferry/error.hpp"
#include "ferry/version.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry {

Device Device::cuda(int index) {
  if (index < 0) {
    throw ConfigError("Device: cuda index must be >= 0, got " + std::to_string(index));
  }
  return {DeviceKind::cuda, index};
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  constexpr std::string_view kPrefix = "cuda:";
  if (text.starts_with(kPrefix) && text.size() > kPrefix.size()) {
    const std::string_view digits = text.substr(kPrefix.size());
    int index = 0;
    const auto* first = digits.data();
    const auto* last = digits.data() + digits.size();
    const auto [ptr, ec] = std::from_chars(first, last, index);
    if (ec == std::errc() && ptr == last && digits.front() != '-' && digits.front() != '+') {
      return cuda(index);
    }
  }
  throw ConfigError("Device: cannot parse \"" + std::string(text) +
                    "\": expected \"cpu\", \"cuda\" or \"cuda:N\"");
}

Device Device::best() noexcept {
  return cuda_device_count() > 0 ? Device(DeviceKind::cuda, 0) : cpu();
}

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

int cuda_device_count() noexcept { return detail::cuda::device_count(); }

std::string cuda_unavailable_reason() { return detail::cuda::unavailable_reason(); }

void check_usable(Device device) {
  if (device.is_cpu()) return;
  const std::string problem = detail::cuda::device_problem(device.index());
  if (!problem.empty()) throw DeviceError(device.str() + " is not usable: " + problem);
}

bool built_with_cuda() noexcept { return detail::cuda::built(); }

}  // namespace ferry
