// cudasim's model of the CUDA runtime (see cudasim.hpp). One mutex guards the whole model; work
// queued on a stream runs on that stream's thread, outside the mutex.

#include "cudasim.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Device memory lives at host addresses with this bit set: not canonical on x86-64 (nor a user
// address on AArch64), so a host load or store there faults.
constexpr std::uintptr_t kDeviceTag = std::uintptr_t{1} << 62;
constexpr std::size_t kAlign = 256;        // cudaMalloc's alignment
constexpr int kDefaultMemoryMib = 143771;  // an H200's totalGlobalMem

enum class Memory { device, pinned };

struct Block {
  std::byte* base = nullptr;  // the host memory behind it
  std::size_t bytes = 0;
  Memory kind = Memory::device;
  int device = 0;
  bool registered = false;  // cudaHostRegister's: the caller's memory, not freed here
};

struct Op {
  std::function<void()> work;                                 // may be empty (a wait)
  std::vector<std::pair<CUstream_st*, std::uint64_t>> after;  // runs once these are done
  int device = 0;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

}  // namespace

struct CUstream_st {
  int device = 0;
  bool legacy = false;    // the device's default stream (nullptr)
  bool blocking = false;  // orders itself with the legacy stream
  bool destroyed = false;
  std::uint64_t queued = 0;  // operations queued so far; the n-th has sequence number n
  std::uint64_t done = 0;    // operations finished so far (they finish in order)
  std::deque<Op> ops;
  std::uint64_t rng = 0;  // for the delays
};

struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  CUstream_st* stream = nullptr;  // of the last record; nullptr: never recorded
  std::uint64_t seq = 0;          // ready once stream->done reaches it
  std::uint64_t generation = 0;   // records so far
  Clock::time_point when{};       // when the last record's point was reached
};

