#include "copy/cuda_engines.hpp"

#include <memory>
#include <mutex>
#include <string>

#include "copy/cuda/cuda_copy_engine.hpp"
#include "ferry/error.hpp"
#include "runtime/cuda_api.hpp"

namespace ferry::detail::cuda {

CopyEngine& engine(int index) {
  const std::string problem = device_problem(index);
  if (!problem.empty()) {
    throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + problem);
  }
  // Engines live as long as the process: their streams must outlive every tensor, and the
  // runtime reclaims them at exit.
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  CudaCopyEngine*& slot = per_device<CudaCopyEngine*>(index);
  if (slot == nullptr) {
    try {
      slot = new CudaCopyEngine(index);
    } catch (const DeviceError& e) {
      throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + e.what());
    }
  }
  return *slot;
}

std::unique_ptr<CopyEngine> make_engine(int index) {
  const std::string problem = device_problem(index);
  if (!problem.empty()) {
    throw DeviceError("cuda:" + std::to_string(index) + " is not usable: " + problem);
  }
  return std::make_unique<CudaCopyEngine>(index);
}

}  // namespace ferry::detail::cuda
