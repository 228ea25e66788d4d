// ArrowDataset::open(): each file's schema read (the stream's first message, or the file
// format's footer), its columns mapped to fields, its record batches indexed (the footer's
// blocks, or one pass over the stream's messages) and its dictionaries read; then what must be
// known of every row before a loader is made (categories, ragged lengths).

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>

#include "datasets/remote/remote_cache.hpp"
#include "datasets/table/arrow_ahead.hpp"
#include "datasets/table/arrow_table.hpp"
#include "datasets/table/hf_features.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"

namespace ferry::detail {
namespace {

using ArrowField = arrow::Field;  // not `Field`: csv/ has one, and a unity unit may see both
using arrow::FormatError;
using arrow::TypeId;
using parquet::in_quotes;
using parquet::listed;

constexpr std::string_view kArrowOpenWho = "ArrowDataset";
constexpr std::int64_t kMaxRowValues = std::int64_t{1} << 31;  // leaf values in one row

bool is_binary(const ArrowField& f) {
  return f.type == TypeId::binary || f.type == TypeId::utf8 || f.type == TypeId::large_binary ||
         f.type == TypeId::large_utf8;
}
bool is_large(const ArrowField& f) {
  return f.type == TypeId::large_binary || f.type == TypeId::large_utf8 ||
         f.type == TypeId::large_list;
}

/// Arrays in `f`'s pre-order (a dictionary-encoded field is one: its indices).
std::size_t subtree(const ArrowField& f) {
  std::size_t n = 1;
  if (!f.dictionary) {
    for (const ArrowField& c : f.children) n += subtree(c);
  }
  return n;
}

/// Fixed-size lists down to a scalar: the sizes into col.inner, the leaf's type; false when
/// `f` is not one.
bool fixed_values(const ArrowField& top, ArrowColumn& col, std::size_t depth) {
  const ArrowField* f = &top;
  std::int64_t values = 1;
  while (f->type == TypeId::fixed_size_list && !f->dictionary) {
    if (f->children.size() != 1 || f->list_size < 0) return false;
    col.inner.push_back(f->list_size);
    values *= std::max(f->list_size, 1);
    if (values > kMaxRowValues) return false;
    f = &f->children[0];
    ++depth;
  }
  const auto dtype = scalar_dtype(*f);
  if (!dtype) return false;
  col.dtype = *dtype;
  col.width = f->type == TypeId::boolean ? 0 : dtype_size(*dtype);
  col.leaf = depth;
  col.per_row = 1;
  for (const std::int64_t n : col.inner) col.per_row *= static_cast<std::size_t>(n);
  return true;
}

/// The column field `f` becomes. \throws ConfigError for a type not read.
ArrowColumn map_column(const ArrowField& f, const TableOptions& o) {
  ArrowColumn col;
  col.name = f.name;
  col.field = f;
  const std::string what = std::string(kArrowOpenWho) + ": column " + in_quotes(f.name) +
                           " is of type " + arrow::type_text(f);
  const bool audio = listed(o.audio, f.name);
  if (audio || listed(o.images, f.name)) {
    col.kind = audio ? ArrowKind::audio : ArrowKind::image;
    col.dtype = audio ? DType::f32 : DType::u8;
    if (is_binary(f) && !f.dictionary) {
      col.large = is_large(f);
      return col;
    }
    if (f.type == TypeId::struct_ && !f.dictionary) {
      std::size_t at = 1;
      for (const ArrowField& c : f.children) {
        if (c.name == "bytes" && is_binary(c) && !c.dictionary) {
          col.leaf = at;
          col.large = is_large(c);
          return col;
        }
        at += subtree(c);
      }
    }
    throw ConfigError(what + (audio ? ", not an audio column" : ", not an image column") +
                      " (binary, or a struct{bytes: binary, path})");
  }
  if (f.dictionary) {
    if (!is_binary(f)) throw ConfigError(what + ", which ferry does not read");
    col.kind = ArrowKind::dictionary;
    col.dtype = DType::i64;
    col.large = is_large(f);
    return col;
  }
  if (listed(o.categorical, f.name)) {
    if (!is_binary(f)) {
      throw ConfigError(what + ", not text: only string columns are categorical");
    }
    col.kind = ArrowKind::categorical;
    col.dtype = DType::i64;
    col.large = is_large(f);
    return col;
  }
  if (is_binary(f)) {
    col.kind = ArrowKind::bytes;
    col.dtype = DType::u8;
    col.large = is_large(f);
    return col;
  }
  if (map_hf_array(f, col, what)) return col;
  if ((f.type == TypeId::list || f.type == TypeId::large_list) && f.children.size() == 1) {
    col.kind = ArrowKind::list;
    col.large = is_large(f);
    if (fixed_values(f.children[0], col, 1)) return col;
  } else if (fixed_values(f, col, 0)) {
    return col;
  }
  const bool image_like =
      f.type == TypeId::struct_ && !f.dictionary &&
      std::any_of(f.children.begin(), f.children.end(), [](const ArrowField& c) {
        return c.name == "bytes" && is_binary(c) && !c.dictionary;
      });
  throw ConfigError(what + ", which ferry does not read" +
                    (image_like ? " (a struct with binary bytes, as Hugging Face's Image: name it "
                                  "in TableOptions::images, images= in Python, to decode it)"
                                : ""));
}

bool same_type(const ArrowField& a, const ArrowField& b) {
  return arrow::type_text(a) == arrow::type_text(b) && a.index_bits == b.index_bits &&
         a.index_signed == b.index_signed;
}

void check_arrow_options(const std::vector<std::filesystem::path>& files, const TableOptions& o) {
  const std::string w(kArrowOpenWho);
  if (files.empty()) throw ConfigError(w + ": no files");
  if (std::any_of(files.begin(), files.end(),
                  [](const auto& f) { return remote::is_url(f.string()); })) {
    remote::check_options(o.remote, w);
  }
  parquet::check_column_lists(o, w);
}

/// The file format: the footer's schema and blocks.
void index_file_format(ArrowTable& t, ArrowFile& f, bool first) {
  const FileLabel label{kArrowOpenWho, f.name};
  const auto bytes = f.map->bytes();
  arrow::Footer footer;
  try {
    if (bytes.size() < 18 || std::memcmp(bytes.data() + bytes.size() - 6, "ARROW1", 6) != 0) {
      throw FormatError("no ARROW1 at the file's end: a truncated file?");
    }
    std::int32_t length = 0;
    std::memcpy(&length, bytes.data() + bytes.size() - 10, 4);
    if (length <= 0 || static_cast<std::size_t>(length) > bytes.size() - 18) {
      throw FormatError("a length of " + std::to_string(length) + " in a file of " +
                        std::to_string(bytes.size()) + " bytes");
    }
    const auto n = static_cast<std::size_t>(length);
    footer = arrow::parse_footer(bytes.subspan(bytes.size() - 10 - n, n));
  } catch (const FormatError& e) {
    throw DataError(label.prefix() + "footer: " + e.what());
  }
  f.schema = std::move(footer.schema.fields);
  f.huggingface = std::move(footer.schema.huggingface);
  map_schema(t, f, first);
  std::size_t file_row = 0;
  std::size_t number = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const auto& blocks = pass == 0 ? footer.dictionaries : footer.batches;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      const arrow::Block& bl = blocks[i];
      try {
        if (bl.offset < 8 || static_cast<std::uint64_t>(bl.offset) >= bytes.size()) {
          throw FormatError("at byte " + std::to_string(bl.offset) + ", outside the file");
        }
        const arrow::Frame fr = arrow::read_frame(bytes, static_cast<std::size_t>(bl.offset));
        const auto want =
            pass == 0 ? arrow::HeaderType::dictionary_batch : arrow::HeaderType::record_batch;
        if (fr.end || fr.message.type != want) throw FormatError("not the message it should be");
        if (pass == 0) {
          add_dictionary(t, f, fr.message, bytes.subspan(fr.body, fr.next - fr.body));
        } else {
          add_batch(t, f, fr, i, file_row, number);
        }
      } catch (const FormatError& e) {
        throw DataError(
            label.prefix() + "footer: " + (pass == 0 ? "dictionary " : "record batch ") +
            std::to_string(i) + " (byte " + std::to_string(bl.offset) + "): " + e.what());
      }
    }
  }
}

