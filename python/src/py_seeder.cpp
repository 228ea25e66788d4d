// PythonSeeder: the seeding of a Python dataset's generators from each sample's seed (`random`'s
// and numpy's MT19937 states written in place where their layouts checked out, torch's
// manual_seed). SeedWatch (seed_watch.cpp) decides which to seed in a worker process.

#include <Python.h>
#include <cxxabi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "py_dataset.hpp"

namespace ferry::python {

/// Where CPython's `random` generator `inst` keeps its state: its C struct, the object's head,
/// an int position, then the 624 words. Empty where `inst` is not a _random.Random or its
/// struct too small. Not checked here: checked_random_place() checks it.
RandomPlace random_place(const py::handle& inst) {
  const py::object base = py::module_::import("_random").attr("Random");
  const auto* type = reinterpret_cast<PyTypeObject*>(base.ptr());
  const std::size_t index_at = sizeof(PyObject);
  const std::size_t words_at = index_at + sizeof(int);
  if (PyObject_IsInstance(inst.ptr(), base.ptr()) != 1 ||
      static_cast<std::size_t>(type->tp_basicsize) < words_at + kMtWords * sizeof(std::uint32_t)) {
    PyErr_Clear();
    return {};
  }
  auto* bytes = reinterpret_cast<unsigned char*>(inst.ptr());
  return {reinterpret_cast<int*>(bytes + index_at),
          reinterpret_cast<std::uint32_t*>(bytes + words_at)};
}

namespace {

// Each generator's number, its seed's (generator_seed).
constexpr std::uint64_t kRandom = 1;
constexpr std::uint64_t kNumpy = 2;
constexpr std::uint64_t kTorch = 3;

/// One generator's seed from the sample's: each generator its own (random and numpy's legacy
/// generator are both MT19937: one seed would make their draws equal, and a flip drawn from one
/// and a crop from the other move together).
std::uint64_t generator_seed(std::uint64_t seed, std::uint64_t generator) {
  std::uint64_t z = seed + generator * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31U);
}

/// Where RandomState `rand`, over an MT19937 whose state struct is `words`, keeps its cached
/// Gaussian: its aug_bitgen_t (a pointer to its bitgen_t, an int, a double), found as the word of
/// the object that points at the object's own bitgen_t, whose first member points at `words`.
/// Not checked here: numpy_state() checks it.
NumpyState find_numpy_state(const py::object& rand, std::uint32_t* words) {
  struct Aug {  // aug_bitgen_t's layout
    void* bit_generator;
    int has_gauss;
    double gauss;
  };
  auto* object = reinterpret_cast<unsigned char*>(rand.ptr());
  const auto size = static_cast<std::size_t>(Py_TYPE(rand.ptr())->tp_basicsize);
  const auto word = [&](std::size_t at) {
    void* p = nullptr;
    std::memcpy(&p, object + at, sizeof p);
    return p;
  };
  for (std::size_t bitgen = sizeof(PyObject); bitgen + sizeof(void*) <= size;
       bitgen += sizeof(void*)) {
    if (word(bitgen) != static_cast<void*>(words)) continue;
    for (std::size_t aug = bitgen + sizeof(void*); aug + sizeof(Aug) <= size;
         aug += sizeof(void*)) {
      if (word(aug) != object + bitgen) continue;
      NumpyState s;
      s.words = words;
      s.pos = reinterpret_cast<int*>(words + kMtWords);
      s.has_gauss = reinterpret_cast<int*>(object + aug + offsetof(Aug, has_gauss));
      s.gauss = reinterpret_cast<double*>(object + aug + offsetof(Aug, gauss));
      return s;
    }
  }
  return {};
}

/// `s` set as set_state(("MT19937", words, 0)) sets it, `words` generator_words(seed, kNumpy):
/// the words (made where they lie), the position at the start, no cached Gaussian.
void seed_in_place(const NumpyState& s, std::uint64_t seed) noexcept {
  generator_words(seed, kNumpy, s.words);
  *s.pos = 0;
  *s.has_gauss = 0;
  *s.gauss = 0.0;
}

/// The `random` generator a program draws from: the instance whose method random.random is
/// (the module's own, random._inst, unless the program rebound the module's functions).
py::object random_generator_of(const py::module_& random) {
  const py::object bound = py::getattr(random.attr("random"), "__self__", py::none());
  const py::object base = py::module_::import("_random").attr("Random");
  if (PyObject_IsInstance(bound.ptr(), base.ptr()) == 1) return bound;
  PyErr_Clear();
  return random.attr("_inst");
}

/// `inst`, whose state is at `place`, set as setstate((3, words + (0,), None)) sets it, `words`
/// generator_words(seed, kRandom): the words (made where they lie), the position at the start,
/// no cached Gaussian. `gauss_next` interned.
void seed_in_place(const py::handle& inst, const RandomPlace& place, std::uint64_t seed,
                   const py::handle& gauss_next) {
  generator_words(seed, kRandom, place.words);
  *place.index = 0;
  if (PyObject_SetAttr(inst.ptr(), gauss_next.ptr(), Py_None) != 0) {
    throw py::error_already_set();
  }
}

py::tuple random_state_of(const std::uint32_t* words) {
  py::tuple internal(kMtWords + 1);
  for (std::size_t k = 0; k < kMtWords; ++k) internal[k] = py::int_(words[k]);
  internal[kMtWords] = py::int_(0);
  return py::make_tuple(3, internal, py::none());
}

/// random_place(inst), checked on a generator of its own type: written in place, the same state
/// and next draws as setstate() gives. Empty where anything disagrees (then set by setstate).
RandomPlace checked_random_place(const py::object& inst, const py::handle& gauss_next) {
  // random.Random itself: a subclass may keep state of its own that its setstate resets (a
  // buffer of drawn bits), which a write in place would leave.
  if (!py::type::of(inst).is(py::module_::import("random").attr("Random")) ||
      random_place(inst).words == nullptr) {
    return {};
  }
  const py::object probe = py::type::of(inst)();
  const RandomPlace place = random_place(probe);
  std::array<std::uint32_t, kMtWords> words{};
  generator_words(987654321U, kRandom, words.data());
  probe.attr("gauss")(0.0, 1.0);  // the second of a pair cached, which the write must clear
  seed_in_place(probe, place, 987654321U, gauss_next);
  const py::object reference = py::type::of(inst)();
  reference.attr("gauss")(0.0, 1.0);
  reference.attr("setstate")(random_state_of(words.data()));
  if (!probe.attr("getstate")().equal(reference.attr("getstate")())) return {};
  for (const char* draw : {"random", "gauss", "gauss", "random"}) {
    const py::object ours =
        std::string_view(draw) == "gauss" ? probe.attr(draw)(0.0, 1.0) : probe.attr(draw)();
    const py::object theirs =
        std::string_view(draw) == "gauss" ? reference.attr(draw)(0.0, 1.0) : reference.attr(draw)();
    if (!ours.equal(theirs)) return {};
  }
  return random_place(inst);
}

py::object words_array(const std::uint32_t* words) {
  return py::array_t<std::uint32_t>(static_cast<py::ssize_t>(kMtWords), words);
}

/// Where numpy's global RandomState `rand` keeps its state, found on a RandomState of its own
/// and checked there: its cached Gaussian where get_state() says, then written in place to the
/// same state (words, position, cached Gaussian) and the same next draws as one given them by
/// set_state(). Empty where anything disagrees (then seeded through np.random.set_state).
NumpyState checked_numpy_state(const py::object& rand) {
  const py::object numpy_random = py::module_::import("numpy").attr("random");
  const auto state_of = [](const py::object& r) {
    const py::object bits = r.attr("_bit_generator");
    void* bitgen = PyCapsule_GetPointer(bits.attr("capsule").ptr(), "BitGenerator");
    if (bitgen == nullptr) {
      PyErr_Clear();
      return NumpyState{};
    }
    void* words = nullptr;
    std::memcpy(&words, bitgen, sizeof words);  // bitgen_t's first member: void* state
    return words == nullptr ? NumpyState{}
                            : find_numpy_state(r, static_cast<std::uint32_t*>(words));
  };
  const py::object probe = numpy_random.attr("RandomState")(12345);
  if (!py::type::of(rand).is(py::type::of(probe)) ||
      py::type::of(probe.attr("_bit_generator")).attr("__name__").cast<std::string>() !=
          "MT19937") {
    return {};
  }
  const NumpyState s = state_of(probe);
  if (s.words == nullptr) return {};
  probe.attr("standard_normal")();  // the second of the pair cached
  const py::tuple drawn = probe.attr("get_state")();
  if (drawn.size() != 5 || drawn[3].cast<int>() != 1 || *s.has_gauss != 1 ||
      *s.gauss != drawn[4].cast<double>()) {
    return {};
  }
  std::array<std::uint32_t, kMtWords> words{};
  generator_words(987654321U, kNumpy, words.data());
  seed_in_place(s, 987654321U);
  const py::object reference = numpy_random.attr("RandomState")();
  reference.attr("standard_normal")();  // a cached Gaussian that set_state() must clear
  reference.attr("set_state")(py::make_tuple("MT19937", words_array(words.data()), 0, 0, 0.0));
  const py::tuple ours = probe.attr("get_state")();
  const py::tuple theirs = reference.attr("get_state")();
  const py::object equal = py::module_::import("numpy").attr("array_equal");
  for (std::size_t k : {std::size_t{0}, std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
    if (!ours[k].equal(theirs[k])) return {};
  }
  if (!equal(ours[1], theirs[1]).cast<bool>()) return {};
  for (const char* draw : {"random_sample", "standard_normal", "standard_normal"}) {
    if (!probe.attr(draw)().equal(reference.attr(draw)())) return {};
  }
  return state_of(rand);
}

}  // namespace

void generator_words(std::uint64_t seed, std::uint64_t generator, std::uint32_t* words) noexcept {
  // splitmix64 from the generator's seed, each output two words (the steps independent of one
  // another: some 0.2 us for the 624).
  const std::uint64_t start = generator_seed(seed, generator);
  for (std::size_t i = 0; i < kMtWords / 2; ++i) {
    std::uint64_t z = start + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30U)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27U)) * 0x94D049BB133111EBULL;
    z ^= z >> 31U;
    words[2 * i] = static_cast<std::uint32_t>(z);
    words[2 * i + 1] = static_cast<std::uint32_t>(z >> 32U);
  }
}

