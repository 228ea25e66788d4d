// SeedWatch: a worker process's seeding of `random` and numpy's legacy generator only once a
// sample has drawn from it, watching their position and a few words of their states until then
// (the layouts of CPython's `random` generator and numpy's MT19937 checked against their own
// getstate() first).

#include <Python.h>
#include <cxxabi.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "py_dataset.hpp"

namespace ferry::python {

namespace {

/// Whether `w` reads the generator whose getstate() words are `words` and position `index`.
bool reads(const SeedWatch::Watched& w, const py::sequence& words, std::int64_t index) {
  if (*w.index != index || py::len(words) < kMtWords) return false;
  for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{311}, kMtWords - 1}) {
    if (w.words[k] != words[k].cast<std::uint32_t>()) return false;
  }
  return true;
}

/// Where CPython's `random` generator `inst` keeps its state (its C struct: the object's head,
/// an int position, then 624 words), checked against getstate() on a generator of its own type:
/// seeded, then after a draw. Empty where anything disagrees.
SeedWatch::Watched random_words(const py::object& inst) {
  if (random_place(inst).words == nullptr) return {};
  const auto at = [](const py::handle& o) {
    const RandomPlace place = random_place(o);
    SeedWatch::Watched v;
    v.index = place.index;
    v.words = place.words;
    return v;
  };
  const py::object probe = py::type::of(inst)();
  probe.attr("seed")(12345);
  for (int round = 0; round < 2; ++round) {
    const py::tuple state = probe.attr("getstate")();
    const py::tuple words = state[1];
    if (py::len(words) != kMtWords + 1 ||
        !reads(at(probe), words, words[kMtWords].cast<std::int64_t>())) {
      return {};
    }
    probe.attr("random")();
  }
  return at(inst);
}

/// Where numpy's legacy generator `rand` (a RandomState over MT19937) keeps its state: its bit
/// generator's capsule points at a bitgen_t whose first member points at the words, then the
/// position. Checked as random_words() does, on a RandomState of its own.
SeedWatch::Watched numpy_words(const py::object& rand, py::object& owner) {
  const auto at = [](const py::object& bit_generator) {
    SeedWatch::Watched v;
    const py::object capsule = bit_generator.attr("capsule");
    void* bitgen = PyCapsule_GetPointer(capsule.ptr(), "BitGenerator");
    if (bitgen == nullptr) {
      PyErr_Clear();
      return v;
    }
    void* state = nullptr;
    std::memcpy(&state, bitgen, sizeof state);  // bitgen_t's first member: void* state
    if (state == nullptr) return v;
    v.words = static_cast<const std::uint32_t*>(state);
    v.index = reinterpret_cast<const int*>(v.words + kMtWords);
    return v;
  };
  const py::object numpy_random = py::module_::import("numpy").attr("random");
  const py::object probe = numpy_random.attr("RandomState")(12345);
  const py::object probe_bits = probe.attr("_bit_generator");
  if (py::type::of(probe_bits).attr("__name__").cast<std::string>() != "MT19937") return {};
  for (int round = 0; round < 2; ++round) {
    const SeedWatch::Watched v = at(probe_bits);
    const py::tuple state = probe.attr("get_state")();
    if (v.index == nullptr || state[0].cast<std::string>() != "MT19937" ||
        !reads(v, state[1], state[2].cast<std::int64_t>())) {
      return {};
    }
    probe.attr("random_sample")();
  }
  owner = rand.attr("_bit_generator");
  if (py::type::of(owner).attr("__name__").cast<std::string>() != "MT19937") return {};
  return at(owner);
}

}  // namespace

SeedWatch::SeedWatch()
    : gauss_name_(py::reinterpret_steal<py::object>(PyUnicode_InternFromString("gauss_next"))) {
  // Any failure to find or check a layout leaves that generator seeded before every sample.
  try {
    random_owner_ = seeder_.random_generator();  // the generator seeded is the one watched
    random_ = random_words(random_owner_);
  } catch (const py::error_already_set&) {
    random_ = {};
  }
  try {
    const py::object rand =
        py::module_::import("numpy").attr("random").attr("mtrand").attr("_rand");
    numpy_ = numpy_words(rand, numpy_owner_);
    const NumpyState& state = seeder_.numpy_state();
    if (state.words != nullptr && numpy_.words == state.words) numpy_.cached = state.has_gauss;
  } catch (const py::error_already_set&) {
    numpy_ = {};
  }
}

