#pragma once

// Datasets written in Python: any object with __len__ and __getitem__(i). How a sample becomes
// fields (SampleLayout), the generators seeded before each __getitem__ (PythonSeeder), and the
// dataset the loader reads (PyDataset): on ferry's worker threads under the GIL, or, with
// processes, in worker processes (workers.hpp) that write each sample into shared memory.

#include <pybind11/numpy.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "binding.hpp"

namespace ferry::python {

class ProcessPool;
struct ProcessOptions;

/// The GIL, taken on one of ferry's worker threads for a read. A thread's first read makes its
/// Python thread state and keeps it (one count of PyGILState_Ensure never released), so that
/// later reads only take and give back the GIL: making and clearing a thread state for each
/// sample, as a plain PyGILState_Ensure/Release pair does on a thread Python did not start, cost
/// more than the read itself (about 100 us a sample for a trivial dataset).
///
/// A PythonRegion while it lives (the Python it runs may release the GIL and take it back).
/// \throws Error when the interpreter is exiting (no region can be entered).
class ReaderGil {
 public:
  ReaderGil();
  ~ReaderGil();
  ReaderGil(const ReaderGil&) = delete;
  ReaderGil& operator=(const ReaderGil&) = delete;

 private:
  PythonRegion region_;
  PyGILState_STATE state_{};
};

/// numpy's dtype for a ferry dtype. \throws TypeError for bf16 (numpy has none).
py::dtype numpy_dtype(DType dtype);

/// How a Python dataset's samples become fields. Declared by the dataset (a `fields` attribute:
/// (name, dtype, shape) with None for a ragged first dimension, and length(index, field) for
/// those; its samples then are dicts by those names or tuples in that order, and sample 0 is not
/// read here), or taken from sample 0: one field per key of a dict, or per item of a tuple or
/// list (named "0", "1", ...), or one field "0" for a sample that is one array, tensor or number
/// (form "single"), with numpy's dtype and shape for the value. write() converts each value to
/// its field's dtype where no value changes and checks its shape. Needs the GIL throughout.
class SampleLayout {
 public:
  /// What a sample is: a dict, a tuple or list, one array, or either of the first two by a
  /// `fields` declaration.
  enum class Form : std::uint8_t { dict, tuple, single, declared };

  /// The layout of `source`: its declaration (`first` not used), else the sample `first(i)`
  /// gives, i its index (sample 0, unless that one failed).
  SampleLayout(const py::object& source, const std::function<py::object(std::size_t&)>& first);
  /// A layout rebuilt from describe() (in a worker process).
  explicit SampleLayout(const py::handle& description);
  SampleLayout(const SampleLayout&) = delete;
  SampleLayout& operator=(const SampleLayout&) = delete;
  ~SampleLayout();

  const std::vector<FieldSpec>& fields() const noexcept { return fields_; }
  Form form() const noexcept { return form_; }
  /// The fields were declared (`fields`), not taken from sample 0.
  bool declared() const noexcept { return form_ == Form::declared; }
  /// Whether `source` declares its fields (then sample 0 need not be read to know them).
  static bool declares(const py::object& source);
  /// (fields as (name, dtype, shape) tuples, form): what a worker process rebuilds it from.
  py::tuple describe() const;

  /// Writes `sample` (what __getitem__(index) gave) into dest[f], exactly nbytes[f] bytes per
  /// field (a ragged field's rows are nbytes[f] / its row's bytes). \throws DataError naming the
  /// sample and the field (a sample of another form, a field lacking, a value that does not fit),
  /// or the Python exception a value's __array__ raised.
  void write(const py::handle& sample, std::size_t index, std::span<std::byte* const> dest,
             std::span<const std::size_t> nbytes) const;
  /// write() in two steps: first each field as a C-contiguous array of its dtype and shape,
  /// exactly nbytes[f] bytes (every conversion done, Python code such as a value's __array__
  /// run, every check passed: what write() throws, this throws), then only their bytes copied.
  std::vector<py::array> arrays(const py::handle& sample, std::size_t index,
                                std::span<const std::size_t> nbytes) const;
  static void copy(const std::vector<py::array>& arrays, std::span<std::byte* const> dest,
                   std::span<const std::size_t> nbytes) noexcept;

  /// Lets go of Python objects without touching Python (the interpreter is going).
  void abandon() noexcept;

