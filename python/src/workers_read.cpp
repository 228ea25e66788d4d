// Worker processes for a Python dataset, the parent's side: the read path. A sample read by one
// process (read()), or a thread's share of a batch read through one process, its tasks sent
// ahead in a window (begin_reads(), read_ahead(), send_next()), written into its memfd or straight
// into the staging slot; reads given up cancel their tasks.

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "py_dataset.hpp"
#include "workers.hpp"
#include "workers_internal.hpp"

namespace ferry::python {

namespace {

/// A share of a batch this thread reads through one process, its tasks sent ahead
/// (ProcessPool::begin_reads): the tasks (index, seed, each field's bytes and place), which have
/// been sent and read, and where each lands. Kept by the thread (cleared, not freed) from one
/// share to the next, so that a share costs no allocation.
struct Range {
  std::uint64_t pool = 0;  // the pool's id_; 0: none
  void* child = nullptr;   // its Child
  std::size_t fields = 0;
  std::vector<std::size_t> indices;
  std::vector<std::uint64_t> seeds;
  std::vector<std::size_t> nbytes;   // `fields` a task
  std::vector<std::size_t> offsets;  // `fields` a task: their places in `region` (direct)
  std::uint64_t region = 0;          // the staging region the process writes into; 0: its memfd
  std::uintptr_t region_base = 0;    // its first byte here
  std::size_t next_read = 0;
  std::size_t next_send = 0;
  std::size_t window = 0;      // tasks in flight at most, each with its own part of the memfd
  std::size_t slot_bytes = 0;  // the size of such a part: its state word's line, then the fields
  std::size_t group = 1;       // the process answers this many samples together
  std::uint64_t token = 0;     // task n's token is token + n
  std::chrono::steady_clock::time_point begun;  // when its first task went

