// libFuzzer target: CsvDataset's parser on arbitrary bytes. The first byte picks the options
// (header, delimiter, label column, classes, missing values, explicit features and a
// categorical column); the rest is
// the file. Each input is parsed whole on this thread and again in pieces of a few bytes (the
// piece size from the first byte too), which must agree exactly: the same table, or the same
// error message. Only DataError and ConfigError may escape the parser. A gzipped input is also
// opened as a file by CsvDataset::open, with decompression limited to 1 MiB: a dataset of
// consistent sizes, or DataError or ConfigError.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "datasets/csv/csv_parse.hpp"
#include "ferry/csv_dataset.hpp"
#include "ferry/error.hpp"

namespace {

using Result = std::variant<ferry::detail::CsvTable, std::string>;

Result parse(std::string_view text, const ferry::CsvOptions& o, const ferry::detail::CsvSplit& s) {
  try {
    return ferry::detail::parse_csv(text, o, "fuzz.csv", s);
  } catch (const ferry::DataError& e) {
    return std::string("DataError: ") + e.what();
  } catch (const ferry::ConfigError& e) {
    return std::string("ConfigError: ") + e.what();
  }
}

// Float vectors equal bit for bit (NaN included).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_categorical(const ferry::detail::CsvTable& x, const ferry::detail::CsvTable& y) {
  if (x.categorical.size() != y.categorical.size()) return false;
  for (std::size_t k = 0; k < x.categorical.size(); ++k) {
    const auto& a = x.categorical[k];
    const auto& b = y.categorical[k];
    if (a.name != b.name || a.categories != b.categories || a.codes != b.codes) return false;
  }
  return true;
}

bool same(const Result& a, const Result& b) {
  if (a.index() != b.index()) return false;
  if (const auto* e = std::get_if<std::string>(&a)) return *e == std::get<std::string>(b);
  const auto& x = std::get<ferry::detail::CsvTable>(a);
  const auto& y = std::get<ferry::detail::CsvTable>(b);
  return x.rows == y.rows && x.num_features == y.num_features && x.has_label == y.has_label &&
         x.classes_mode == y.classes_mode && x.feature_names == y.feature_names &&
         x.classes == y.classes && same_bits(x.features, y.features) && x.labels == y.labels &&
         same_bits(x.targets, y.targets) && same_categorical(x, y);
}

// Checks what a table promises: sizes agree, class ids index classes().
void check(const ferry::detail::CsvTable& t) {
  bool ok = t.rows > 0 && t.num_features > 0 && t.features.size() == t.rows * t.num_features &&
            t.feature_names.size() == t.num_features;
  if (t.classes_mode) {
    ok = ok && t.labels.size() == t.rows && t.targets.empty();
    for (const std::int64_t id : t.labels) {
      ok = ok && id >= 0 && static_cast<std::size_t>(id) < t.classes.size();
    }
  } else if (t.has_label) {
    ok = ok && t.targets.size() == t.rows && t.labels.empty();
  } else {
    ok = ok && t.labels.empty() && t.targets.empty();
  }
  // Categorical codes: one per row, each -1 (missing) or a category's index; categories sorted
  // and distinct.
  for (const auto& c : t.categorical) {
    ok = ok && c.codes.size() == t.rows;
    for (const std::int64_t code : c.codes) {
      ok = ok && code >= -1 && code < static_cast<std::int64_t>(c.categories.size());
    }
    for (std::size_t i = 1; i < c.categories.size(); ++i) {
      ok = ok && c.categories[i - 1] < c.categories[i];
    }
  }
  if (!ok) std::abort();
}

// `bytes` as a file (in memory), opened by CsvDataset::open.
void open_gzip(std::string_view bytes, const ferry::CsvOptions& o) {
  const int fd = memfd_create("csv", 0);
  if (fd < 0) __builtin_trap();
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) __builtin_trap();
    done += static_cast<std::size_t>(n);
  }
  ferry::CsvOptions limited = o;
  limited.max_decompressed_bytes = std::uint64_t{1} << 20;
  try {
    const auto ds = ferry::CsvDataset::open("/proc/self/fd/" + std::to_string(fd), limited);
    if (ds->size() == 0 || ds->features().size() != ds->size() * ds->num_features()) std::abort();
  } catch (const ferry::DataError&) {
  } catch (const ferry::ConfigError&) {
  }
  close(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::uint8_t pick = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  ferry::CsvOptions o;
  o.header = (pick & 1) != 0;
  constexpr char kDelimiters[] = {',', ';', '\t', ' '};
  o.delimiter = kDelimiters[(pick >> 1) & 3];
  switch ((pick >> 3) & 3) {
    case 0:
      o.label = o.header ? ferry::Column::name("label") : ferry::Column::last();
      break;
    case 1:
      o.label = ferry::Column::index(0);
      break;
    case 2:
      o.label = ferry::Column::last();
      break;
    default:
      o.label = ferry::Column::none();
      break;
  }
  o.classes = (pick & 0x20) == 0;
  o.missing = (pick & 0x40) != 0 ? ferry::Missing::nan : ferry::Missing::error;
  if ((pick & 0x80) != 0) {
    o.features = {ferry::Column::index(1), ferry::Column::index(2)};
    o.categorical = {ferry::Column::index(3)};
  }

  const Result whole = parse(text, o, {~std::size_t{0}, false});
  const std::size_t piece = 1 + (pick % 13);
  const Result pieces = parse(text, o, {piece, false});
  if (!same(whole, pieces)) std::abort();
  if (const auto* t = std::get_if<ferry::detail::CsvTable>(&whole)) check(*t);
  if (text.size() >= 2 && text[0] == '\x1f' && text[1] == '\x8b') open_gzip(text, o);
  return 0;
}