 private:
  void bind_numpy();  // the numpy functions write() calls
  std::string first_name() const { return "sample " + std::to_string(first_); }
  void add_field(FieldSpec f, py::object key);
  py::object value_of(const py::handle& sample, std::size_t f, std::size_t index) const;
  py::array converted(const py::handle& value, std::size_t f, std::size_t index) const;
  /// `value` as a numpy array; a bf16 torch tensor (numpy has no bfloat16) as its bits, i16,
  /// with `bf16` set.
  py::array as_array(const py::handle& value, bool& bf16) const;

  std::vector<FieldSpec> fields_;
  std::vector<py::dtype> dtypes_;
  std::vector<bool> float_fields_;
  std::vector<py::object> keys_;
  Form form_ = Form::dict;
  std::size_t first_ = 0;   // the sample the fields were taken from (declared: none, 0)
  py::object asarray_;      // np.asarray (0-d for a scalar)
  py::object contiguous_;   // np.ascontiguousarray, for a strided array
  py::object array_equal_;  // np.array_equal and np.isinf: a conversion's check
  py::object isinf_;
  py::object errstate_;        // np.errstate: a conversion's overflow warnings are not shown
  py::object can_cast_;        // np.can_cast: a conversion known safe is not compared
  py::object catch_warnings_;  // warnings.catch_warnings, and simplefilter: numpy's warnings of a
  py::object simplefilter_;    // conversion compared (ComplexWarning) print nothing
};

/// Where numpy's legacy global generator keeps its state: its MT19937's words and position, and
/// its RandomState's cached second Gaussian (an int flag, a double).
struct NumpyState {
  std::uint32_t* words = nullptr;  // null: not found (set through np.random.set_state)
  int* pos = nullptr;
  int* has_gauss = nullptr;
  double* gauss = nullptr;
};

/// The words of an MT19937's state (CPython's `random`, numpy's legacy generator).
inline constexpr std::size_t kMtWords = 624;

/// Where CPython's `random` generator keeps its state: its position, then its 624 words.
struct RandomPlace {
  int* index = nullptr;
  std::uint32_t* words = nullptr;  // null: not found (set through random.setstate)
};

/// Where `random` generator `inst` keeps its state (its C struct: the object's head, an int
/// position, then the words). Empty where `inst` is not a _random.Random or its struct too
/// small. Not checked: PythonSeeder and SeedWatch check it on generators of their own.
RandomPlace random_place(const py::handle& inst);

/// Seeds Python's `random`, numpy's legacy global generator and torch's CPU generator (where
/// torch is imported) from a sample's seed, before its __getitem__. Needs the GIL.
///
/// `random` and numpy's generator (both MT19937) get a state of their own for each seed, not
/// their seed()'s: 624 words drawn from a splitmix64 sequence started at the generator's seed,
/// the position at 0 (as random.setstate((3, words + (0,), None)) and
/// np.random.set_state(("MT19937", words, 0)) set them). seed()'s initialization is a chain of
/// 624 dependent multiplications (random's also of the seed's words), and its position at the
/// end mixes all 624 words again at the first draw: 1.5 us a sample for numpy's, 3.5 for
/// random's, against 0.2-0.3.
class PythonSeeder {
 public:
  PythonSeeder();
  PythonSeeder(const PythonSeeder&) = delete;
  PythonSeeder& operator=(const PythonSeeder&) = delete;
  ~PythonSeeder();
  void seed(std::uint64_t seed) const;
  /// Each generator alone, as seed() seeds it. random's written in place where its layout
  /// checked out at start (the same state and draws as setstate gives); else through setstate.
  void seed_random(std::uint64_t seed) const;
  /// Written in place where its layout checked out at start (the same state and draws as
  /// set_state gives, and as set_state without the generator's lock); else through set_state.
  void seed_numpy(std::uint64_t seed) const;
  void seed_torch(std::uint64_t seed) const;
  /// The generators' states (random's, numpy's global one's, torch's CPU one's where torch is
  /// imported), and back to them.
  py::tuple states() const;
  void restore(const py::tuple& states) const;
  void abandon() noexcept;
  /// Where numpy's generator is written in place (words null: it is not).
  const NumpyState& numpy_state() const noexcept { return numpy_state_; }
  bool seeds_random_in_place() const noexcept { return random_place_.words != nullptr; }
  /// The `random` generator seeded: the one random.random is a method of (random._inst unless
  /// the program rebound the module's functions), as the Loader was made.
  const py::object& random_generator() const noexcept { return random_; }