/// The stream format: one pass over its messages.
void index_stream(ArrowTable& t, ArrowFile& f, bool first) {
  const FileLabel label{kArrowOpenWho, f.name};
  const auto bytes = f.map->bytes();
  std::size_t at = 0;
  std::size_t file_row = 0;
  std::size_t number = 0;
  for (std::size_t m = 0;; ++m) {
    try {
      const arrow::Frame fr = arrow::read_frame(bytes, at);
      if (fr.end) {
        if (m == 0) throw FormatError("no schema: an empty stream");
        break;
      }
      if ((m == 0) != (fr.message.type == arrow::HeaderType::schema)) {
        throw FormatError(m == 0 ? "the stream does not start with its schema" : "a second schema");
      }
      if (m == 0) {
        f.schema = fr.message.schema.fields;
        f.huggingface = fr.message.schema.huggingface;
        map_schema(t, f, first);
      } else if (fr.message.type == arrow::HeaderType::dictionary_batch) {
        add_dictionary(t, f, fr.message, bytes.subspan(fr.body, fr.next - fr.body));
      } else {
        add_batch(t, f, fr, m, file_row, number);
      }
      at = fr.next;
    } catch (const FormatError& e) {
      throw DataError(label.prefix() + "message " + std::to_string(m) + " (byte " +
                      std::to_string(at) + "): " + e.what());
    }
  }
}

}  // namespace

