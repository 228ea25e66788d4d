// Hugging Face datasets' Array2D..Array5D features in Arrow files: an extension type whose
// storage is N levels of lists (list<list<T>> for Array2D) and whose metadata is the JSON
// [shape, dtype], shape[0] null when the first dimension varies. Read as a field of that shape
// (ragged first), each row's lists checked against it.

#include <cctype>
#include <charconv>
#include <string>

#include "datasets/table/arrow_table.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "ferry/error.hpp"

namespace ferry::detail {
namespace {

using ArrowField = arrow::Field;  // not `Field`: csv/ has one, and a unity unit may see both
using arrow::TypeId;

constexpr std::string_view kPrefix = "Array";
constexpr std::string_view kSuffix = "DExtensionType";
constexpr std::int64_t kMaxDim = std::int64_t{1} << 31;

/// N of "...ArrayNDExtensionType" (2 to 5), else 0.
std::size_t hf_dims(std::string_view name) {
  if (name.size() < kPrefix.size() + 1 + kSuffix.size() || !name.ends_with(kSuffix)) return 0;
  name.remove_suffix(kSuffix.size());
  const char n = name.back();
  name.remove_suffix(1);
  if (!name.ends_with(kPrefix) || n < '2' || n > '5') return 0;
  const std::size_t before = name.size() - kPrefix.size();
  if (before != 0 && name[before - 1] != '.') return 0;
  return static_cast<std::size_t>(n - '0');
}

/// The shape of "[[d0, d1, ...], "dtype"]" (null: -1), or nothing.
std::optional<std::vector<std::int64_t>> hf_shape(std::string_view s) {
  std::size_t i = 0;
  const auto skip = [&] {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i])) != 0) ++i;
  };
  const auto eat = [&](char c) {
    skip();
    if (i >= s.size() || s[i] != c) return false;
    ++i;
    return true;
  };
  if (!eat('[')) return std::nullopt;  // the pair
  if (!eat('[')) return std::nullopt;  // the shape
  std::vector<std::int64_t> shape;
  for (;;) {
    skip();
    if (s.substr(i, 4) == "null") {
      shape.push_back(-1);
      i += 4;
    } else {
      std::int64_t v = 0;
      const auto [end, ec] = std::from_chars(s.data() + i, s.data() + s.size(), v);
      if (ec != std::errc() || v < 0 || v > kMaxDim) return std::nullopt;
      shape.push_back(v);
      i = static_cast<std::size_t>(end - s.data());
    }
    if (eat(']')) break;
    if (!eat(',') || shape.size() > 8) return std::nullopt;
  }
  if (!eat(',')) return std::nullopt;
  return shape;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) s += ", ";
    s += shape[i] < 0 ? "None" : std::to_string(shape[i]);
  }
  return s + ")";
}

}  // namespace

bool map_hf_array(const ArrowField& f, ArrowColumn& col, const std::string& what) {
  const std::size_t dims = hf_dims(f.extension_name);
  if (dims == 0 || f.dictionary) return false;
  const auto shape = hf_shape(f.extension_metadata);
  if (!shape || shape->size() != dims) {
    throw ConfigError(what + ": its metadata " + parquet::in_quotes(f.extension_metadata) +
                      " is not a shape of " + std::to_string(dims) + " dimensions");
  }
  std::int64_t values = 1;  // a row's, or a first dimension's element's
  for (std::size_t d = 0; d < dims; ++d) {
    const std::int64_t n = (*shape)[d];
    if (d > 0 && n < 0) {
      throw ConfigError(what + ": only its first dimension may vary, in the shape " +
                        shape_text(*shape));
    }
    if (n == 0) throw ConfigError(what + ": a shape " + shape_text(*shape) + " with a 0");
    if (n > 0) values *= n;
    if (values > kMaxDim) {
      throw ConfigError(what + ": a shape " + shape_text(*shape) + " of more than 2^31 values");
    }
  }
  const ArrowField* level = &f;
  std::vector<bool> large;
  for (std::size_t d = 0; d < dims; ++d) {
    if ((level->type != TypeId::list && level->type != TypeId::large_list) ||
        level->children.size() != 1 || level->dictionary) {
      throw ConfigError(what + ": an extension of shape " + shape_text(*shape) +
                        " stored as other than " + std::to_string(dims) + " levels of lists");
    }
    large.push_back(level->type == TypeId::large_list);
    level = &level->children[0];
  }
  const auto dtype = scalar_dtype(*level);
  if (!dtype) throw ConfigError(what + ", whose values ferry does not read");
  col.kind = ArrowKind::array;
  col.dtype = *dtype;
  col.width = level->type == TypeId::boolean ? 0 : dtype_size(*dtype);
  col.leaf = dims;
  col.shape = *shape;
  col.level_large = std::move(large);
  col.large = col.level_large[0];
  col.inner.assign(shape->begin() + ((*shape)[0] < 0 ? 1 : 0), shape->end());
  col.per_row = 1;
  for (const std::int64_t n : col.inner) col.per_row *= static_cast<std::size_t>(n);
  return true;
}

std::optional<std::pair<std::int64_t, std::int64_t>> array_values(
    const ArrowColumn& col, const std::vector<ArrowArray>& arrays, std::int64_t r,
    std::int64_t first_length, const std::function<std::string()>& where) {
  std::int64_t first = r;
  std::int64_t count = 1;
  for (std::size_t level = 0; level < col.shape.size(); ++level) {
    if (count == 0) return std::pair{std::int64_t{0}, std::int64_t{0}};
    const ArrowArray& a = arrays[level];
    const bool large = col.level_large[level];
    const std::int64_t want = col.shape[level] < 0 ? first_length : col.shape[level];
    for (std::int64_t k = first; k < first + count; ++k) {
      if (!a.is_valid(k)) return std::nullopt;  // (the row itself is checked by the caller)
      const auto [from, to] = arrow::offsets_at(a, large, k);
      if (to - from != want) {
        throw DataError(where() + ": a list of " + std::to_string(to - from) + " at dimension " +
                        std::to_string(level) + " where its shape " + shape_text(col.shape) +
                        (col.shape[level] < 0 ? " (its length at open)" : "") + " has " +
                        std::to_string(want));
      }
    }
    // Each list of this level holds `want`: the next level's are contiguous from here.
    first = arrow::offsets_at(a, large, first).first;
    count *= want;
  }
  const ArrowArray& leaf = arrays[col.shape.size()];
  if (leaf.node.null_count != 0) {
    for (std::int64_t k = first; k < first + count; ++k) {
      if (!leaf.is_valid(k)) return std::nullopt;
    }
  }
  return std::pair{first, count};
}

}  // namespace ferry::detail
