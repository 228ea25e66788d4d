#pragma once

// Worker processes for a Python dataset. Each process (started by ferry/_worker.py with
// multiprocessing's forkserver or spawn) holds the dataset, unpickled once, and a scratch region
// of shared memory (a memfd both sides map). One of ferry's worker threads at a time drives a
// process: it sends a task record (index, seed, the fields' byte counts and places) over the
// process's socket, the process seeds Python's generators, calls __getitem__ and writes each
// field's bytes straight into its sample's place in the staging slot (a SharedBuffer the loader
// made because PyDataset::shares_staging(); the process maps it), and answers. Where a field's
// place is not in such a slot it goes into the scratch region and the thread copies it. No Python
// runs in the training process per sample. A process that dies or overruns the timeout costs the
// sample it held (a DataError naming it, the exit code or the signal) and is replaced by a fresh
// one before the next task.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "binding.hpp"
#include "ferry/memory.hpp"

namespace ferry::python {

class PyDataset;

struct ProcessOptions {
  int count = 1;
  std::string start_method = "forkserver";
  py::object worker_init_fn;  // None or a callable(worker_id)
  double timeout = 0;         // seconds a sample may take; 0: no limit
  std::uint64_t seed = 0;     // the loader's: worker_info().seed derives from it
  bool seed_python = true;
  bool seed_always = false;  // seed_python="always": every generator before every sample
  /// What a worker's reader is told: 0 no seeding, 1 every generator before every sample, 2
  /// random's and numpy's only once a sample has drawn from them (SeedWatch; not with a timeout,
  /// which a sample read twice could overrun).
  int seed_mode() const noexcept {
    if (!seed_python) return 0;
    return seed_always || timeout > 0 ? 1 : 2;
  }
  friend bool operator==(const ProcessOptions& a, const ProcessOptions& b) {
    return a.count == b.count && a.start_method == b.start_method &&
           a.worker_init_fn.ptr() == b.worker_init_fn.ptr() && a.timeout == b.timeout &&
           a.seed == b.seed && a.seed_python == b.seed_python && a.seed_always == b.seed_always;
  }
};

/// A task's state word in its process's scratch region, which the training process and the
/// worker process both map. The training process writes it pending before it sends the task; the
/// worker process claims it (pending to writing) after __getitem__ and before it writes the
/// sample's first byte, then marks it done or failed. A read given up (its epoch left, its thread
/// gone on one by one) is cancelled while still pending, and then never written; one already
/// being written is waited out. So a sample that goes straight into a staging slot is never
/// written there after the slot has been given to another batch. A word written for a later
/// task makes an older task's claim fail the same way.
class TaskState {
 public:
  enum class Code : std::uint8_t {
    pending = 0,
    writing = 1,
    done = 2,
    failed = 3,
    cancelled = 4,
    reading = 5
  };

  TaskState(std::byte* word, std::uint64_t token) noexcept
      : word_(*reinterpret_cast<std::uint64_t*>(word)), token_(token) {}
  /// The training process: the task is about to go.
  void open() noexcept { word_.store(value(Code::pending)); }
  /// The worker process, before it reads the sample: true when the task was still pending (now
  /// reading). A process that ends with a task of its pending never began it.
  bool begin() noexcept {
    std::uint64_t expected = value(Code::pending);
    return word_.compare_exchange_strong(expected, value(Code::reading));
  }
  /// The worker process: true when the task was still pending or reading (now writing).
  bool claim() noexcept {
    std::uint64_t expected = value(Code::reading);
    if (word_.compare_exchange_strong(expected, value(Code::writing))) return true;
    expected = value(Code::pending);
    return word_.compare_exchange_strong(expected, value(Code::writing));
  }
  /// The worker process: the sample was written (or failed half-way).
  void finish(bool ok) noexcept { word_.store(value(ok ? Code::done : Code::failed)); }
  /// The training process: pending or reading becomes cancelled. Returns the task's code before
  /// (pending or reading: cancelled now); a word of another task reads as cancelled.
  Code cancel() noexcept {
    for (const Code from : {Code::pending, Code::reading}) {
      std::uint64_t seen = value(from);
      if (word_.compare_exchange_strong(seen, value(Code::cancelled))) return from;
      if (code_of(seen) != Code::pending && code_of(seen) != Code::reading) return code_of(seen);
    }
    return code();
  }
  Code code() const noexcept { return code_of(word_.load()); }

 private:
  std::uint64_t value(Code c) const noexcept { return token_ * 8 + static_cast<std::uint64_t>(c); }
  Code code_of(std::uint64_t v) const noexcept {
    return v / 8 == token_ && v % 8 <= 5 ? static_cast<Code>(v % 8) : Code::cancelled;
  }
  std::atomic_ref<std::uint64_t> word_;
  std::uint64_t token_;
};

/// A read whose process ended before it began the sample (its task still pending): the sample is
/// not to blame, and is read again by another process.
class Unstarted : public Error {
 public:
  using Error::Error;
};

/// Where a task's state word (TaskState) lies in its process's memfd, and its token (0: none).
struct DoneMark {
  std::size_t at = 0;
  std::uint64_t token = 0;
};

class ProcessPool {
 public:
  /// Starts options.count processes for `dataset` (GIL held). \throws ConfigError when the
  /// dataset cannot be pickled or the start method cannot be used here.
  ProcessPool(const PyDataset& dataset, ProcessOptions options);
  ProcessPool(const ProcessPool&) = delete;
  ProcessPool& operator=(const ProcessPool&) = delete;
  /// Stops the processes (GIL held, or the interpreter gone).
  ~ProcessPool();