PythonSeeder::PythonSeeder()
    : random_(random_generator_of(py::module_::import("random"))),
      random_set_state_(random_.attr("setstate")),
      gauss_next_(py::reinterpret_steal<py::object>(PyUnicode_InternFromString("gauss_next"))),
      numpy_set_state_(py::module_::import("numpy").attr("random").attr("set_state")),
      modules_(py::module_::import("sys").attr("modules")),
      torch_name_(py::reinterpret_steal<py::object>(PyUnicode_InternFromString("torch"))) {
  // Any failure to find or check a layout leaves that generator set through its setstate.
  try {
    random_place_ = checked_random_place(random_, gauss_next_);
  } catch (const py::error_already_set&) {
    random_place_ = {};
  }
  try {
    const py::object rand =
        py::module_::import("numpy").attr("random").attr("mtrand").attr("_rand");
    numpy_state_ = checked_numpy_state(rand);
    if (numpy_state_.words != nullptr) numpy_rand_ = rand;
  } catch (const py::error_already_set&) {
    numpy_state_ = {};
  }
}

PythonSeeder::~PythonSeeder() {
  const GilIfUsable gil;
  if (!gil.held()) {
    abandon();
    return;
  }
  random_ = random_set_state_ = gauss_next_ = numpy_set_state_ = numpy_rand_ = modules_ =
      torch_name_ = torch_seed_ = py::object();
}