  std::span<const std::size_t> bytes_of(std::size_t t) const {
    return {nbytes.data() + t * fields, fields};
  }
  /// Where task t's state word lies in the memfd (its fields follow it, when they go there).
  std::size_t state_at(std::size_t t) const noexcept { return (t % window) * slot_bytes; }
  void clear() noexcept {
    pool = 0;
    child = nullptr;
    indices.clear();
    seeds.clear();
    nbytes.clear();
    offsets.clear();
    region = 0;
    region_base = 0;
    next_read = next_send = window = slot_bytes = 0;
    group = 1;
  }
};
thread_local Range t_range;
thread_local std::vector<std::byte> t_out;        // tasks on their way, several in one write
thread_local std::vector<std::size_t> t_nbytes;   // a read one by one: its fields' bytes
thread_local std::vector<std::size_t> t_offsets;  // a task's fields' places
// Tasks in flight per process: as many as fit in kWindowBytes, within [kWindowMin, kWindowMax].
// 4 MiB: 27 tasks of a 224 x 224 RGB image, answered 13 at a time (with 1 MiB: 6, 3 at a time,
// and the training process woke for every third sample). Samples written straight into a staging
// slot take only their state word's line of the memfd: up to kWindowDirect tasks then.
constexpr std::size_t kWindowMin = 4;
constexpr std::size_t kWindowMax = 32;
constexpr std::size_t kWindowDirect = 256;
constexpr std::size_t kWindowBytes = 4U << 20U;
// A share's time in a process (ProcessPool::read_share): 4 ms. The hand-over between two shares
// (the answer read, the next share taken and sent) is some 30 us of the process's time.
constexpr std::uint64_t kShareNs = 4'000'000;

// The fewest tasks in flight for samples of `part` bytes: kWindowMin, or 2 (one being written,
// one read) for samples larger than kWindowBytes, whose scratch kWindowMin of would hold
// (and count in the memory budget) gigabytes for a few hundred MB samples.
constexpr std::size_t window_min(std::uint64_t part) noexcept {
  return part > kWindowBytes ? 2 : kWindowMin;
}

std::size_t total_of(std::span<const std::size_t> nbytes) {
  std::size_t total = 0;
  for (const std::size_t n : nbytes) total += aligned(n);
  return total;
}

/// The places of a task's fields in its memfd: from `base`, each at a 64-byte aligned offset.
std::span<const std::size_t> scratch_places(std::size_t base, std::span<const std::size_t> nbytes) {
  t_offsets.clear();
  for (const std::size_t n : nbytes) {
    t_offsets.push_back(base);
    base += aligned(n);
  }
  return t_offsets;
}

/// The places of `out`'s fields in one staging region, appended to `offsets`, or false where one
/// is not in it. `region` and `base` (its first byte) are looked up at the first place
/// (shared_region(), under a lock) and kept for the next samples of a share, which lie in the
/// same slot.
bool direct_places(SampleRef out, std::size_t fields, SharedRegion& region, std::uintptr_t& base,
                   std::vector<std::size_t>& offsets) {
  for (std::size_t f = 0; f < fields; ++f) {
    const std::size_t n = out.nbytes(f);
    if (n == 0) {
      offsets.push_back(0);
      continue;
    }
    const auto p = reinterpret_cast<std::uintptr_t>(out.data(f));
    if (region.id == 0) {
      if (!shared_region(out.data(f), n, region)) return false;
      base = p - region.offset;
    }
    if (p < base || p - base > region.size || n > region.size - (p - base)) return false;
    offsets.push_back(p - base);
  }
  return region.id != 0;
}

}  // namespace

std::uint64_t ProcessPool::memory_bound(std::uint64_t sample_bytes) const noexcept {
  // A task's part: its state word's line, then each field from a line of its own.
  const std::uint64_t part = kAlign * (1 + field_count_) + sample_bytes;
  // A window of tasks fills at most kWindowBytes, or window_min() parts where those are more; a
  // read one by one grows the region to under two parts.
  const std::uint64_t each =
      std::max<std::uint64_t>({kMinScratch, kWindowBytes, window_min(part) * part});
  return each * static_cast<std::uint64_t>(options_.count);
}

void ProcessPool::cancel(Child& c, std::size_t at, std::uint64_t token) noexcept {
  if (c.map == nullptr || at + sizeof(std::uint64_t) > c.map_size) return;
  TaskState state(c.map + at, token);
  // Being written: that takes the time of copying a sample, unless the process ends first.
  while (state.cancel() == TaskState::Code::writing) {
    pollfd fd{c.fd, 0, 0};
    if (::poll(&fd, 1, 1) > 0 && (fd.revents & (POLLHUP | POLLERR | POLLNVAL)) != 0) return;
  }
}

void ProcessPool::cancel_in_flight(Child& c, DoneMark awaited) noexcept {
  const Range& r = t_range;
  if (r.pool == id_ && r.child == &c) {
    for (std::size_t n = r.next_read; n < r.next_send; ++n) cancel(c, r.state_at(n), r.token + n);
    return;
  }
  if (awaited.token != 0) cancel(c, awaited.at, awaited.token);
}

void ProcessPool::begin_reads(std::span<const std::size_t> indices,
                              std::span<const SampleRef> out) noexcept {
  end_reads();
  if (indices.size() < 2 || abandoned_.load()) return;
  Child* c = nullptr;
  try {
    c = &acquire();
  } catch (...) {
    return;  // stopping, or no process could start: the reads go one by one, and say why
  }
  bool held = true;  // receive() lets c go when it throws
  Range& r = t_range;
  try {
    if (!c->ready) {
      held = false;
      static_cast<void>(receive(*c, indices[0], /*answer=*/false, 0));
      held = true;
      c->ready = true;
    }
    r.fields = field_count_;
    r.indices.assign(indices.begin(), indices.end());
    r.seeds.resize(indices.size());
    r.nbytes.resize(indices.size() * field_count_);
    // Straight into the slot where every sample's fields lie in one staging region.
    SharedRegion region;
    bool direct = true;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      r.seeds[i] = out[i].seed();
      for (std::size_t f = 0; f < field_count_; ++f) {
        r.nbytes[i * field_count_ + f] = out[i].nbytes(f);
      }
      direct = direct && direct_places(out[i], field_count_, region, r.region_base, r.offsets);
      r.slot_bytes = std::max(r.slot_bytes, kAlign + total_of(r.bytes_of(i)));
    }
    if (direct && map_region(*c, region)) {
      r.region = region.id;
      r.slot_bytes = kAlign;
    } else {
      r.offsets.clear();
    }
    r.window =
        std::min(indices.size(),
                 std::clamp(kWindowBytes / std::max<std::size_t>(r.slot_bytes, 1),
                            window_min(r.slot_bytes), r.region != 0 ? kWindowDirect : kWindowMax));
    // Answers in groups of half the window (the tasks that then go fill the half their samples
    // freed): one write, and here one read, for a group. A share that fits in the window is
    // sent whole and answered whole: nothing waits on its first half, and the thread that
    // reads it wakes once. One by one where a timeout is set: a sample's timeout counts its own
    // time only.
    r.group = options_.timeout > 0         ? 1
              : r.window >= indices.size() ? r.window
                                           : std::max<std::size_t>(1, r.window / 2);
    if (r.window * r.slot_bytes > c->map_size) grow(*c, r.window * r.slot_bytes);
    r.token = c->tokens;
    c->tokens += indices.size();
    r.pool = id_;
    r.child = c;
    r.begun = std::chrono::steady_clock::now();
  } catch (...) {
    if (held) release(*c);
    r.clear();
    return;
  }
  send_next(*c);
}

