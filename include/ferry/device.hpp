#pragma once

#include <compare>
#include <iosfwd>
#include <string>
#include <string_view>

#include "ferry/export.hpp"

namespace ferry {

/// What kind of memory a device computes on.
enum class DeviceKind { cpu, cuda };

/// A place where tensors live: "cpu", "cuda" (= "cuda:0") or "cuda:N".
///
/// A Device is a plain value; naming a device does not check that it exists. Using a CUDA
/// device that is not usable (no driver, no GPU, index out of range) throws
/// ferry::DeviceError with the CUDA error text. Every method may be called from any thread.
class FERRY_API Device {
 public:
  /// The CPU.
  constexpr Device() noexcept = default;

  /// The CPU.
  static Device cpu() noexcept { return {}; }
  /// CUDA device `index`. \throws ConfigError when index is negative.
  static Device cuda(int index = 0);
  /// Parses "cpu", "cuda" or "cuda:N". \throws ConfigError quoting the text when it is none of
  /// these.
  static Device parse(std::string_view text);
  /// cuda:0 when a usable GPU exists, else cpu: "cuda if available else cpu". Never throws.
  static Device best() noexcept;

  DeviceKind kind() const noexcept { return kind_; }
  /// The CUDA device index; -1 for the CPU.
  int index() const noexcept { return kind_ == DeviceKind::cpu ? -1 : index_; }
  bool is_cpu() const noexcept { return kind_ == DeviceKind::cpu; }
  bool is_cuda() const noexcept { return kind_ == DeviceKind::cuda; }
  /// "cpu" or "cuda:N"; parse(str()) == *this.
  std::string str() const;

  friend bool operator==(const Device&, const Device&) = default;

 private:
  constexpr Device(DeviceKind kind, int index) noexcept : kind_(kind), index_(index) {}
  DeviceKind kind_ = DeviceKind::cpu;
  int index_ = 0;
};

FERRY_API std::ostream& operator<<(std::ostream& os, const Device& device);

/// Number of usable CUDA devices: 0 when ferry was built without CUDA, when there is no
/// driver or no GPU. Never throws; the answer is computed once per process.
FERRY_API int cuda_device_count() noexcept;

/// True when cuda_device_count() > 0.
inline bool cuda_is_available() noexcept { return cuda_device_count() > 0; }

/// Why CUDA is unavailable, in CUDA's words ("CUDA driver version is insufficient for CUDA
/// runtime version"), or "ferry was built without CUDA"; empty when a GPU is usable.
FERRY_API std::string cuda_unavailable_reason();

/// \throws DeviceError "cuda:N is not usable: <CUDA error text>" unless `device` is the CPU
/// or a usable CUDA device.
FERRY_API void check_usable(Device device);

}  // namespace ferry