std::optional<DType> scalar_dtype(const arrow::Field& f) {
  if (f.dictionary) return std::nullopt;
  if (f.type == arrow::TypeId::boolean) return DType::u8;
  if (f.type == arrow::TypeId::floating) {
    if (f.precision == 0) return DType::f16;
    if (f.precision == 1) return DType::f32;
    if (f.precision == 2) return DType::f64;
    return std::nullopt;
  }
  if (f.type != arrow::TypeId::int_) return std::nullopt;
  switch (f.bit_width) {
    case 8:
      return f.is_signed ? DType::i8 : DType::u8;
    case 16:
      return f.is_signed ? DType::i16 : DType::u16;
    case 32:
      return f.is_signed ? DType::i32 : DType::u32;
    case 64:
      return f.is_signed ? DType::i64 : DType::u64;
    default:
      return std::nullopt;
  }
}

void map_schema(ArrowTable& t, ArrowFile& f, bool first) {
  if (first) {
    const auto has = [&](const std::string& name) {
      return std::any_of(f.schema.begin(), f.schema.end(),
                         [&](const ArrowField& c) { return c.name == name; });
    };
    add_hf_images(t.options, f.huggingface, has);
    add_hf_audio(t.options, f.huggingface, has);
    parquet::check_table_audio(t.options, std::string(kArrowOpenWho));
  }
  const TableOptions& o = t.options;
  const auto find = [&](std::string_view name) {
    return std::find_if(f.schema.begin(), f.schema.end(),
                        [&](const ArrowField& c) { return c.name == name; });
  };
  std::set<std::string_view> names;
  for (const ArrowField& c : f.schema) {
    if (!names.insert(c.name).second) {
      throw DataError(FileLabel{kArrowOpenWho, f.name}.prefix() + "schema: two columns named " +
                      in_quotes(c.name));
    }
  }
  std::vector<std::string_view> schema_names;
  schema_names.reserve(f.schema.size());
  for (const ArrowField& c : f.schema) schema_names.push_back(c.name);
  if (first) {
    for (const auto* list : {&o.columns, &o.categorical, &o.images, &o.audio}) {
      for (const auto& name : *list) {
        if (find(name) == f.schema.end()) {
          throw ConfigError(std::string(kArrowOpenWho) + ": " + f.name + ": no column " +
                            in_quotes(name) + parquet::columns_text(schema_names));
        }
      }
    }
    std::size_t dictionaries = 0;
    const auto add = [&](const ArrowField& c) {
      t.columns.push_back(map_column(c, o));
      if (t.columns.back().kind == ArrowKind::dictionary)
        t.columns.back().dictionary = dictionaries++;
    };
    if (o.columns.empty()) {
      for (const ArrowField& c : f.schema) add(c);
    } else {
      for (const auto& name : o.columns) add(*find(name));
    }
  }
  if (!first && o.columns.empty()) {  // every column read: none of this file's is dropped
    for (const ArrowField& c : f.schema) {
      if (std::none_of(t.columns.begin(), t.columns.end(),
                       [&](const ArrowColumn& col) { return col.name == c.name; })) {
        throw ConfigError(std::string(kArrowOpenWho) + ": " + f.name + ": column " +
                          in_quotes(c.name) + ", which " + t.files[0].name +
                          " has not (every column is read: the files' schemas differ)");
      }
    }
  }
  std::size_t dictionaries = 0;
  for (const ArrowColumn& col : t.columns) {
    const auto it = find(col.name);
    if (it == f.schema.end()) {
      throw ConfigError(std::string(kArrowOpenWho) + ": " + f.name + ": no column " +
                        in_quotes(col.name) + ", which " + t.files[0].name + " has" +
                        parquet::columns_text(schema_names));
    }
    if (!same_type(*it, col.field)) {
      throw ConfigError(std::string(kArrowOpenWho) + ": " + f.name + ": column " +
                        in_quotes(col.name) + " is of type " + arrow::type_text(*it) + ", not " +
                        arrow::type_text(col.field) + " as in " + t.files[0].name);
    }
    f.tops.push_back(static_cast<std::size_t>(it - f.schema.begin()));
    if (col.kind == ArrowKind::dictionary) ++dictionaries;
  }
  f.dictionaries.resize(dictionaries);
}