namespace {

struct World {
  std::mutex mutex;
  std::condition_variable changed;
  int devices = env_int("FERRY_CUDASIM_DEVICES", 2);
  std::size_t capacity =
      static_cast<std::size_t>(env_int("FERRY_CUDASIM_MEMORY_MIB", kDefaultMemoryMib)) << 20;
  int delay_us = env_int("FERRY_CUDASIM_DELAY_US", 0);
  std::map<std::uintptr_t, Block> blocks;  // by the address the program sees
  std::vector<std::size_t> used = std::vector<std::size_t>(static_cast<std::size_t>(devices));
  std::vector<CUstream_st*> legacy =
      std::vector<CUstream_st*>(static_cast<std::size_t>(devices), nullptr);
  std::vector<CUstream_st*> streams;  // every live stream, the legacy ones included
  std::vector<bool> context = std::vector<bool>(static_cast<std::size_t>(devices), false);
  std::vector<cudaError_t> sticky =
      std::vector<cudaError_t>(static_cast<std::size_t>(devices), cudaSuccess);
  // peer[d * devices + e]: kernels on device d may touch device e's memory.
  std::vector<bool> peer = std::vector<bool>(static_cast<std::size_t>(devices * devices), false);
  // Changes whenever a block goes or a peer access does: what a kernel thread's cached lookup
  // (device_access) rests on.
  std::atomic<std::uint64_t> generation{0};
  struct Failure {
    cudaError_t error = cudaSuccess;
    int times = 0;
    std::thread::id thread;  // default: any thread
  };
  std::map<std::string, Failure> failures;
  std::set<const CUevent_st*> events;
  ferry_cudasim::Counts counts;
};

// Never destroyed: stream threads outlive static destruction.
World& world() {
  static World* w = new World();
  return *w;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;
thread_local CUstream_st* running_on = nullptr;  // the stream whose work this thread runs

cudaError_t fail(cudaError_t error) {
  if (error != cudaSuccess && error != cudaErrorNotReady) last_error = error;
  return error;
}

// A pending fail_next for `function`, or cudaSuccess. \pre the world's mutex is held.
cudaError_t injected(World& w, const char* function) {
  auto it = w.failures.find(function);
  if (it == w.failures.end()) return cudaSuccess;
  if (it->second.thread != std::thread::id() && it->second.thread != std::this_thread::get_id()) {
    return cudaSuccess;
  }
  const cudaError_t error = it->second.error;
  if (--it->second.times <= 0) w.failures.erase(it);
  return error;
}

// The common start of a call that works on the current device: an injected failure, else the
// device's sticky error, else success. Makes the device's context.
cudaError_t enter(World& w, const char* function) {
  if (const cudaError_t e = injected(w, function); e != cudaSuccess) return e;
  if (w.devices == 0) return cudaErrorNoDevice;
  const auto d = static_cast<std::size_t>(current_device);
  w.context[d] = true;
  return w.sticky[d];
}

bool live_stream(const World& w, const CUstream_st* s) {
  return std::find(w.streams.begin(), w.streams.end(), s) != w.streams.end();
}

bool op_ready(const Op& op) {
  return std::all_of(op.after.begin(), op.after.end(),
                     [](const auto& a) { return a.first->done >= a.second; });
}

void run_stream(CUstream_st* s) {
  World& w = world();
  running_on = s;
  std::unique_lock lock(w.mutex);
  for (;;) {
    w.changed.wait(lock, [&] {
      return (s->destroyed && s->ops.empty()) || (!s->ops.empty() && op_ready(s->ops.front()));
    });
    if (s->ops.empty()) return;
    Op op = std::move(s->ops.front());
    s->ops.pop_front();
    const int delay = w.delay_us;
    lock.unlock();
    if (delay > 0) {
      s->rng = s->rng * 6364136223846793005ULL + 1442695040888963407ULL;
      std::this_thread::sleep_for(
          std::chrono::microseconds((s->rng >> 33) % (2 * static_cast<std::uint64_t>(delay) + 1)));
    }
    cudaError_t faulted = cudaSuccess;
    if (op.work) {
      try {
        op.work();
      } catch (const ferry_cudasim::Fault& f) {
        faulted = f.error;
      }
    }
    lock.lock();
    if (faulted != cudaSuccess) w.sticky[static_cast<std::size_t>(op.device)] = faulted;
    ++s->done;
    w.changed.notify_all();
  }
}

CUstream_st* new_stream(World& w, int device, bool legacy, bool blocking) {
  auto* s = new CUstream_st();
  s->device = device;
  s->legacy = legacy;
  s->blocking = blocking;
  s->rng = 0x9e3779b97f4a7c15ULL ^ reinterpret_cast<std::uintptr_t>(s);
  w.streams.push_back(s);
  std::thread(run_stream, s).detach();
  return s;
}

// The stream a handle names (nullptr: the current device's legacy stream), or nullptr for a
// handle that names no live stream.
CUstream_st* resolve(World& w, cudaStream_t stream) {
  if (stream == nullptr) {
    CUstream_st*& l = w.legacy[static_cast<std::size_t>(current_device)];
    if (l == nullptr) l = new_stream(w, current_device, true, true);
    return l;
  }
  return live_stream(w, stream) ? stream : nullptr;
}

// Queues `op` on `s`, ordered with the legacy stream as CUDA orders blocking streams; returns
// its sequence number.
std::uint64_t enqueue(World& w, CUstream_st* s, Op op) {
  if (s->legacy) {
    for (CUstream_st* t : w.streams) {
      if (t != s && t->device == s->device && t->blocking && t->queued > t->done) {
        op.after.emplace_back(t, t->queued);
      }
    }
  } else if (s->blocking) {
    CUstream_st* l = w.legacy[static_cast<std::size_t>(s->device)];
    if (l != nullptr && l->queued > l->done) op.after.emplace_back(l, l->queued);
  }
  op.device = s->device;
  s->ops.push_back(std::move(op));
  w.changed.notify_all();
  return ++s->queued;
}

void wait_for(World& w, std::unique_lock<std::mutex>& lock, const CUstream_st* s,
              std::uint64_t seq) {
  if (s->done >= seq) return;
  ++w.counts.blocking_waits;
  w.changed.wait(lock, [&] { return s->done >= seq; });
}

// Waits until every stream of `device` has finished what was queued on it so far.
void drain_device(World& w, std::unique_lock<std::mutex>& lock, int device) {
  std::vector<std::pair<CUstream_st*, std::uint64_t>> marks;
  for (CUstream_st* s : w.streams) {
    if (s->device == device) marks.emplace_back(s, s->queued);
  }
  for (const auto& [s, seq] : marks) wait_for(w, lock, s, seq);
}

enum class Where { device, pinned, pageable, bad };

// Where `bytes` bytes at `ptr` are; for device and pinned memory, their block.
Where locate(const World& w, const void* ptr, std::size_t bytes, const Block** block = nullptr) {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  auto it = w.blocks.upper_bound(a);
  if (it != w.blocks.begin()) {
    --it;
    const Block& b = it->second;
    if (a >= it->first && a - it->first <= b.bytes) {
      if (bytes > b.bytes - (a - it->first)) return Where::bad;
      if (block != nullptr) *block = &b;
      return b.kind == Memory::device ? Where::device : Where::pinned;
    }
  }
  return (a & kDeviceTag) != 0 ? Where::bad : Where::pageable;
}

bool reaches(const World& w, int device, int memory) {
  return device < 0 || device == memory ||
         w.peer[static_cast<std::size_t>(device * w.devices + memory)];
}

// The host address behind `ptr`, checked now (on the stream's thread): device memory (of
// `device` or its peers, unless `device` is -1: any device) or pinned memory, or pageable memory
// when `pageable_ok`. \throws Fault. \pre the world's mutex is held.
std::byte* translate_locked(const World& w, const void* ptr, std::size_t bytes, bool pageable_ok,
                            int device, const Block** block = nullptr) {
  const Block* b = nullptr;
  switch (locate(w, ptr, bytes, &b)) {
    case Where::device:
      if (!reaches(w, device, b->device)) throw ferry_cudasim::Fault{};
      if (block != nullptr) *block = b;
      return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(ptr) & ~kDeviceTag);
    case Where::pinned:
      if (block != nullptr) *block = b;
      return static_cast<std::byte*>(const_cast<void*>(ptr));
    case Where::pageable:
      if (pageable_ok) return static_cast<std::byte*>(const_cast<void*>(ptr));
      throw ferry_cudasim::Fault{};
    case Where::bad:
      break;
  }
  throw ferry_cudasim::Fault{};
}

std::byte* translate(const void* ptr, std::size_t bytes, bool pageable_ok, int device) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  return translate_locked(w, ptr, bytes, pageable_ok, device);
}