  /// Sample `index` read by a worker process into `out`. Called on ferry's worker threads
  /// without the GIL (taken only to replace a process). \throws DataError for a failed sample.
  void read(const PyDataset& dataset, std::size_t index, SampleRef out);
  /// read() by one process, its task alone. \throws Unstarted where it ended before it began.
  void read_one(const PyDataset& dataset, std::size_t index, SampleRef out);
  /// This thread's next reads (Dataset::begin_reads): one process takes them, their tasks sent
  /// ahead (a few at a time), so that it goes from one to the next without waiting for this
  /// thread. end_reads() lets it go, its answers still to come discarded. No GIL needed.
  void begin_reads(std::span<const std::size_t> indices, std::span<const SampleRef> out) noexcept;
  void end_reads() noexcept;
  /// The samples of a share that take a process about kShareSeconds, from the time the shares
  /// read so far took a sample (at least 2, which go ahead of each other; 0 before the first
  /// share): a process waits for the next share between two, and a share is the most one
  /// process reads of the last batch of an epoch while another waits for the next epoch. No GIL
  /// needed.
  std::size_t read_share() const noexcept;
  /// Ends every process and wakes reads waiting for one; they throw. GIL held.
  void stop();
  /// Reads waiting for an answer give up (within a slice), and reads give up at once until
  /// resume(): each process's answer is discarded when it comes, before its next task. For an
  /// epoch left early, so that its teardown waits for no __getitem__. No GIL needed.
  void abandon() noexcept { abandoned_.store(true); }
  /// Reads go to the processes again (an epoch starts). No GIL needed.
  void resume() noexcept {
    abandoned_.store(false);
    const std::lock_guard<std::mutex> lock(mutex_);
    init_overran_.clear();
    init_overruns_ = 0;
  }

  const ProcessOptions& options() const noexcept { return options_; }
  /// A staging slot's batch was let go (Dataset::staging_released): the next process a thread
  /// sends tasks to, among those that map the slot, gives its memory pages back (MADV_REMOVE)
  /// before its next task, so that an idle slot holds no memory. No GIL needed.
  void released(std::span<std::byte> slot) noexcept;
  /// Before the slot is written again (Dataset::staging_reused): its give-back is called off
  /// while not begun, or waited out (until done, or its process ended). No GIL needed.
  void reused(std::span<std::byte> slot) noexcept;

  /// Processes started so far, replacements included.
  std::uint64_t started() const;
  /// The most bytes the processes' shared memory grows to, given a sample's bytes: each one's
  /// window of tasks (kWindowBytes, or kWindowMin samples where those are more).
  std::uint64_t memory_bound(std::uint64_t sample_bytes) const noexcept;

 private:
  struct Child {
    int id = 0;
    py::object process;  // multiprocessing's Process
    long pid = 0;
    int fd = -1;     // this side of its socket (a multiprocessing Connection's framing)
    int memfd = -1;  // its scratch region
    std::byte* map = nullptr;
    std::size_t map_size = 0;
    bool busy = false;
    bool dead = false;                   // to be replaced before its next task
    bool failed_start = false;           // its start failed (worker_init_fn): replaced when let go
    int stale = 0;                       // answers still to come for abandoned reads: discarded
    bool ready = false;                  // it said it has started
    std::vector<std::byte> in;           // what came on its socket and is not yet taken
    std::size_t in_at = 0;               // the next message's start in `in`
    std::size_t in_end = 0;              // the end of what came
    std::vector<std::byte> taken;        // the message receive() took last
    std::uint64_t tokens = 1;            // the next task's token (its TaskState's)
    std::vector<std::uint64_t> regions;  // the staging regions (SharedBuffer ids) it has mapped
    std::uint64_t freed_seen = 0;        // shared_regions_freed() when they were last looked at
  };

  /// A give-back of a staging region's pages: waiting for a process that maps the region, or
  /// sent to one (`pid`), its state word (TaskState) at `word` in the control region.
  struct Discard {
    std::uint64_t region = 0;
    bool sent = false;
    long pid = 0;
    std::size_t word = 0;
    std::uint64_t token = 0;
  };
  /// Queues a give-back of `region`'s pages; true when one waits unsent.
  bool queue_discard(std::uint64_t region) noexcept;
  /// Sends the give-backs of `region` waiting to an idle process that maps it, if one is idle.
  void send_to_idle(std::uint64_t region) noexcept;
  /// Appends to `out` the give-backs waiting for a process that c maps the region of (c is this
  /// thread's).
  void send_discards(Child& c, std::vector<std::byte>& out) noexcept;
  /// Calls off a sent give-back, or waits until its process has done it or ended. True when it
  /// is settled (its word free again); with `wait` false, false while it is being done.
  bool settle(const Discard& d, bool wait) noexcept;
  /// d's state word is free again (mutex_ held).
  void free_word(const Discard& d) noexcept {
    words_used_ &= ~(std::uint64_t{1} << (d.word / sizeof(std::uint64_t)));
  }

