#include "datasets/table/parquet_schema.hpp"

#include <algorithm>
#include <set>
#include <string>

#include "datasets/table/parquet_chunk.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"

namespace ferry::detail::parquet {
namespace {

constexpr const char* kPhysical[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                     "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
constexpr const char* kConverted[] = {"UTF8",
                                      "MAP",
                                      "MAP_KEY_VALUE",
                                      "LIST",
                                      "ENUM",
                                      "DECIMAL",
                                      "DATE",
                                      "TIME_MILLIS",
                                      "TIME_MICROS",
                                      "TIMESTAMP_MILLIS",
                                      "TIMESTAMP_MICROS",
                                      "UINT_8",
                                      "UINT_16",
                                      "UINT_32",
                                      "UINT_64",
                                      "INT_8",
                                      "INT_16",
                                      "INT_32",
                                      "INT_64",
                                      "JSON",
                                      "BSON",
                                      "INTERVAL"};
constexpr const char* kLogical[] = {
    "",        "STRING",  "MAP",  "LIST", "ENUM", "DECIMAL", "DATE",    "TIME",     "TIMESTAMP", "",
    "INTEGER", "UNKNOWN", "JSON", "BSON", "UUID", "FLOAT16", "VARIANT", "GEOMETRY", "GEOGRAPHY"};

// Skips element i and its descendants; the index after them. Counts the leaves.
std::size_t skip_tree(const std::vector<SchemaElement>& s, std::size_t i, std::size_t& leaves,
                      int depth) {
  if (depth > 64) throw ChunkError("the schema nests deeper than 64 levels");
  if (i >= s.size()) throw ChunkError("the schema's children go past its end");
  const std::int32_t n = s[i].num_children;
  if (n < 0) throw ChunkError("a schema element with a negative count of children");
  if (n == 0) {
    ++leaves;
    return i + 1;
  }
  std::size_t next = i + 1;
  for (std::int32_t c = 0; c < n; ++c) next = skip_tree(s, next, leaves, depth + 1);
  return next;
}

/// The integer type a logical or converted annotation gives, if any: {bits, signed}.
struct IntType {
  int bits = 0;
  bool is_signed = true;
};
std::optional<IntType> int_annotation(const SchemaElement& e) {
  if (e.logical.which == 10) return IntType{e.logical.bit_width, e.logical.is_signed};
  if (e.logical.which != 0) return std::nullopt;
  if (!e.converted) return IntType{};
  const int c = *e.converted;
  if (c >= 11 && c <= 14) return IntType{8 << (c - 11), false};
  if (c >= 15 && c <= 18) return IntType{8 << (c - 15), true};
  return std::nullopt;
}

/// A leaf of bytes, not repeated.
bool byte_leaf(const SchemaElement& e) {
  return e.num_children == 0 && e.type && *e.type == Physical::byte_array && e.repetition != 2;
}

/// Records where an Image struct's `bytes` lies, if the group at s[i] is one (its first leaf is
/// leaf `first`).
void find_image(const std::vector<SchemaElement>& s, std::size_t i, std::size_t first,
                TopColumn& col) {
  const SchemaElement& g = s[i];
  if (g.num_children != 2 || g.type || g.repetition == 2 || i + 2 >= s.size()) return;
  const SchemaElement* kids[] = {&s[i + 1], &s[i + 2]};
  const int at = kids[0]->name == "bytes" ? 0 : 1;
  if (kids[at]->name != "bytes" || kids[1 - at]->name != "path" || !byte_leaf(*kids[0]) ||
      !byte_leaf(*kids[1])) {
    return;
  }
  col.image_leaf = static_cast<std::ptrdiff_t>(first) + at;
  col.image_def = (g.repetition == 1 ? 1 : 0) + (kids[at]->repetition == 1 ? 1 : 0);
}

bool is_list_group(const SchemaElement& e) {
  return e.num_children == 1 && !e.type && e.repetition != 2 &&
         (e.logical.which == 3 || (e.logical.which == 0 && e.converted && *e.converted == 3));
}

/// The levels of the list at s[i] (a LIST group, or a repeated primitive), whose parent's
/// definition level is `def`, into col.lists; false for a shape that is not a list of numbers
/// or of such lists (a struct element, a map). The backward-compatibility rules of the
/// specification's LogicalTypes.md decide which element is the list's.
bool list_levels(const std::vector<SchemaElement>& s, std::size_t i, int def, TopColumn& col,
                 int depth) {
  if (depth > 8 || i >= s.size()) return false;
  const SchemaElement& e = s[i];
  if (e.repetition == 2) {  // a repeated primitive: a required list of required values
    if (e.num_children != 0 || !e.type) return false;
    col.lists.defined.push_back(def);
    col.lists.filled.push_back(def + 1);
    col.lists.value_def = def + 1;
    col.list_element = &e;
    return true;
  }
  if (!is_list_group(e) || i + 1 >= s.size()) return false;
  const int defined = def + (e.repetition == 1 ? 1 : 0);
  const SchemaElement& rep = s[i + 1];
  if (rep.repetition != 2) return false;
  col.lists.defined.push_back(defined);
  col.lists.filled.push_back(defined + 1);
  if (rep.num_children == 0) {  // 2-level: the repeated field is the element, required
    if (!rep.type) return false;
    col.lists.value_def = defined + 1;
    col.list_element = &rep;
    return true;
  }
  // A repeated group of several fields, or named "array" or "<list>_tuple", is the element
  // itself: a struct, not read.
  if (rep.num_children != 1 || rep.name == "array" || rep.name == e.name + "_tuple" ||
      i + 2 >= s.size()) {
    return false;
  }
  const SchemaElement& el = s[i + 2];
  if (el.repetition == 2) return false;
  const int el_def = defined + 1 + (el.repetition == 1 ? 1 : 0);
  if (el.num_children == 0) {
    if (!el.type) return false;
    col.lists.value_def = el_def;
    col.list_element = &el;
    return true;
  }
  if (!is_list_group(el)) return false;
  return list_levels(s, i + 2, defined + 1, col, depth + 1);
}

}  // namespace

std::vector<TopColumn> top_columns(const std::vector<SchemaElement>& schema, std::size_t& leaves) {
  if (schema.empty()) throw ChunkError("the schema is empty");
  std::vector<TopColumn> out;
  leaves = 0;
  std::size_t i = 1;
  const std::int32_t n = schema[0].num_children;
  if (n <= 0) throw ChunkError("the schema's root has no columns");
  for (std::int32_t c = 0; c < n; ++c) {
    if (i >= schema.size()) throw ChunkError("the schema's root has more columns than elements");
    TopColumn col;
    col.name = schema[i].name;
    col.leaf = leaves;
    col.element = &schema[i];
    col.nested = schema[i].num_children != 0 || !schema[i].type || schema[i].repetition == 2;
    col.max_def = schema[i].repetition == 1 ? 1 : 0;
    if (schema[i].num_children > 0) find_image(schema, i, leaves, col);
    if (col.nested && !list_levels(schema, i, 0, col, 0)) {
      col.lists = {};
      col.list_element = nullptr;
    }
    if (col.depth() > 0) col.max_def = col.lists.value_def;
    i = skip_tree(schema, i, leaves, 0);
    out.push_back(std::move(col));
  }
  return out;
}

std::string in_quotes(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(name.size() + 2);
  out += '"';
  for (const char ch : name) {
    const auto b = static_cast<unsigned char>(ch);
    if (b < 0x20 || b == 0x7f || ch == '"' || ch == '\\') {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

std::string columns_text(const std::vector<std::string_view>& names) {
  constexpr std::size_t kShown = 32;
  std::string out = " (its columns: ";
  for (std::size_t i = 0; i < names.size() && i < kShown; ++i) {
    if (i > 0) out += ", ";
    out += in_quotes(names[i]);
  }
  if (names.size() > kShown) out += ", and " + std::to_string(names.size() - kShown) + " more";
  return out + ")";
}

bool listed(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

void check_table_audio(const TableOptions& o, const std::string& who) {
  check_audio_options(o.audio_options);
  if (o.audio.empty()) return;
  const AudioOptions& a = o.audio_options;
  if (a.sample_rate == 0 || a.channels == 0 || !(a.clip_seconds > 0)) {
    throw ConfigError(who +
                      ": audio columns need audio_options with sample_rate and channels "
                      "given (not 0) and clip_seconds > 0 (whole sound files of a table are "
                      "not read yet)");
  }
}

void check_column_lists(const TableOptions& o, const std::string& who) {
  std::set<std::string> seen;
  for (const auto& c : o.columns) {
    if (!seen.insert(c).second) {
      throw ConfigError(who + ": column " + in_quotes(c) + " listed twice");
    }
  }
  for (const auto* list : {&o.categorical, &o.images, &o.audio}) {
    const std::string kind = list == &o.images  ? "image"
                             : list == &o.audio ? "audio"
                                                : "categorical";
    seen.clear();
    for (const auto& c : *list) {
      if (!seen.insert(c).second) {
        throw ConfigError(who + ": " + kind + " column " + in_quotes(c) + " listed twice");
      }
      if (!o.columns.empty() && !listed(o.columns, c)) {
        throw ConfigError(who + ": " + kind + " column " + in_quotes(c) +
                          " is not among the columns read (TableOptions::columns)");
      }
    }
  }
  for (const auto& c : o.images) {
    if (listed(o.categorical, c)) {
      throw ConfigError(who + ": column " + in_quotes(c) + " is both an image and categorical");
    }
  }
  for (const auto& c : o.audio) {
    if (listed(o.categorical, c) || listed(o.images, c)) {
      throw ConfigError(who + ": column " + in_quotes(c) + " is both audio and " +
                        (listed(o.images, c) ? "an image" : "categorical"));
    }
  }
  if (!o.images.empty()) static_cast<void>(image_shape(o.image));
  check_table_audio(o, who);
}

std::string type_text(const TopColumn& column) {
  if (column.list_element != nullptr) {  // list<list<INT32 (INTEGER(8, signed))>>
    TopColumn element;
    element.element = column.list_element;
    std::string text;
    for (std::size_t k = 0; k < column.depth(); ++k) text += "list<";
    text += type_text(element);
    for (std::size_t k = 0; k < column.depth(); ++k) text += '>';
    return text;
  }
  const SchemaElement& e = *column.element;
  std::string text;
  if (column.nested) {
    text = e.repetition == 2 ? "repeated " : "group";
    if (e.repetition == 2 && e.type) {
      const auto t = static_cast<std::size_t>(*e.type);
      text += t < std::size(kPhysical) ? kPhysical[t] : "?";
    }
  } else {
    const auto t = static_cast<std::size_t>(*e.type);
    if (t < std::size(kPhysical)) {
      text = kPhysical[t];
    } else {
      text = "physical type ";
      text += std::to_string(t);
    }
  }
  const auto l = static_cast<std::size_t>(e.logical.which);
  if (e.logical.which != 0 && l < std::size(kLogical) && kLogical[l][0] != '\0') {
    text += " (";
    text += kLogical[l];
    if (e.logical.which == 10) {
      text += '(';
      text += std::to_string(e.logical.bit_width);
      text += e.logical.is_signed ? ", signed)" : ", unsigned)";
    }
    text += ')';
  } else if (e.converted && *e.converted >= 0 &&
             static_cast<std::size_t>(*e.converted) < std::size(kConverted)) {
    text += " (";
    text += kConverted[static_cast<std::size_t>(*e.converted)];
    text += ')';
  }
  return text;
}

std::optional<DType> list_dtype(const TopColumn& column) {
  if (column.list_element == nullptr || *column.list_element->type == Physical::byte_array) {
    return std::nullopt;
  }
  TopColumn element;
  element.element = column.list_element;
  return scalar_dtype(element);
}

std::optional<DType> scalar_dtype(const TopColumn& column) {
  if (column.nested) return std::nullopt;
  const SchemaElement& e = *column.element;
  switch (*e.type) {
    case Physical::boolean:
      return e.logical.which == 0 && !e.converted ? std::optional(DType::u8) : std::nullopt;
    case Physical::float32:
      return e.logical.which == 0 && !e.converted ? std::optional(DType::f32) : std::nullopt;
    case Physical::float64:
      return e.logical.which == 0 && !e.converted ? std::optional(DType::f64) : std::nullopt;
    case Physical::int32: {
      const auto a = int_annotation(e);
      if (!a) return std::nullopt;
      if (a->bits == 0 || (a->bits == 32 && a->is_signed)) return DType::i32;
      if (a->bits == 8) return a->is_signed ? DType::i8 : DType::u8;
      if (a->bits == 16) return a->is_signed ? DType::i16 : DType::u16;
      if (a->bits == 32) return DType::u32;
      return std::nullopt;
    }
    case Physical::int64: {
      const auto a = int_annotation(e);
      if (!a) return std::nullopt;
      if (a->bits == 0 || a->bits == 64) return a->is_signed ? DType::i64 : DType::u64;
      return std::nullopt;
    }
    case Physical::fixed_len_byte_array:
      // FLOAT16: IEEE binary16, little-endian, in 2 bytes. No other FIXED_LEN_BYTE_ARRAY is
      // read (so physical_width() can take this type's width as 2).
      return e.logical.which == 15 && e.type_length == 2 ? std::optional(DType::f16) : std::nullopt;
    case Physical::byte_array: {
      // Bytes, text, JSON, BSON, an enum: read as bytes. DECIMAL and others are not.
      const int l = e.logical.which;
      if (l == 0 && e.converted) {
        const int c = *e.converted;
        return c == 0 || c == 4 || c == 19 || c == 20 ? std::optional(DType::u8) : std::nullopt;
      }
      return l == 0 || l == 1 || l == 4 || l == 12 || l == 13 ? std::optional(DType::u8)
                                                              : std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace ferry::detail::parquet