// A kernel thread's last few blocks (a kernel reads one and writes another), reused while the
// world's generation and the device stay.
struct CachedBlock {
  std::uintptr_t first = 0, last = 0;  // the addresses [first, last) the program sees
  std::uintptr_t host = 0;             // the host address behind `first`
  std::uint64_t generation = ~std::uint64_t{0};
  int device = -2;
};
constexpr std::size_t kCachedBlocks = 4;
thread_local std::array<CachedBlock, kCachedBlocks> cached_blocks;
thread_local std::size_t next_cached = 0;

void* new_block(World& w, std::size_t bytes, Memory kind) {
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  // A guard of kAlign bytes after the block: its end is never another block's start.
  auto* base = static_cast<std::byte*>(std::aligned_alloc(kAlign, rounded + kAlign));
  if (base == nullptr) return nullptr;
  std::memset(base, kind == Memory::device ? 0xcd : 0, rounded);  // fresh device memory: garbage
  const std::uintptr_t address =
      reinterpret_cast<std::uintptr_t>(base) | (kind == Memory::device ? kDeviceTag : 0);
  w.blocks[address] = Block{base, bytes, kind, current_device};
  return reinterpret_cast<void*>(address);
}

bool kind_fits(cudaMemcpyKind kind, Where dst, Where src) {
  const auto host = [](Where x) { return x == Where::pinned || x == Where::pageable; };
  switch (kind) {
    case cudaMemcpyHostToHost:
      return host(dst) && host(src);
    case cudaMemcpyHostToDevice:
      return dst == Where::device && host(src);
    case cudaMemcpyDeviceToHost:
      return host(dst) && src == Where::device;
    case cudaMemcpyDeviceToDevice:
      return dst == Where::device && src == Where::device;
    case cudaMemcpyDefault:
      return true;
  }
  return false;
}