std::size_t ProcessPool::read_share() const noexcept {
  const std::uint64_t each = sample_ns_.load(std::memory_order_relaxed);
  if (each == 0) return 0;
  constexpr std::uint64_t kMost = 1U << 16U;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(kShareNs / each, 2, kMost));
}

void ProcessPool::end_reads() noexcept {
  Range& r = t_range;
  if (r.pool != id_) return;
  if (r.next_read == r.indices.size() && r.next_read > 0) {  // a whole share: its time a sample
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now() - r.begun)
                        .count();
    const std::uint64_t each =
        std::max<std::uint64_t>(static_cast<std::uint64_t>(ns) / r.next_read, 1);
    const std::uint64_t before = sample_ns_.load(std::memory_order_relaxed);
    // A running average (a quarter of the new share's), a race between two threads' updates
    // losing one of them.
    sample_ns_.store(before == 0 ? each : before - before / 4 + each / 4,
                     std::memory_order_relaxed);
  }
  if (r.child != nullptr) {
    auto& c = *static_cast<Child*>(r.child);
    cancel_in_flight(c, {});  // their samples are read again elsewhere, or not at all
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      c.stale += static_cast<int>(r.next_send - r.next_read);  // answered, then discarded
      c.busy = false;
    }
    idle_.notify_all();
  }
  r.clear();
}

bool ProcessPool::read_ahead(const PyDataset& dataset, std::size_t index, SampleRef out) {
  Range& r = t_range;
  if (r.pool != id_) return false;
  const std::size_t at = r.next_read;
  bool announced = at < r.indices.size() && r.indices[at] == index && r.seeds[at] == out.seed();
  for (std::size_t f = 0; announced && f < field_count_; ++f) {
    announced = r.nbytes[at * field_count_ + f] == out.nbytes(f);
  }
  for (std::size_t f = 0; announced && r.region != 0 && f < field_count_; ++f) {
    // and the places announced
    announced = out.nbytes(f) == 0 || reinterpret_cast<std::uintptr_t>(out.data(f)) ==
                                          r.region_base + r.offsets[at * field_count_ + f];
  }
  if (!announced) {
    end_reads();  // not the order announced: one by one from here
    return false;
  }
  if (at >= r.next_send) {  // a task that could not be sent: one by one from here
    end_reads();
    return false;
  }
  auto& c = *static_cast<Child*>(r.child);
  const std::size_t state_at = r.state_at(at);
  const bool direct = r.region != 0;
  const std::vector<std::byte>* answer = nullptr;
  try {
    answer = &receive(c, index, /*answer=*/true, static_cast<int>(r.next_send - at - 1),
                      {state_at, r.token + at});
  } catch (const Unstarted&) {
    r.clear();  // it ended before this sample: read by another process, one by one
    return false;
  } catch (...) {
    // It ended (died, or overran the timeout: lost() retired and released it), or the read was
    // abandoned or the pool stops (its tasks cancelled, c released, its answers counted stale).
    // The tasks queued behind this one had not started: their reads go one by one, to another
    // process.
    r.clear();
    throw;
  }
  ++r.next_read;
  const bool last = r.next_read == r.indices.size();
  try {
    deliver(dataset, c, index, *answer, state_at + kAlign, direct, out);
  } catch (...) {
    send_next(c);
    if (last) end_reads();
    throw;
  }
  send_next(c);
  if (last) end_reads();
  return true;
}