  void start(Child& c);  // GIL held
  void retire(Child& c) noexcept;
  Child& acquire();
  void release(Child& c);
  /// Reads the answers of c's abandoned reads that have come (all of them: wait), true when none
  /// is left. c is busy (this thread's).
  bool drain(Child& c, bool wait);
  bool stopping();
  /// Whether c's socket says that its process ended (its other end closed). No wait.
  static bool ended(const Child& c) noexcept;
  /// c's next message (an answer, or the word that it has started), waiting in slices for it,
  /// an abandon, a stop, or the timeout (for an answer, or for a worker_init_fn: the process
  /// says when it begins one); valid until c's next receive(). \throws
  /// what lost() throws when c ended. `also_stale`: answers of later tasks in flight, discarded
  /// too when this read gives up.
  /// `done`: where the awaited sample's token lands in c's memfd, and its value (0: none).
  const std::vector<std::byte>& receive(Child& c, std::size_t index, bool answer, int also_stale,
                                        DoneMark done = {});
  /// Reads what has come on c's socket (one read; poll first). False when c ended.
  static bool take_in(Child& c);
  /// c's next whole message from what has come into c.taken: false when none has whole.
  static bool next_message(Child& c);
  /// The answer's fields into `out`: from c's memfd at `base` (each field at a 64-byte aligned
  /// offset from it), nothing where the process wrote them into the slot itself (`direct`); or
  /// its failure thrown.
  void deliver(const PyDataset& dataset, Child& c, std::size_t index,
               const std::vector<std::byte>& answer, std::size_t base, bool direct, SampleRef out);
  /// c maps staging region `region` (sent now with its memfd if it did not), and lets go of the
  /// regions freed since it last looked. False when c's socket is gone.
  bool map_region(Child& c, const SharedRegion& region);
  /// Cancels c's task at `at` (TaskState) unless its process is writing it, and then waits until
  /// it has written it or ended.
  static void cancel(Child& c, std::size_t at, std::uint64_t token) noexcept;
  /// Cancels the tasks c holds for this thread that are not answered: `awaited`, or this thread's
  /// read-ahead share's, from `awaited` on.
  void cancel_in_flight(Child& c, DoneMark awaited) noexcept;
  /// read() of the next sample of this thread's begin_reads() share: true when it was.
  bool read_ahead(const PyDataset& dataset, std::size_t index, SampleRef out);
  /// Sends the share's next tasks, several in one write, when half of the window is free.
  void send_next(Child& c) noexcept;
  void grow(Child& c, std::size_t bytes);
  /// Why c's process ended (its exit code or signal), after it did; one whose socket closed but
  /// that runs on is killed. Takes the GIL.
  std::string ending(Child& c);
  /// c's process is gone (or killed): c retired and released, and a DataError thrown naming
  /// sample `index`, which it was reading (`reading`) or was about to.
  [[noreturn]] void lost(Child& c, std::size_t index, const std::string& why, bool reading = true);

  ProcessOptions options_;
  std::uint64_t id_;  // this pool among all (a thread's read-ahead names it)
  std::size_t field_count_;
  py::object start_;    // ferry._worker.start
  py::object source_;   // the dataset (the PyDataset's)
  py::object pickled_;  // ferry._worker.Packed: its pickle and shared arrays, None when dropped
  bool constructed_ = false;
  py::tuple layout_;  // SampleLayout::describe()
  std::vector<Child> children_;
  mutable std::mutex mutex_;
  std::condition_variable idle_;
  bool stopping_ = false;
  int wake_fd_ = -1;  // an eventfd that wakes reads when the pool stops
  std::uint64_t started_ = 0;
  std::atomic<bool> abandoned_{false};
  std::atomic<std::uint64_t> sample_ns_{0};  // a read's time in a share, averaged over shares
  // Why no process is started until the next epoch (resume()): a worker_init_fn overran the
  // timeout twice in this epoch (once costs its sample alone: the process is started again).
  // Under mutex_.
  std::string init_overran_;
  int init_overruns_ = 0;
  // The give-backs of slots' pages (released(), reused()); their state words lie in a memfd of
  // the pool's (`control_`), which every process maps.
  std::vector<Discard> discards_;  // under mutex_
  std::atomic<int> unsent_{0};     // of discards_
  std::uint64_t words_used_ = 0;   // a bit per word of control_, under mutex_
  std::uint64_t discard_token_ = 1;
  int control_fd_ = -1;
  std::byte* control_ = nullptr;
};

}  // namespace ferry::python
