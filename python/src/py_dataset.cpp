// Datasets written in Python: their samples as fields (SampleLayout), the generators seeded
// before each __getitem__ (PythonSeeder), and PyDataset, read on ferry's worker threads under
// the GIL or, with processes, in worker processes (workers.hpp).

#include "py_dataset.hpp"

#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <utility>

#include "workers.hpp"

namespace ferry::python {

namespace {

std::string type_name(const py::handle& obj) {
  return py::repr(py::type::of(obj)).cast<std::string>();
}

/// A value as an error shows it: its repr, flattened, at most 80 characters.
std::string shown(const py::array& value) {
  std::string text = py::repr(value.ndim() == 0 ? value.attr("item")() : value.attr("ravel")())
                         .cast<std::string>();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string shape_text(const py::array& a) {
  return py::str(py::tuple(a.attr("shape"))).cast<std::string>();
}

/// The dtype of field `name` as the first sample read (`which`) gives it. \throws ConfigError
/// naming the field.
DType first_dtype(const std::string& name, const py::array& a, const std::string& which) {
  try {
    return to_dtype(a.dtype());
  } catch (const Error&) {
    throw ConfigError("Python dataset: field \"" + name + "\" of " + which + " has dtype " +
                      py::str(a.dtype()).cast<std::string>() +
                      ", which ferry does not take (u8, u16, u32, u64, i8, i16, i32, i64, f16, "
                      "bf16, f32, f64; convert it, e.g. a bool to u8)");
  }
}

/// One (name, dtype, shape) of a `fields` declaration, shape's None a ragged first dimension.
FieldSpec declared_field(const py::handle& item, std::size_t position) {
  const std::string where = "Python dataset: fields[" + std::to_string(position) + "]";
  if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || py::len(item) != 3) {
    throw ConfigError(where + " is " + py::repr(item).cast<std::string>() +
                      ", not a (name, dtype, shape) tuple");
  }
  const auto t = item.cast<py::sequence>();
  FieldSpec f;
  if (!py::isinstance<py::str>(t[0])) throw ConfigError(where + ": the name is not a str");
  f.name = t[0].cast<std::string>();
  try {
    f.dtype = to_dtype(t[1]);
  } catch (const Error& e) {
    throw ConfigError(where + " (\"" + f.name + "\"): " + e.what());
  }
  const py::object shape = t[2];
  if (!py::isinstance<py::sequence>(shape) || py::isinstance<py::str>(shape)) {
    throw ConfigError(where + " (\"" + f.name + "\"): the shape is a tuple, not " +
                      py::repr(shape).cast<std::string>());
  }
  std::size_t d = 0;
  for (const py::handle dim : shape) {
    if (dim.is_none() && d == 0) {
      f.shape.push_back(ragged);
    } else if (py::isinstance<py::int_>(dim) && dim.cast<std::int64_t>() >= 0) {
      f.shape.push_back(dim.cast<std::int64_t>());
    } else {
      throw ConfigError(where + " (\"" + f.name + "\"): dimension " + std::to_string(d) + " is " +
                        py::repr(dim).cast<std::string>() +
                        "; dimensions are ints >= 0, and None only for the first (ragged)");
    }
    ++d;
  }
  return f;
}

}  // namespace

// ---- SampleLayout

bool SampleLayout::declares(const py::object& source) {
  return !py::isinstance<Dataset>(source) && !py::getattr(source, "fields", py::none()).is_none();
}

SampleLayout::SampleLayout(const py::object& source,
                           const std::function<py::object(std::size_t&)>& first) {
  bind_numpy();
  if (declares(source)) {
    // Declared: the training process reads no sample (a dataset that opens its file on first
    // use still pickles for the worker processes). Samples are dicts or tuples.
    form_ = Form::declared;
    const py::object declared = source.attr("fields");
    if (!py::isinstance<py::sequence>(declared) || py::isinstance<py::str>(declared)) {
      throw ConfigError("Python dataset: `fields` is a list of (name, dtype, shape), not " +
                        py::repr(declared).cast<std::string>());
    }
    std::size_t position = 0;
    for (const py::handle item : declared) {
      FieldSpec f = declared_field(item, position);
      py::object key = py::str(f.name);
      add_field(std::move(f), std::move(key));
      ++position;
    }
    if (fields_.empty()) throw ConfigError("Python dataset: `fields` declares no field");
    return;
  }
  const py::object sample = first(first_);
  const std::string which = first_name();
  if (py::isinstance<py::tuple>(sample) || py::isinstance<py::list>(sample)) {
    form_ = Form::tuple;
    const auto items = sample.cast<py::sequence>();
    for (std::size_t i = 0; i < items.size(); ++i) {
      const py::object value = items[i];
      if (py::isinstance<py::dict>(value)) {
        throw ConfigError("Python dataset: item " + std::to_string(i) + " of " + which +
                          " is a dict: nested samples are not taken; return one flat "
                          "dict or tuple of arrays");
      }
      bool bf16 = false;
      const py::array a = as_array(value, bf16);
      FieldSpec f;
      f.name = std::to_string(i);
      f.dtype = bf16 ? DType::bf16 : first_dtype(f.name, a, which);
      f.shape.assign(a.shape(), a.shape() + a.ndim());
      add_field(std::move(f), py::int_(i));
    }
  } else if (py::isinstance<py::dict>(sample)) {
    form_ = Form::dict;
    for (const auto& [key, value] : sample.cast<py::dict>()) {
      const std::string name = py::str(key).cast<std::string>();
      if (py::isinstance<py::dict>(value)) {
        throw ConfigError("Python dataset: field \"" + name + "\" of " + which +
                          " is a dict: nested dicts are not taken; flatten them "
                          "(e.g. \"" +
                          name + "/x\")");
      }
      bool bf16 = false;
      const py::array a = as_array(value, bf16);
      FieldSpec f;
      f.name = name;
      f.dtype = bf16 ? DType::bf16 : first_dtype(f.name, a, which);
      f.shape.assign(a.shape(), a.shape() + a.ndim());
      add_field(std::move(f), py::reinterpret_borrow<py::object>(key));
    }
  } else {
    // One array, tensor or number: one field, "0". Anything else (a str, an object) is refused.
    py::array a;
    bool bf16 = false;
    bool numeric = !py::isinstance<py::str>(sample) && !py::isinstance<py::bytes>(sample);
    if (numeric) {
      try {
        a = as_array(sample, bf16);
        static_cast<void>(to_dtype(a.dtype()));
      } catch (const py::error_already_set&) {
        numeric = false;
      } catch (const Error&) {
        numeric = false;
      }
    }
    if (!numeric) {
      throw ConfigError("Python dataset: __getitem__(" + std::to_string(first_) + ") gave " +
                        type_name(sample) +
                        ", not a dict of field name to array or scalar, a tuple or list of them, "
                        "or one numeric array, tensor or number");
    }
    form_ = Form::single;
    FieldSpec f;
    f.name = "0";
    f.dtype = bf16 ? DType::bf16 : to_dtype(a.dtype());
    f.shape.assign(a.shape(), a.shape() + a.ndim());
    add_field(std::move(f), py::int_(0));
  }
  if (fields_.empty()) throw ConfigError("Python dataset: " + which + " has no fields");
}

SampleLayout::SampleLayout(const py::handle& description) {
  bind_numpy();
  const auto d = description.cast<py::tuple>();
  form_ = static_cast<Form>(d[1].cast<int>());
  first_ = d[2].cast<std::size_t>();
  std::size_t position = 0;
  for (const py::handle item : d[0]) {
    FieldSpec f = declared_field(item, position);
    py::object key = form_ == Form::tuple || form_ == Form::single ? py::object(py::int_(position))
                                                                   : py::object(py::str(f.name));
    add_field(std::move(f), std::move(key));
    ++position;
  }
}

void SampleLayout::bind_numpy() {
  const py::module_ np = py::module_::import("numpy");
  asarray_ = np.attr("asarray");
  contiguous_ = np.attr("ascontiguousarray");
  array_equal_ = np.attr("array_equal");
  isinf_ = np.attr("isinf");
  errstate_ = np.attr("errstate");
  can_cast_ = np.attr("can_cast");
  const py::module_ warnings = py::module_::import("warnings");
  catch_warnings_ = warnings.attr("catch_warnings");
  simplefilter_ = warnings.attr("simplefilter");
}

SampleLayout::~SampleLayout() {
  const GilIfUsable gil;
  if (!gil.held()) {
    abandon();
    return;
  }
  dtypes_.clear();
  keys_.clear();
  asarray_ = contiguous_ = array_equal_ = isinf_ = errstate_ = can_cast_ = catch_warnings_ =
      simplefilter_ = py::object();
}

void SampleLayout::abandon() noexcept {
  for (py::object* o : {&asarray_, &contiguous_, &array_equal_, &isinf_, &errstate_, &can_cast_,
                        &catch_warnings_, &simplefilter_})
    static_cast<void>(o->release());
  for (auto& d : dtypes_) static_cast<void>(d.release());
  for (auto& k : keys_) static_cast<void>(k.release());
  dtypes_.clear();
  keys_.clear();
}

void SampleLayout::add_field(FieldSpec f, py::object key) {
  // A bf16 field is held as its bits (numpy has no bfloat16).
  const py::dtype dt = f.dtype == DType::bf16 ? py::dtype("int16") : numpy_dtype(f.dtype);
  float_fields_.push_back(dt.kind() == 'f');
  dtypes_.push_back(dt);
  keys_.push_back(std::move(key));
  fields_.push_back(std::move(f));
}

py::tuple SampleLayout::describe() const {
  py::list fields;
  for (const FieldSpec& f : fields_) {
    py::list shape;
    for (const std::int64_t d : f.shape) {
      shape.append(d == ragged ? py::object(py::none()) : py::object(py::int_(d)));
    }
    fields.append(py::make_tuple(f.name, std::string(dtype_name(f.dtype)), py::tuple(shape)));
  }
  return py::make_tuple(fields, static_cast<int>(form_), first_);
}

py::object SampleLayout::value_of(const py::handle& sample, std::size_t f,
                                  std::size_t index) const {
  const auto wrong = [&](const std::string& what) {
    return DataError("Python dataset: field \"" + fields_[f].name + "\" of sample " +
                     std::to_string(index) + ": __getitem__(" + std::to_string(index) + ") gave " +
                     what);
  };
  if (form_ == Form::single) {
    if (py::isinstance<py::dict>(sample) || py::isinstance<py::tuple>(sample) ||
        py::isinstance<py::list>(sample)) {
      throw wrong(type_name(sample) + "; " + first_name() + " was one array");
    }
    return py::reinterpret_borrow<py::object>(sample);
  }
  const bool sequence = py::isinstance<py::tuple>(sample) || py::isinstance<py::list>(sample);
  if (form_ == Form::tuple || (form_ == Form::declared && sequence)) {
    if (!sequence) throw wrong(type_name(sample) + "; " + first_name() + " was a tuple or list");
    if (py::len(sample) != fields_.size()) {
      throw wrong(std::to_string(py::len(sample)) + " items; " +
                  (form_ == Form::declared ? "`fields` declares " : first_name() + " had ") +
                  std::to_string(fields_.size()));
    }
    return sample.cast<py::sequence>()[f];
  }
  if (!py::isinstance<py::dict>(sample)) {
    throw wrong(type_name(sample) +
                (form_ == Form::declared ? ", not a dict or a tuple" : ", not a dict"));
  }
  const auto lacks = [&] {
    return DataError("Python dataset: sample " + std::to_string(index) + " lacks field \"" +
                     fields_[f].name + "\"");
  };
  if (PyDict_CheckExact(sample.ptr()) != 0) {  // one lookup (a subclass's __getitem__ below)
    PyObject* value = PyDict_GetItemWithError(sample.ptr(), keys_[f].ptr());  // borrowed
    if (value == nullptr && PyErr_Occurred() != nullptr) throw py::error_already_set();
    if (value == nullptr) throw lacks();
    return py::reinterpret_borrow<py::object>(value);
  }
  const auto dict = py::reinterpret_borrow<py::dict>(sample);
  if (!dict.contains(keys_[f])) throw lacks();
  return dict[keys_[f]];
}

void SampleLayout::write(const py::handle& sample, std::size_t index,
                         std::span<std::byte* const> dest,
                         std::span<const std::size_t> nbytes) const {
  copy(arrays(sample, index, nbytes), dest, nbytes);
}

void SampleLayout::copy(const std::vector<py::array>& arrays, std::span<std::byte* const> dest,
                        std::span<const std::size_t> nbytes) noexcept {
  for (std::size_t f = 0; f < arrays.size(); ++f) {
    if (nbytes[f] != 0) std::memcpy(dest[f], arrays[f].data(), nbytes[f]);
  }
}

std::vector<py::array> SampleLayout::arrays(const py::handle& sample, std::size_t index,
                                            std::span<const std::size_t> nbytes) const {
  std::vector<py::array> out;
  out.reserve(fields_.size());
  for (std::size_t f = 0; f < fields_.size(); ++f) {
    py::array a = converted(value_of(sample, f, index), f, index);
    if ((a.flags() & py::array::c_style) == 0) a = contiguous_(a);
    const FieldSpec& spec = fields_[f];
    bool same = a.ndim() == static_cast<py::ssize_t>(spec.shape.size());
    for (std::size_t d = spec.is_ragged() ? 1 : 0; same && d < spec.shape.size(); ++d) {
      same = a.shape(static_cast<py::ssize_t>(d)) == spec.shape[d];
    }
    if (!same) {
      py::list want;
      for (const std::int64_t d : spec.shape) {
        want.append(d == ragged ? py::object(py::str("L")) : py::object(py::int_(d)));
      }
      throw DataError("Python dataset: field \"" + spec.name + "\" of sample " +
                      std::to_string(index) + " has shape " + shape_text(a) + "; " +
                      (declared() ? "`fields` declares " : first_name() + "'s is ") +
                      py::str(py::tuple(want)).cast<std::string>());
    }
    if (static_cast<std::size_t>(a.nbytes()) != nbytes[f]) {
      const std::size_t row = spec.sample_bytes();
      throw DataError("Python dataset: field \"" + spec.name + "\" of sample " +
                      std::to_string(index) + " has " + std::to_string(a.shape(0)) +
                      " rows; length() gave " + std::to_string(row == 0 ? 0 : nbytes[f] / row));
    }
    out.push_back(std::move(a));
  }
  return out;
}

// A conversion that changes a value (300 or -1 into u8, 3.7 into an integer, a finite float that
// overflows) is a DataError naming the sample and the field; one that keeps every value (3 into
// f32, a float rounded to a narrower float) is done.
py::array SampleLayout::converted(const py::handle& value, std::size_t f, std::size_t index) const {
  bool bf16 = false;
  py::array given = as_array(value, bf16);
  // Where the field's dtype came from, for the errors below (made only for one).
  const auto dtype_source = [this] {
    return declared() ? std::string("the declared dtype") : first_name() + "'s dtype";
  };
  if (fields_[f].dtype == DType::bf16) {
    if (bf16) return given;
    throw DataError("Python dataset: field \"" + fields_[f].name + "\" of sample " +
                    std::to_string(index) + " is " + py::str(given.dtype()).cast<std::string>() +
                    ", not a bf16 torch tensor (bf16 is " + dtype_source() + " for the field)");
  }
  if (bf16) given = asarray_(value.attr("detach")().attr("cpu")().attr("float")());  // exact
  const py::dtype& want = dtypes_[f];
  if (given.dtype().equal(want)) return given;
  // A safe cast changes no value (numpy 1.x judges a scalar by its value: 7 into u8, 1.5 into
  // f32); whatever it does not call safe is converted and compared below.
  const char kind = given.dtype().kind();
  // numpy calls int64 into f64 safe, but 2^53 + 1 does not fit: integers into floats are
  // converted and compared below like any other cast.
  const bool int_to_float = (kind == 'i' || kind == 'u') && want.kind() == 'f';
  if (!int_to_float && can_cast_(given, want).cast<bool>()) return given.attr("astype")(want);
  // numpy's warnings for a float that overflows or is not an integer, or a complex value's
  // imaginary part, are left out: the error below says more.
  const bool noisy = kind == 'f' || kind == 'c' || int_to_float;
  const py::object quiet = noisy ? errstate_(py::arg("all") = "ignore") : py::object();
  const py::object silence = noisy ? catch_warnings_() : py::object();
  if (quiet) {
    quiet.attr("__enter__")();
    silence.attr("__enter__")();
    simplefilter_("ignore");
  }
  py::array a;
  try {
    a = given.attr("astype")(want);
  } catch (py::error_already_set& e) {  // "abc", a list of lists of unequal lengths
    if (quiet) {
      silence.attr("__exit__")(py::none(), py::none(), py::none());
      quiet.attr("__exit__")(py::none(), py::none(), py::none());
    }
    throw DataError("Python dataset: field \"" + fields_[f].name + "\" of sample " +
                    std::to_string(index) + ": " + shown(given) + " (" +
                    py::str(given.dtype()).cast<std::string>() + ") cannot be converted to " +
                    py::str(py::object(want)).cast<std::string>() + " (" + dtype_source() +
                    " for the field): " +
                    py::str(py::type::of(e.value()).attr("__name__")).cast<std::string>() + ": " +
                    py::str(e.value()).cast<std::string>());
  }
  bool same = true;
  try {
    if (float_fields_[f] && kind == 'f') {
      // Rounding to a narrower float is expected; overflow to infinity is not.
      same = array_equal_(isinf_(a), isinf_(given)).cast<bool>();
    } else if (kind == 'f' || kind == 'c') {
      same = array_equal_(a.attr("astype")(given.dtype()), given, py::arg("equal_nan") = true)
                 .cast<bool>();
    } else {
      // The same shape on both sides: == compares element by element; and the signs agree (a
      // u64 over 2^63 into i64 comes back the same bits).
      same =
          a.attr("astype")(given.dtype()).attr("__eq__")(given).attr("all")().cast<bool>() &&
          (kind == 'b' || array_equal_(a.attr("__lt__")(0), given.attr("__lt__")(0)).cast<bool>());
    }
  } catch (...) {
    if (quiet) {
      silence.attr("__exit__")(py::none(), py::none(), py::none());
      quiet.attr("__exit__")(py::none(), py::none(), py::none());
    }
    throw;
  }
  if (quiet) {
    silence.attr("__exit__")(py::none(), py::none(), py::none());
    quiet.attr("__exit__")(py::none(), py::none(), py::none());
  }
  if (!same) {
    throw DataError("Python dataset: field \"" + fields_[f].name + "\" of sample " +
                    std::to_string(index) + ": " + shown(given) + " (" +
                    py::str(given.dtype()).cast<std::string>() + ") does not fit " +
                    py::str(py::object(want)).cast<std::string>() + " (" + dtype_source() +
                    " for the field) without changing a value");
  }
  return a;
}

py::array SampleLayout::as_array(const py::handle& value, bool& bf16) const {
  bf16 = false;
  // An ndarray itself (not a subclass, which np.asarray makes a plain view of): as it is, without
  // the call.
  if (Py_TYPE(value.ptr()) ==
      reinterpret_cast<PyTypeObject*>(py::detail::npy_api::get().PyArray_Type_)) {
    return py::reinterpret_borrow<py::array>(value);
  }
  try {
    return asarray_(value);
  } catch (py::error_already_set&) {
    const py::object dtype = py::getattr(value, "dtype", py::none());
    // A torch tensor that requires grad: its values, detached (numpy refuses it).
    if (!dtype.is_none() && py::getattr(value, "requires_grad", py::bool_(false)).cast<bool>()) {
      return as_array(value.attr("detach")(), bf16);
    }
    if (dtype.is_none() || py::str(dtype).cast<std::string>() != "torch.bfloat16") throw;
  }
  bf16 = true;
  const py::object bits = py::module_::import("torch").attr("int16");
  return asarray_(value.attr("detach")().attr("cpu")().attr("contiguous")().attr("view")(bits));
}

}  // namespace ferry::python