void ProcessPool::send_next(Child& c) noexcept {
  Range& r = t_range;
  // Tasks go when half the window is free, together: one write (and, on the other side, one
  // read) for several samples.
  if (r.next_send >= r.indices.size() || r.next_send - r.next_read > r.window / 2) return;
  t_out.clear();
  send_discards(c, t_out);  // before the tasks: the process gives the pages back first
  std::size_t n = r.next_send;
  try {
    for (; n < r.indices.size() && n - r.next_read < r.window; ++n) {
      const std::size_t state_at = r.state_at(n);
      const std::span<const std::size_t> places =
          r.region != 0 ? std::span<const std::size_t>(r.offsets.data() + n * r.fields, r.fields)
                        : scratch_places(state_at + kAlign, r.bytes_of(n));
      TaskState(c.map + state_at, r.token + n).open();
      append_task(t_out, r.indices[n], r.seeds[n], c.map_size, state_at, r.group, r.token + n,
                  r.region, r.bytes_of(n), places);
    }
  } catch (...) {  // no memory for the message: the reads go one by one from here
    return;
  }
  if (send_all(c.fd, t_out.data(), t_out.size())) r.next_send = n;
}

void ProcessPool::read(const PyDataset& dataset, std::size_t index, SampleRef out) {
  if (abandoned_.load()) {
    end_reads();
    throw Error("Python dataset: the read of sample " + std::to_string(index) +
                " was abandoned (its epoch was left)");
  }
  if (read_ahead(dataset, index, out)) return;
  // A process that ends before it begins the sample (killed while idle, or by the sample before
  // it) is not the sample's fault: another reads it. Three such ends in a row fail it.
  for (int tries = 1;; ++tries) {
    try {
      read_one(dataset, index, out);
      return;
    } catch (const Unstarted& e) {
      if (tries == 3) throw DataError(e.what());
    }
  }
}

void ProcessPool::read_one(const PyDataset& dataset, std::size_t index, SampleRef out) {
  const std::size_t fields = dataset.layout().fields().size();
  Child& c = acquire();
  std::vector<std::size_t>& nbytes = t_nbytes;
  nbytes.clear();
  for (std::size_t f = 0; f < fields; ++f) nbytes.push_back(out.nbytes(f));
  const std::size_t total = kAlign + total_of(nbytes);
  SharedRegion region;
  bool direct = false;
  try {
    t_offsets.clear();
    std::uintptr_t base = 0;
    direct = direct_places(out, fields, region, base, t_offsets) && map_region(c, region);
    if (!direct && total > c.map_size) grow(c, std::max(total, 2 * c.map_size));
  } catch (...) {
    release(c);
    throw;
  }
  if (!c.ready) {
    // Its first task waits until it has started: the imports and unpickling without a limit
    // (they take what they take on a busy machine), its worker_init_fn within the timeout.
    static_cast<void>(receive(c, index, /*answer=*/false, 0));
    c.ready = true;
  }
  const std::uint64_t token = c.tokens++;
  TaskState(c.map, token).open();
  t_out.clear();
  send_discards(c, t_out);
  append_task(t_out, index, out.seed(), c.map_size, 0, /*group=*/1, token, direct ? region.id : 0,
              nbytes,
              direct ? std::span<const std::size_t>(t_offsets) : scratch_places(kAlign, nbytes));
  if (!send_all(c.fd, t_out.data(), t_out.size())) lost(c, index, ending(c));
  const std::vector<std::byte>& answer = receive(c, index, /*answer=*/true, 0, {0, token});
  try {
    deliver(dataset, c, index, answer, kAlign, direct, out);  // from c's memfd: c held
  } catch (...) {
    release(c);
    throw;
  }
  release(c);
}

}  // namespace ferry::python