 private:
  py::object random_;            // random_generator()
  py::object random_set_state_;  // its setstate, where random_place_ was not found
  py::object gauss_next_;        // "gauss_next", interned
  RandomPlace random_place_;
  py::object numpy_set_state_;  // np.random.set_state, where numpy_state_ was not found
  py::object numpy_rand_;       // the RandomState numpy_state_ points into
  NumpyState numpy_state_;
  py::object modules_;             // sys.modules: torch is seeded only once something imported it
  py::object torch_name_;          // "torch", interned
  mutable py::object torch_seed_;  // torch.default_generator.manual_seed, once torch is there
};

/// The 624 words of generator `generator` (1 random, 2 numpy) for sample `seed` (PythonSeeder).
void generator_words(std::uint64_t seed, std::uint64_t generator, std::uint32_t* words) noexcept;

/// A worker process's seeding of `random` and numpy's legacy global generator (seed_python): a
/// generator is seeded before a sample only once a sample in this process has drawn from it
/// (seeding `random` costs 3.5 us, numpy's 0.3: as much as a small sample's own work). Until then
/// its position and two of its words are looked at before and after each sample; a sample that
/// drew from one unseeded is read again, that generator seeded from then on (read()). A generator
/// whose memory layout could not be checked at start is seeded before every sample, as is
/// torch's (where torch is imported). Needs the GIL.
class SeedWatch {
 public:
  SeedWatch();
  SeedWatch(const SeedWatch&) = delete;
  SeedWatch& operator=(const SeedWatch&) = delete;
  ~SeedWatch();
  /// Sample `seed` read by `get` (its __getitem__ and the conversion of its values, whose
  /// __array__ may draw too) under `mode` (ProcessOptions::seed_mode()): 0 nothing seeded; 1
  /// every generator seeded before it; 2 as above, the sample read a second time where it drew
  /// from a generator left unseeded (every generator seeded then; those it drew from are seeded
  /// before every sample from then on). \throws what `get` raises (the second read's, if any).
  void read(std::uint64_t seed, int mode, const std::function<void()>& get);
  /// Whether `random`'s and numpy's states are watched (their layouts were checked).
  bool watches_random() const noexcept { return random_.index != nullptr; }
  bool watches_numpy() const noexcept { return numpy_.index != nullptr; }
  /// Whether numpy's legacy generator and `random` are seeded in place (their layouts checked).
  bool seeds_numpy_in_place() const noexcept { return seeder_.numpy_state().words != nullptr; }
  bool seeds_random_in_place() const noexcept { return seeder_.seeds_random_in_place(); }

  /// One MT19937's state as the watch reads it: where its position and its 624 words lie, and
  /// (numpy's, where found) the flag of its cached second Gaussian, which a draw takes without
  /// moving the words.
  struct Watched {
    const int* index = nullptr;  // null: not watched (seeded before every sample)
    const std::uint32_t* words = nullptr;
    const int* cached = nullptr;  // null: not known
    bool drawn = false;           // a sample drew from it: seeded before every sample
    std::array<std::uint32_t, 4> noted{};
    std::array<std::uint32_t, 4> now() const noexcept {
      return {static_cast<std::uint32_t>(*index), words[0], words[623],
              cached == nullptr ? 0U : static_cast<std::uint32_t>(*cached)};
    }
  };

 private:
  /// Before a first read: seeds the generators drawn from before (the first time in this
  /// process, every one: a cached second Gaussian (random's gauss_next, numpy's has_gauss) left
  /// by a worker_init_fn would be drawn without moving the words), notes the rest's states.
  /// Whether it seeded every one (then a draw needs no second read).
  bool before(std::uint64_t seed);
  /// After a read: marks drawn the watched generators whose state moved from the one noted;
  /// whether any did.
  bool moved() noexcept;
  /// random's cached Gaussian (gauss_next) noted before a read, and whether it changed since.
  void note_random_gauss();
  bool random_gauss_changed() noexcept;
  /// Every generator (PythonSeeder::seed).
  void seed_all(std::uint64_t seed);

  PythonSeeder seeder_;
  Watched random_, numpy_;
  bool first_ = true;
  py::object random_owner_, numpy_owner_;  // the objects the pointers point into
  py::object random_gauss_;  // random's gauss_next (its cached Gaussian) noted; null: unread
  py::object gauss_name_;    // "gauss_next", interned
};

/// A dataset written in Python. A failure keeps the Python exception, traceback included, for
/// the module to raise (take_python_failure).
class PyDataset final : public Dataset {
 public:
  explicit PyDataset(py::object source);
  struct CopyTag {};
  /// copy()'s (GIL held).
  PyDataset(const PyDataset& other, CopyTag tag);
  PyDataset(const PyDataset&) = delete;
  PyDataset& operator=(const PyDataset&) = delete;
  ~PyDataset() override;