cudaError_t memcpy_on(const char* function, void* dst, const void* src, std::size_t count,
                      cudaMemcpyKind kind, cudaStream_t stream, bool blocking) {
  World& w = world();
  std::unique_lock lock(w.mutex);
  if (const cudaError_t e = enter(w, function); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  const Where to = locate(w, dst, count);
  const Where from = locate(w, src, count);
  if (to == Where::bad || from == Where::bad || !kind_fits(kind, to, from)) {
    return fail(cudaErrorInvalidValue);
  }
  const std::uint64_t seq =
      enqueue(w, s,
              Op{[dst, src, count, to, from] {
                   // Memory page-locked or on a device when the copy was
                   // queued must still be: freed meanwhile, it faults.
                   std::byte* d = translate(dst, count, to == Where::pageable, -1);
                   const std::byte* from_bytes = translate(src, count, from == Where::pageable, -1);
                   std::memmove(d, from_bytes, count);
                 },
                 {}});
  // Pageable host memory: CUDA stages it, and the call returns only once the host's bytes are
  // read (to the device) or written (from it).
  const bool pageable = to == Where::pageable || from == Where::pageable;
  if (pageable && !blocking) ++w.counts.pageable_copies;
  if (blocking || pageable) wait_for(w, lock, s, seq);
  return cudaSuccess;
}

int sim_ctx_state(int device, unsigned* flags, int* active) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (device < 0 || device >= w.devices) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *flags = 0;
  *active = w.context[static_cast<std::size_t>(device)] ? 1 : 0;
  return 0;
}

}  // namespace

namespace ferry_cudasim {

cudaError_t launch(cudaStream_t stream, dim3 grid, dim3 block, std::size_t shared_bytes,
                   std::function<void()> work) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "launch"); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  // CUDA: "a kernel launch will fail if it is issued to a stream that is not associated to the
  // current device" (copies and event waits across devices are allowed).
  if (s == nullptr || s->device != current_device) return fail(cudaErrorInvalidResourceHandle);
  const std::uint64_t threads = std::uint64_t{block.x} * block.y * block.z;
  const bool fits = grid.x != 0 && grid.y != 0 && grid.z != 0 && block.x != 0 && block.y != 0 &&
                    block.z != 0 && threads <= kMaxThreadsPerBlock && block.x <= kMaxBlockDim[0] &&
                    block.y <= kMaxBlockDim[1] && block.z <= kMaxBlockDim[2] &&
                    grid.x <= kMaxGridDim[0] && grid.y <= kMaxGridDim[1] &&
                    grid.z <= kMaxGridDim[2] && shared_bytes <= kSharedMemPerBlock;
  if (!fits) return fail(cudaErrorInvalidConfiguration);
  enqueue(w, s, Op{std::move(work), {}});
  return cudaSuccess;
}

