#include "core/storage.hpp"

#include <utility>

#include "copy/cuda/cuda_api.hpp"

namespace ferry::detail {
namespace {

void* data_of(const Storage::Memory& m) noexcept {
  return std::visit(
      [](const auto& v) -> void* {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Storage::External>) {
          return v.data;
        } else {
          return v.data();
        }
      },
      m);
}

std::size_t size_of(const Storage::Memory& m) noexcept {
  return std::visit(
      [](const auto& v) -> std::size_t {
        if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Storage::External>) {
          return v.size;
        } else {
          return v.size();
        }
      },
      m);
}

}  // namespace

Storage::Storage(Memory memory, Device device, bool pinned) noexcept
    : memory_(std::move(memory)),
      data_(data_of(memory_)),
      size_(size_of(memory_)),
      device_(device),
      pinned_(pinned) {}

Storage::~Storage() {
  try {
    pending_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): a destructor cannot report a failed copy
  }
}

void Storage::set_pending(Event event, std::vector<std::shared_ptr<const Storage>> sources) {
  pending_ = std::move(event);
  sources_ = std::move(sources);
}

std::shared_ptr<Storage> allocate_storage(std::size_t nbytes, Device device, bool pinned) {
  if (device.is_cuda()) {
    DeviceBuffer buffer = DeviceBuffer::allocate(device, nbytes);
    return std::make_shared<Storage>(std::move(buffer), device, false);
  }
  if (pinned) {
    PinnedPool::Block block = PinnedPool::global().acquire(nbytes);
    const bool locked = block.locked();
    return std::make_shared<Storage>(std::move(block), device, locked);
  }
  return std::make_shared<Storage>(HostBuffer::allocate(nbytes), device, false);
}

}  // namespace ferry::detail