  std::size_t size() const override { return size_; }
  std::vector<FieldSpec> fields() const override { return layout_->fields(); }
  std::int64_t length(std::size_t index, std::size_t field) const override;
  std::int64_t max_length(std::size_t field) const override;
  void read(std::size_t index, SampleRef out) const override;
  void begin_reads(std::span<const std::size_t> indices,
                   std::span<const SampleRef> out) const noexcept override;
  void end_reads() const noexcept override;
  /// The worker processes' share of a batch (ProcessPool::read_share); 0 on threads.
  std::size_t read_share() const noexcept override;
  /// The worker processes' shared windows, at most (0 on threads).
  std::uint64_t reader_memory(std::uint64_t sample_bytes) const noexcept override;
  /// True while worker processes do the reads: they write into the loader's staging slots.
  bool shares_staging() const noexcept override { return pool_ != nullptr && pool_users_ > 0; }
  /// A worker process gives the slot's pages back (ProcessPool::released).
  void staging_released(std::span<std::byte> slot) const noexcept override;
  /// That give-back finished or called off (ProcessPool::reused).
  void staging_reused(std::span<std::byte> slot) const noexcept override;

  /// Another dataset over the same Python object, layout and seeder, with worker processes and
  /// kept failures of its own: each loader that runs worker processes reads through its own
  /// (GIL held).
  std::shared_ptr<PyDataset> copy() const;

  /// The Python object read (for the garbage collector's traversal).
  PyObject* source() const noexcept { return source_.ptr(); }
  const SampleLayout& layout() const noexcept { return *layout_; }

  /// Whether __getitem__ is seeded per sample (seed_python). GIL held.
  void set_seed_python(bool on) noexcept { seed_python_ = on; }
  /// Runs __getitem__ in worker processes from now on (GIL held; starts them). A second call
  /// with other options is a ConfigError: a dataset object feeds one pool.
  void use_processes(const ProcessOptions& options);
  /// Reads waiting for a worker process give up (their epoch was left early). No GIL needed.
  void abandon_reads() noexcept;
  /// Reads go to the worker processes again (an epoch starts). No GIL needed.
  void resume_reads() noexcept;
  /// The worker processes, if any.
  ProcessPool* pool() const noexcept { return pool_.get(); }
  /// One loader fewer uses the worker processes; the last one stops them, waking reads that wait
  /// for them (GIL held).
  void stop_processes();

  /// Keeps a Python exception for the module to raise as it was, with its traceback (its frames'
  /// locals are let go). Needs the GIL. \throws DataError with its type and message.
  [[noreturn]] void fail(std::size_t index, const py::error_already_set& e) const;
  /// Keeps a worker process's failure: its exception pickled, and its traceback's text.
  void keep_remote_failure(std::uint64_t index, std::string pickled, std::string traceback) const;
  /// The failure kept for `index`, as an exception object; empty if none. GIL held.
  py::object take_failure(std::uint64_t index) const;

 private:
  struct RemoteFailure {
    std::string pickled;
    std::string traceback;
  };
  void keep_failure(std::uint64_t index, py::object error) const;
  /// The sample the fields are taken from (SampleLayout), `index` set to its number.
  py::object first_sample(std::size_t& index) const;

  py::object source_;
  py::object length_;        // source.length, where declared
  py::object max_length_;    // source.max_length, where declared
  py::object clear_frames_;  // traceback.clear_frames: a kept failure's locals go
  std::size_t size_ = 0;
  std::shared_ptr<const SampleLayout> layout_;  // shared with the loaders' copies (for_loader)
  std::shared_ptr<const PythonSeeder> seeder_;
  bool seed_python_ = true;
  std::unique_ptr<ProcessPool> pool_;
  int pool_users_ = 0;  // loaders using pool_ (GIL held)
  mutable std::mutex mutex_;
  mutable std::map<std::uint64_t, py::object> failures_;  // guarded by mutex_ (and the GIL)
  mutable std::map<std::uint64_t, RemoteFailure> remote_failures_;  // guarded by mutex_
};

/// `dataset` with each Python dataset in it (itself, or a Mixture's source, nested too) replaced
/// by a copy of its own (PyDataset::copy, its Mixtures opened again over them): a loader's. GIL
/// held.
std::shared_ptr<const Dataset> loader_copy(const std::shared_ptr<const Dataset>& dataset);

/// The Python datasets in `dataset` (itself, or a Mixture's sources, nested too).
std::vector<PyDataset*> python_datasets(const Dataset& dataset);

}  // namespace ferry::python