void* device_access(const void* ptr, std::size_t bytes, std::size_t align) {
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  if (align > 1 && a % align != 0) throw Fault{cudaErrorMisalignedAddress};
  World& w = world();
  const int device = running_on != nullptr ? running_on->device : -1;
  const std::uint64_t generation = w.generation.load(std::memory_order_acquire);
  for (const CachedBlock& c : cached_blocks) {
    if (c.device == device && c.generation == generation && a >= c.first && a < c.last &&
        bytes <= c.last - a) {
      return reinterpret_cast<void*>(c.host + (a - c.first));
    }
  }
  std::lock_guard lock(w.mutex);
  const Block* b = nullptr;
  std::byte* host = translate_locked(w, ptr, bytes, false, device, &b);
  const auto it = std::prev(w.blocks.upper_bound(a));  // the block translate_locked found
  cached_blocks[next_cached] = CachedBlock{it->first, it->first + b->bytes,
                                           reinterpret_cast<std::uintptr_t>(host) - (a - it->first),
                                           w.generation.load(std::memory_order_relaxed), device};
  next_cached = (next_cached + 1) % kCachedBlocks;
  return host;
}

void fail_next(const char* function, cudaError_t error, int times, bool this_thread_only) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  w.failures[function] = World::Failure{
      error, times, this_thread_only ? std::this_thread::get_id() : std::thread::id()};
}

void fault(int index) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (index >= 0 && index < w.devices) {
    w.sticky[static_cast<std::size_t>(index)] = cudaErrorIllegalAddress;
  }
  w.changed.notify_all();
}

void clear_failures() {
  World& w = world();
  std::lock_guard lock(w.mutex);
  w.failures.clear();
}

bool has_context(int index) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  return index >= 0 && index < w.devices && w.context[static_cast<std::size_t>(index)];
}

Counts counts() {
  World& w = world();
  std::lock_guard lock(w.mutex);
  return w.counts;
}

}  // namespace ferry_cudasim

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *count = 0;
  if (const cudaError_t e = injected(w, "cudaGetDeviceCount"); e != cudaSuccess) return fail(e);
  if (w.devices <= 0) return fail(cudaErrorNoDevice);
  *count = w.devices;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = injected(w, "cudaSetDevice"); e != cudaSuccess) return fail(e);
  if (device < 0 || device >= w.devices) return fail(cudaErrorInvalidDevice);
  current_device = device;
  w.context[static_cast<std::size_t>(device)] = true;  // CUDA 12: cudaSetDevice makes it
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = injected(w, "cudaGetDeviceProperties"); e != cudaSuccess) {
    return fail(e);
  }
  if (w.devices <= 0) return fail(cudaErrorNoDevice);
  if (device < 0 || device >= w.devices) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "NVIDIA H200", sizeof(prop->name) - 1);
  prop->totalGlobalMem = w.capacity;
  prop->sharedMemPerBlock = ferry_cudasim::kSharedMemPerBlock;
  prop->sharedMemPerBlockOptin = 232448;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = static_cast<int>(ferry_cudasim::kMaxThreadsPerBlock);
  for (int i = 0; i < 3; ++i) {
    prop->maxThreadsDim[i] = static_cast<int>(ferry_cudasim::kMaxBlockDim[i]);
    prop->maxGridSize[i] = static_cast<int>(ferry_cudasim::kMaxGridDim[i]);
  }
  prop->multiProcessorCount = 132;
  prop->major = 9;
  prop->minor = 0;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can_access, int device, int peer_device) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *can_access = 0;
  if (device < 0 || device >= w.devices || peer_device < 0 || peer_device >= w.devices) {
    return fail(cudaErrorInvalidDevice);
  }
  *can_access = device != peer_device ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer_device, unsigned flags) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaDeviceEnablePeerAccess"); e != cudaSuccess) {
    return fail(e);
  }
  if (peer_device < 0 || peer_device >= w.devices || peer_device == current_device) {
    return fail(cudaErrorInvalidDevice);
  }
  if (flags != 0) return fail(cudaErrorInvalidValue);
  std::vector<bool>::reference on =
      w.peer[static_cast<std::size_t>(current_device * w.devices + peer_device)];
  if (on) return fail(cudaErrorPeerAccessAlreadyEnabled);
  on = true;
  w.generation.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer_device) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaDeviceDisablePeerAccess"); e != cudaSuccess) {
    return fail(e);
  }
  if (peer_device < 0 || peer_device >= w.devices || peer_device == current_device) {
    return fail(cudaErrorInvalidDevice);
  }
  std::vector<bool>::reference on =
      w.peer[static_cast<std::size_t>(current_device * w.devices + peer_device)];
  if (!on) return fail(cudaErrorPeerAccessNotEnabled);
  on = false;
  w.generation.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  World& w = world();
  std::lock_guard lock(w.mutex);
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  if (w.devices > 0) {
    const cudaError_t s = w.sticky[static_cast<std::size_t>(current_device)];
    if (s != cudaSuccess) return s;
  }
  return e;
}