void add_batch(ArrowTable& t, ArrowFile& f, const arrow::Frame& fr, std::size_t message,
               std::size_t& file_row, std::size_t& number) {
  ArrowBatch b;
  b.file = static_cast<std::size_t>(&f - t.files.data());
  b.number = number++;
  b.message = message;
  b.metadata = fr.metadata;
  b.metadata_length = fr.metadata_length;
  b.body = fr.body;
  b.body_length = fr.next - fr.body;
  b.rows = static_cast<std::size_t>(fr.message.batch.length);
  if (fr.message.batch.compression != arrow::Compression::none) t.compressed = true;
  for (const ArrowColumn& col : t.columns) {
    if (col.kind != ArrowKind::dictionary) continue;
    ArrowDictionary& d = f.dictionaries[col.dictionary];
    if (d.values.empty()) {
      throw FormatError("column " + in_quotes(col.name) + " has no dictionary before it");
    }
    b.dictionaries.push_back(static_cast<std::uint32_t>(d.values.size() - 1));
    d.last_used = true;
  }
  b.file_row = file_row;
  file_row += b.rows;
  if (b.rows == 0) return;
  b.first = t.size;
  t.size += b.rows;
  t.batches.push_back(std::move(b));
}

std::unique_ptr<ArrowTable> open_arrow(std::vector<std::filesystem::path> files,
                                       TableOptions options) {
  check_arrow_options(files, options);
  static std::atomic<std::uint64_t> next_id{1};
  auto t = std::make_unique<ArrowTable>();
  t->id = next_id.fetch_add(1);
  t->options = std::move(options);
  t->files.resize(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    ArrowFile& f = t->files[i];
    f.name = files[i].string();
    if (remote::is_url(f.name)) {
      f.remote = std::make_unique<remote::RangeReader>(f.name, t->options.remote, kArrowOpenWho);
      t->remote = true;
      index_remote(*t, f, i == 0);
      continue;
    }
    f.map = std::make_unique<MappedFile>(files[i], FileLabel{kArrowOpenWho, f.name}, false);
    const auto bytes = f.map->bytes();
    f.file_format = bytes.size() >= 8 && std::memcmp(bytes.data(), "ARROW1", 6) == 0;
    if (f.file_format) {
      index_file_format(*t, f, i == 0);
    } else {
      index_stream(*t, f, i == 0);
    }
  }
  if (t->columns.empty()) throw ConfigError(std::string(kArrowOpenWho) + ": no columns to read");
  if (t->size == 0)
    throw DataError(std::string(kArrowOpenWho) + ": " + t->files[0].name + ": no rows");
  for (const ArrowBatch& b : t->batches) t->starts.push_back(b.first);
  t->starts.push_back(t->size);
  number_dictionaries(*t);
  for (const ArrowColumn& col : t->columns) {
    if (col.kind == ArrowKind::image) {
      t->fields.push_back(image_field(t->options.image, col.name));
      continue;
    }
    if (col.kind == ArrowKind::audio) {
      t->fields.push_back(
          audio_field(t->options.audio_options, t->options.audio_options.channels, col.name));
      continue;
    }
    FieldSpec f{col.name, col.dtype, {}};
    if (col.kind == ArrowKind::list || col.kind == ArrowKind::bytes ||
        (col.kind == ArrowKind::array && col.shape[0] < 0)) {
      f.shape = {ragged};
    }
    if (col.kind == ArrowKind::list || col.kind == ArrowKind::scalar ||
        col.kind == ArrowKind::array) {
      f.shape.insert(f.shape.end(), col.inner.begin(), col.inner.end());
    }
    t->fields.push_back(std::move(f));
  }
  scan_rows(*t);
  if (t->compressed || t->remote) {
    for (std::size_t k = 0; k < t->batches.size(); ++k) {
      const ArrowBatch& b = t->batches[k];
      // A local file's: the columns' buffers as they decompress (the prefixes say; a forged one
      // is counted as the codec could make it, and costs only what the data makes when read). A
      // URL's: the body fetched, and its fixed-size columns decompressed beside it.
      std::size_t n = t->unpacked_bytes(k);
      if (!t->files[b.file].remote) {
        t->largest_decoded = std::max(t->largest_decoded, n);
        t->total_decoded += n;
        continue;
      }
      for (std::size_t c = 0; c < t->fields.size(); ++c) {
        const ArrowKind kind = t->columns[c].kind;
        if (kind != ArrowKind::image && kind != ArrowKind::audio && !t->fields[c].is_ragged()) {
          n += b.rows * t->fields[c].sample_bytes();
        }
      }
      t->largest_decoded = std::max(t->largest_decoded, n);
      t->total_decoded += n;
    }
  }
  t->cache.set_largest(t->largest_decoded);
  if (t->remote) t->ahead = std::make_unique<ArrowAhead>(*t);
  return t;
}

}  // namespace ferry::detail