void PythonSeeder::abandon() noexcept {
  for (py::object* o : {&random_, &random_set_state_, &gauss_next_, &numpy_set_state_, &numpy_rand_,
                        &modules_, &torch_name_, &torch_seed_}) {
    static_cast<void>(o->release());
  }
}

void PythonSeeder::seed(std::uint64_t seed) const {
  seed_random(seed);
  seed_numpy(seed);
  seed_torch(seed);
}

void PythonSeeder::seed_random(std::uint64_t seed) const {
  if (random_place_.words != nullptr) {
    seed_in_place(random_, random_place_, seed, gauss_next_);
    return;
  }
  std::array<std::uint32_t, kMtWords> words;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  generator_words(seed, kRandom, words.data());
  random_set_state_(random_state_of(words.data()));
}

void PythonSeeder::seed_numpy(std::uint64_t seed) const {
  if (numpy_state_.words != nullptr) {
    // Without the generator's lock, as set_state writes it (a sample that left the lock held
    // would otherwise hang every later sample's seeding).
    seed_in_place(numpy_state_, seed);
    return;
  }
  std::array<std::uint32_t, kMtWords> words;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  generator_words(seed, kNumpy, words.data());
  numpy_set_state_(py::make_tuple("MT19937", words_array(words.data()), 0, 0, 0.0));
}

void PythonSeeder::seed_torch(std::uint64_t seed) const {
  if (!torch_seed_) {
    // Looked at before every sample until torch is imported: by an interned name (no string
    // made a sample).
    if (PyDict_Contains(modules_.ptr(), torch_name_.ptr()) != 1) return;
    const auto modules = py::reinterpret_borrow<py::dict>(modules_);
    // The CPU generator's own manual_seed: torch.manual_seed also seeds every CUDA device's
    // generator and costs 35 times as much.
    const py::object generator = py::getattr(modules["torch"], "default_generator", py::none());
    if (generator.is_none()) return;
    torch_seed_ = generator.attr("manual_seed");
  }
  torch_seed_(py::int_(generator_seed(seed, kTorch)));
}

py::tuple PythonSeeder::states() const {
  const auto modules = py::reinterpret_borrow<py::dict>(modules_);
  const py::object torch = modules.contains("torch") ? py::object(modules["torch"]) : py::none();
  return py::make_tuple(py::module_::import("random").attr("getstate")(),
                        py::module_::import("numpy").attr("random").attr("get_state")(),
                        torch.is_none() || !py::hasattr(torch, "get_rng_state")
                            ? py::object(py::none())
                            : torch.attr("get_rng_state")());
}

void PythonSeeder::restore(const py::tuple& states) const {
  py::module_::import("random").attr("setstate")(states[0]);
  py::module_::import("numpy").attr("random").attr("set_state")(states[1]);
  if (!states[2].is_none()) {
    py::reinterpret_borrow<py::dict>(modules_)["torch"].attr("set_rng_state")(states[2]);
  }
}

}  // namespace ferry::python