cudaError_t cudaPeekAtLastError() { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading:
      return "cudaErrorCudartUnloading";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorPeerAccessNotEnabled:
      return "cudaErrorPeerAccessNotEnabled";
    case cudaErrorMisalignedAddress:
      return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorUnknown:
      return "cudaErrorUnknown";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInitializationError:
      return "initialization error";
    case cudaErrorCudartUnloading:
      return "driver shutting down";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInsufficientDriver:
      return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorPeerAccessAlreadyEnabled:
      return "peer access is already enabled";
    case cudaErrorPeerAccessNotEnabled:
      return "peer access has not been enabled";
    case cudaErrorMisalignedAddress:
      return "misaligned address";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorUnknown:
      return "unknown error";
  }
  return "unknown error";
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** function,
                                             unsigned /*cuda_version*/,
                                             unsigned long long /*flags*/,
                                             cudaDriverEntryPointQueryResult* status) {
  *function = nullptr;
  if (std::strcmp(symbol, "cuDevicePrimaryCtxGetState") == 0) {
    *function = reinterpret_cast<void*>(&sim_ctx_state);
    if (status != nullptr) *status = cudaDriverEntryPointSuccess;
    return cudaSuccess;
  }
  if (status != nullptr) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, std::size_t size) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *ptr = nullptr;
  if (const cudaError_t e = enter(w, "cudaMalloc"); e != cudaSuccess) return fail(e);
  if (size == 0) return cudaSuccess;
  std::size_t& used = w.used[static_cast<std::size_t>(current_device)];
  if (size > w.capacity - used) return fail(cudaErrorMemoryAllocation);
  void* p = new_block(w, size, Memory::device);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  used += size;
  ++w.counts.mallocs;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  World& w = world();
  std::unique_lock lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaFree"); e != cudaSuccess) return fail(e);
  if (ptr == nullptr) return cudaSuccess;
  auto it = w.blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == w.blocks.end() || it->second.kind != Memory::device) {
    return fail(cudaErrorInvalidValue);
  }
  const int device = it->second.device;
  drain_device(w, lock, device);  // cudaFree waits for the device
  it = w.blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == w.blocks.end()) return fail(cudaErrorInvalidValue);
  w.used[static_cast<std::size_t>(device)] -= it->second.bytes;
  ++w.counts.frees;
  std::free(it->second.base);
  w.blocks.erase(it);
  w.generation.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** ptr, std::size_t size, unsigned /*flags*/) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *ptr = nullptr;
  if (const cudaError_t e = enter(w, "cudaHostAlloc"); e != cudaSuccess) return fail(e);
  void* p = new_block(w, size == 0 ? 1 : size, Memory::pinned);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  ++w.counts.host_allocs;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, std::size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaFreeHost"); e != cudaSuccess) return fail(e);
  if (ptr == nullptr) return cudaSuccess;
  auto it = w.blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == w.blocks.end() || it->second.kind != Memory::pinned || it->second.registered) {
    return fail(cudaErrorInvalidValue);
  }
  ++w.counts.host_frees;
  // Freed at once, without waiting: work still queued that touches it faults, so that a
  // program that frees a staging buffer before the copy from it is done is caught.
  std::free(it->second.base);
  w.blocks.erase(it);
  w.generation.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, std::size_t size, unsigned /*flags*/) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaHostRegister"); e != cudaSuccess) return fail(e);
  if (ptr == nullptr || size == 0 || locate(w, ptr, size) != Where::pageable) {
    return fail(cudaErrorInvalidValue);
  }
  w.blocks[reinterpret_cast<std::uintptr_t>(ptr)] =
      Block{static_cast<std::byte*>(ptr), size, Memory::pinned, current_device, true};
  ++w.counts.host_registers;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaHostUnregister"); e != cudaSuccess) return fail(e);
  auto it = w.blocks.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (it == w.blocks.end() || !it->second.registered) return fail(cudaErrorInvalidValue);
  w.blocks.erase(it);
  w.generation.fetch_add(1, std::memory_order_release);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *attributes = cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, nullptr};
  if (const cudaError_t e = injected(w, "cudaPointerGetAttributes"); e != cudaSuccess) {
    return fail(e);
  }
  const Block* b = nullptr;
  switch (locate(w, ptr, 0, &b)) {
    case Where::device:
      *attributes =
          cudaPointerAttributes{cudaMemoryTypeDevice, b->device, const_cast<void*>(ptr), nullptr};
      break;
    case Where::pinned:
      *attributes = cudaPointerAttributes{cudaMemoryTypeHost, b->device, const_cast<void*>(ptr),
                                          const_cast<void*>(ptr)};
      break;
    case Where::pageable:
      break;
    case Where::bad:
      return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind) {
  return memcpy_on("cudaMemcpy", dst, src, count, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return memcpy_on("cudaMemcpyAsync", dst, src, count, kind, stream, false);
}

namespace {
// cudaMemcpyPeer*: `dst` must be memory of `dst_device` and `src` of `src_device`; the copy works
// without peer access (CUDA stages it).
cudaError_t memcpy_peer(const char* function, void* dst, int dst_device, const void* src,
                        int src_device, std::size_t count, cudaStream_t stream, bool blocking) {
  {
    World& w = world();
    std::lock_guard lock(w.mutex);
    if (count != 0) {
      const Block* d = nullptr;
      const Block* s = nullptr;
      if (locate(w, dst, count, &d) != Where::device ||
          locate(w, src, count, &s) != Where::device || d->device != dst_device ||
          s->device != src_device) {
        return fail(cudaErrorInvalidValue);
      }
    }
  }
  return memcpy_on(function, dst, src, count, cudaMemcpyDeviceToDevice, stream, blocking);
}

cudaError_t memset_on(const char* function, void* dst, int value, std::size_t count,
                      cudaStream_t stream, bool blocking) {
  World& w = world();
  std::unique_lock lock(w.mutex);
  if (const cudaError_t e = enter(w, function); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (count == 0) return cudaSuccess;
  const Where where = locate(w, dst, count);
  if (where != Where::device && where != Where::pinned) return fail(cudaErrorInvalidValue);
  const std::uint64_t seq = enqueue(
      w, s,
      Op{[dst, value, count] { std::memset(translate(dst, count, false, -1), value, count); }, {}});
  if (blocking) wait_for(w, lock, s, seq);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device,
                           std::size_t count) {
  return memcpy_peer("cudaMemcpyPeer", dst, dst_device, src, src_device, count, nullptr, true);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                std::size_t count, cudaStream_t stream) {
  return memcpy_peer("cudaMemcpyPeerAsync", dst, dst_device, src, src_device, count, stream, false);
}

cudaError_t cudaMemset(void* dst, int value, std::size_t count) {
  return memset_on("cudaMemset", dst, value, count, nullptr, true);
}

cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t count, cudaStream_t stream) {
  return memset_on("cudaMemsetAsync", dst, value, count, stream, false);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *stream = nullptr;
  if (const cudaError_t e = enter(w, "cudaStreamCreateWithFlags"); e != cudaSuccess) {
    return fail(e);
  }
  *stream = new_stream(w, current_device, false, (flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = injected(w, "cudaStreamDestroy"); e != cudaSuccess) return fail(e);
  if (stream == nullptr || !live_stream(w, stream)) return fail(cudaErrorInvalidResourceHandle);
  // Its queued work still runs; then its thread ends. The stream itself is never freed: events
  // recorded on it may still be asked about.
  stream->destroyed = true;
  w.streams.erase(std::find(w.streams.begin(), w.streams.end(), stream));
  w.changed.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaStreamQuery"); e != cudaSuccess) return fail(e);
  const CUstream_st* s = resolve(w, stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  return s->done >= s->queued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  World& w = world();
  std::unique_lock lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaStreamSynchronize"); e != cudaSuccess) return fail(e);
  const CUstream_st* s = resolve(w, stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  wait_for(w, lock, s, s->queued);
  return fail(w.sticky[static_cast<std::size_t>(s->device)]);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned /*flags*/) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaStreamWaitEvent"); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  if (s == nullptr || w.events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (event->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Op op;
  op.after.emplace_back(event->stream, event->seq);
  enqueue(w, s, std::move(op));
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaLaunchHostFunc"); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  if (s == nullptr) return fail(cudaErrorInvalidResourceHandle);
  ++w.counts.host_functions;
  enqueue(w, s, Op{[fn, user_data] { fn(user_data); }, {}});
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *event = nullptr;
  if (const cudaError_t e = enter(w, "cudaEventCreateWithFlags"); e != cudaSuccess) {
    return fail(e);
  }
  ++w.counts.events_made;
  if ((flags & cudaEventBlockingSync) == 0) ++w.counts.spinning_events;
  auto* e = new CUevent_st();
  e->device = current_device;
  e->flags = flags;
  w.events.insert(e);
  *event = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = injected(w, "cudaEventDestroy"); e != cudaSuccess) return fail(e);
  if (w.events.erase(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  // Not freed: a record queued on a stream may still write its time.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaEventRecord"); e != cudaSuccess) return fail(e);
  CUstream_st* s = resolve(w, stream);
  if (s == nullptr || w.events.count(event) == 0 || s->device != event->device) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  const std::uint64_t generation = ++event->generation;
  event->stream = s;
  event->seq = enqueue(w, s,
                       Op{[event, generation] {
                            World& world_ = world();
                            std::lock_guard inner(world_.mutex);
                            if (event->generation == generation) event->when = Clock::now();
                          },
                          {}});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaEventQuery"); e != cudaSuccess) return fail(e);
  if (w.events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (event->stream == nullptr) return cudaSuccess;
  return event->stream->done >= event->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  World& w = world();
  std::unique_lock lock(w.mutex);
  if (const cudaError_t e = enter(w, "cudaEventSynchronize"); e != cudaSuccess) return fail(e);
  if (w.events.count(event) == 0) return fail(cudaErrorInvalidResourceHandle);
  if (event->stream != nullptr) wait_for(w, lock, event->stream, event->seq);
  return fail(w.sticky[static_cast<std::size_t>(event->device)]);
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  World& w = world();
  std::lock_guard lock(w.mutex);
  *ms = 0;
  if (const cudaError_t e = enter(w, "cudaEventElapsedTime"); e != cudaSuccess) return fail(e);
  if (w.events.count(start) == 0 || w.events.count(end) == 0 ||
      ((start->flags | end->flags) & cudaEventDisableTiming) != 0 || start->stream == nullptr ||
      end->stream == nullptr || start->device != end->device) {
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (start->stream->done < start->seq || end->stream->done < end->seq) {
    return cudaErrorNotReady;
  }
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}

}  // extern "C"