void SeedWatch::note_random_gauss() {
  if (random_.index == nullptr || random_.drawn) return;
  PyObject* now = PyObject_GetAttr(random_owner_.ptr(), gauss_name_.ptr());
  if (now == nullptr) PyErr_Clear();
  random_gauss_ = py::reinterpret_steal<py::object>(now);
}

bool SeedWatch::random_gauss_changed() noexcept {
  // random.gauss() keeps the second of a pair in the instance's gauss_next: a draw of it, or a
  // setstate() that leaves one, moves no word. A different object there is a change (an error
  // reading it too: the generator is seeded from then on).
  PyObject* now = PyObject_GetAttr(random_owner_.ptr(), gauss_name_.ptr());
  if (now == nullptr) {
    PyErr_Clear();
    return true;
  }
  const bool changed = now != random_gauss_.ptr();
  Py_DECREF(now);
  return changed;
}

void SeedWatch::seed_all(std::uint64_t seed) {
  seeder_.seed_random(seed);
  seeder_.seed_numpy(seed);
  seeder_.seed_torch(seed);
}

SeedWatch::~SeedWatch() {
  const GilIfUsable gil;
  if (!gil.held()) {
    static_cast<void>(random_owner_.release());
    static_cast<void>(numpy_owner_.release());
    static_cast<void>(random_gauss_.release());
    static_cast<void>(gauss_name_.release());
    return;
  }
  random_owner_ = numpy_owner_ = random_gauss_ = gauss_name_ = py::object();
}

bool SeedWatch::before(std::uint64_t seed) {
  bool all = true;
  for (Watched* w : {&random_, &numpy_}) {
    const bool seed_it_now = w->index == nullptr || w->drawn || first_;
    if (seed_it_now && w == &random_) seeder_.seed_random(seed);
    if (seed_it_now && w == &numpy_) seeder_.seed_numpy(seed);
    all = all && seed_it_now;
    if (w->index != nullptr && !w->drawn) w->noted = w->now();
  }
  note_random_gauss();
  first_ = false;
  seeder_.seed_torch(seed);
  return all;
}

bool SeedWatch::moved() noexcept {
  bool drew = false;
  for (Watched* w : {&random_, &numpy_}) {
    if (w->index != nullptr && !w->drawn && w->now() != w->noted) {
      w->drawn = true;
      drew = true;
    }
  }
  if (random_.index != nullptr && !random_.drawn && random_gauss_changed()) {
    random_.drawn = true;
    drew = true;
  }
  return drew;
}

void SeedWatch::read(std::uint64_t seed, int mode, const std::function<void()>& get) {
  if (mode != 2) {
    if (mode == 1) seed_all(seed);
    get();
    return;
  }
  const bool seeded = before(seed);
  try {
    get();
    if (!moved() || seeded) return;
  } catch (const abi::__forced_unwind&) {
    throw;  // the thread is being ended: nothing to read again
  } catch (...) {
    // Raised after an unseeded draw (by __getitem__, or a conversion that its values fail):
    // the seeded read decides.
    if (!moved() || seeded) throw;
  }
  // It drew unseeded: read again with every generator seeded. Those it draws from this time are
  // seeded before every sample from now on as well (a draw that only the seeded read makes, on
  // a branch the first read's draw turned away from, would otherwise cost a third read later).
  seed_all(seed);
  for (Watched* w : {&random_, &numpy_}) {
    if (w->index != nullptr && !w->drawn) w->noted = w->now();
  }
  note_random_gauss();
  struct Marks {
    SeedWatch& watch;
    ~Marks() { static_cast<void>(watch.moved()); }
  } marks{*this};
  get();
}

void bind_seed_watch(py::module_& m) {
  // (random watched, numpy watched, numpy seeded in place, random seeded in place) in this
  // process: the checks of their layouts, for the tests.
  m.def("_seed_watch", [] {
    const SeedWatch watch;
    return py::make_tuple(watch.watches_random(), watch.watches_numpy(),
                          watch.seeds_numpy_in_place(), watch.seeds_random_in_place());
  });
}

}  // namespace ferry::python
