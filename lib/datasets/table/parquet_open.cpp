// ParquetDataset::open(): the files' footers read, their schemas mapped to fields, the index of
// row groups built, and what must be known of every row before a loader is made (the
// categories of categorical columns, the lengths of byte-array columns) read once.

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "datasets/remote/remote_cache.hpp"
#include "datasets/table/hf_features.hpp"
#include "datasets/table/parquet_ahead.hpp"
#include "datasets/table/parquet_lists.hpp"
#include "datasets/table/parquet_schema.hpp"
#include "datasets/table/parquet_table.hpp"
#include "datasets/table/thrift_compact.hpp"
#include "ferry/error.hpp"
#include "ferry/image.hpp"

namespace ferry::detail {
namespace {

using parquet::ChunkError;
using parquet::in_quotes;
using parquet::listed;
using parquet::TopColumn;

constexpr std::string_view kParquetOpenWho = "ParquetDataset";
constexpr std::uint64_t kParquetTail = std::uint64_t{64} << 10;  // a URL's last bytes read first

/// The footer's metadata, and where the data ends. A URL's footer comes by ranges: its last
/// kParquetTail bytes, then (a longer footer) the rest.
parquet::FileMetaData read_footer(const ParquetFile& f, std::size_t& data_end) {
  const FileLabel label{kParquetOpenWho, f.name};
  std::vector<std::byte> fetched;   // a URL's last bytes
  std::span<const std::byte> tail;  // the file's last bytes (a local file's: all of them)
  std::uint64_t size = 0;
  if (f.remote) {
    fetched = f.remote->tail(kParquetTail);
    tail = fetched;
    size = f.remote->size();
  } else {
    tail = f.map->bytes();
    size = tail.size();
  }
  if (size < 12 || tail.size() < std::min<std::uint64_t>(size, 12)) {
    throw DataError(label.prefix() + "footer: a file of " + std::to_string(size) +
                    " bytes is too short for Parquet (at least 12)");
  }
  // A URL's first bytes are not fetched for their magic alone (unless the tail holds them).
  const bool start_known = tail.size() == size;
  if ((start_known && std::memcmp(tail.data(), "PAR1", 4) != 0) ||
      std::memcmp(tail.data() + tail.size() - 4, "PAR1", 4) != 0) {
    throw DataError(label.prefix() + "footer: not a Parquet file (no PAR1 at its " +
                    (start_known ? "start and end)" : "end)"));
  }
  std::uint32_t len = 0;
  std::memcpy(&len, tail.data() + tail.size() - 8, 4);
  if (len > size - 12) {
    throw DataError(label.prefix() + "footer: its length " + std::to_string(len) +
                    " is more than the file holds (" + std::to_string(size) +
                    " bytes): a truncated file?");
  }
  data_end = static_cast<std::size_t>(size - 8 - len);
  std::span<const std::byte> meta;
  if (std::uint64_t{len} + 8 <= tail.size()) {
    meta = tail.subspan(tail.size() - 8 - len, len);
  } else {  // a URL's footer longer than its tail: the rest of it
    std::vector<std::byte> whole = f.remote->read(data_end, len + 8 - tail.size());
    whole.insert(whole.end(), tail.begin(), tail.end() - 8);
    fetched = std::move(whole);
    meta = fetched;
  }
  try {
    return parquet::parse_file_metadata(meta);
  } catch (const thrift::ThriftError& e) {
    throw DataError(label.prefix() + "footer (byte " + std::to_string(data_end) +
                    "): corrupt metadata: " + e.what());
  }
}

/// Where the values of column `c` lie when it is read as `kind`: its leaf and definition level;
/// nothing for a column whose type it cannot be read as.
std::optional<TableLeaf> column_leaf(const TopColumn& c, TableField kind) {
  if (kind == TableField::list || c.depth() > 0) {
    if (kind != TableField::list || c.depth() == 0 || !parquet::list_dtype(c)) return std::nullopt;
    return TableLeaf{c.leaf, c.max_def, c.lists};
  }
  if (kind == TableField::image || kind == TableField::audio) {
    if (c.image_leaf >= 0)
      return TableLeaf{static_cast<std::size_t>(c.image_leaf), c.image_def, {}};
    if (c.nested || *c.element->type != parquet::Physical::byte_array) return std::nullopt;
  }
  if (!parquet::scalar_dtype(c)) return std::nullopt;
  return TableLeaf{c.leaf, c.max_def, {}};
}

/// The field of the stored Arrow schema named `name`, if any.
const arrow::Field* arrow_field(const std::optional<std::vector<arrow::Field>>& schema,
                                const std::string& name) {
  if (!schema) return nullptr;
  for (const arrow::Field& f : *schema) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

/// The shape of a list column (its dtype read too), from the file's stored Arrow schema.
/// \throws ConfigError for lists that ferry does not read.
std::vector<std::int64_t> list_column_shape(const TopColumn& c,
                                            const std::optional<std::vector<arrow::Field>>& schema,
                                            const std::string& file) {
  const std::string what = std::string(kParquetOpenWho) + ": " + file + ": column " +
                           in_quotes(c.name) + " is of type " + parquet::type_text(c);
  std::optional<std::vector<std::int64_t>> shape;
  if (parquet::list_dtype(c)) shape = parquet::list_shape(c, arrow_field(schema, c.name), what);
  if (!shape) {
    throw ConfigError(what + ", which ferry does not read" +
                      (c.depth() > 1 && parquet::list_dtype(c)
                           ? " (lists inside lists are read when the Arrow schema stored in the "
                             "file (ARROW:schema) makes them fixed_size_list, all but the first)"
                           : ""));
  }
  return *shape;
}

/// The field a column becomes. \throws ConfigError for a type not read.
TableColumn map_column(const TopColumn& c, const TableOptions& o,
                       const std::optional<std::vector<arrow::Field>>& schema,
                       const std::string& file) {
  TableColumn col;
  col.name = c.name;
  if (listed(o.images, c.name)) {
    if (!column_leaf(c, TableField::image)) {
      throw ConfigError(std::string(kParquetOpenWho) + ": column " + in_quotes(c.name) +
                        " is of type " + parquet::type_text(c) +
                        ", not an image column (BYTE_ARRAY, or a struct{bytes, path} of them)");
    }
    col.kind = TableField::image;
    col.physical = parquet::Physical::byte_array;
    col.dtype = DType::u8;
    return col;
  }
  if (listed(o.audio, c.name)) {
    if (!column_leaf(c, TableField::audio)) {
      throw ConfigError(std::string(kParquetOpenWho) + ": column " + in_quotes(c.name) +
                        " is of type " + parquet::type_text(c) +
                        ", not an audio column (BYTE_ARRAY, or a struct{bytes, path} of them)");
    }
    col.kind = TableField::audio;
    col.physical = parquet::Physical::byte_array;
    col.dtype = DType::f32;
    return col;
  }
  const bool categorical = listed(o.categorical, c.name);
  if (c.depth() > 0) {
    col.shape = list_column_shape(c, schema, file);
    if (categorical) {
      throw ConfigError(std::string(kParquetOpenWho) + ": categorical column " + in_quotes(c.name) +
                        " is of type " + parquet::type_text(c) +
                        ", not text (BYTE_ARRAY): only text columns are categorical");
    }
    col.kind = TableField::list;
    col.physical = *c.list_element->type;
    col.dtype = *parquet::list_dtype(c);
    return col;
  }
  const auto dtype = parquet::scalar_dtype(c);
  if (!dtype) {
    throw ConfigError(std::string(kParquetOpenWho) + ": column " + in_quotes(c.name) +
                      " is of type " + parquet::type_text(c) + ", which ferry does not read" +
                      (c.image_leaf >= 0
                           ? " (a struct{bytes, path}, as Hugging Face's Image: name it in "
                             "TableOptions::images, images= in Python, to decode it)"
                           : ""));
  }
  col.physical = *c.element->type;
  col.dtype = *dtype;
  if (col.physical == parquet::Physical::byte_array) {
    col.kind = categorical ? TableField::categorical : TableField::bytes;
    col.dtype = categorical ? DType::i64 : DType::u8;
  } else if (categorical) {
    throw ConfigError(std::string(kParquetOpenWho) + ": categorical column " + in_quotes(c.name) +
                      " is of type " + parquet::type_text(c) +
                      ", not text (BYTE_ARRAY): only text columns are categorical");
  }
  return col;
}

void check_parquet_options(const std::vector<std::filesystem::path>& files, const TableOptions& o) {
  const std::string w(kParquetOpenWho);
  if (files.empty()) throw ConfigError(w + ": no files");
  if (std::any_of(files.begin(), files.end(),
                  [](const auto& f) { return remote::is_url(f.string()); })) {
    remote::check_options(o.remote, kParquetOpenWho);
  }
  parquet::check_column_lists(o, w);
}

void index_file(ParquetTable& t, ParquetFile& f, bool first) {
  std::size_t data_end = 0;
  parquet::FileMetaData meta = read_footer(f, data_end);
  std::size_t leaves = 0;
  std::vector<TopColumn> top;
  try {
    top = parquet::top_columns(meta.schema, leaves);
  } catch (const ChunkError& e) {
    throw DataError(FileLabel{kParquetOpenWho, f.name}.prefix() + "footer: " + e.what());
  }
  // The stored Arrow schema is parsed only for what needs it: the shapes of the list columns read.
  const bool lists_read = std::any_of(top.begin(), top.end(), [&](const TopColumn& c) {
    return c.depth() > 0 && (t.options.columns.empty() || listed(t.options.columns, c.name));
  });
  const std::optional<std::vector<arrow::Field>> schema =
      lists_read ? parquet::stored_arrow_schema(meta.arrow_schema) : std::nullopt;
  std::set<std::string_view> names;
  for (const TopColumn& c : top) {
    if (!names.insert(c.name).second) {
      throw DataError(FileLabel{kParquetOpenWho, f.name}.prefix() + "footer: two columns named " +
                      in_quotes(c.name));
    }
  }
  std::vector<std::string_view> top_names;
  top_names.reserve(top.size());
  for (const TopColumn& c : top) top_names.push_back(c.name);
  if (first) {
    const auto has = [&](const std::string& name) {
      return std::any_of(top.begin(), top.end(),
                         [&](const TopColumn& c) { return c.name == name; });
    };
    add_hf_images(t.options, meta.huggingface, has);
    add_hf_audio(t.options, meta.huggingface, has);
    parquet::check_table_audio(t.options, std::string(kParquetOpenWho));
    const TableOptions& o = t.options;
    for (const auto& name : o.columns) {
      if (std::none_of(top.begin(), top.end(),
                       [&](const TopColumn& c) { return c.name == name; })) {
        throw ConfigError(std::string(kParquetOpenWho) + ": " + f.name + ": no column " +
                          in_quotes(name) + parquet::columns_text(top_names));
      }
    }
    for (const auto* list : {&o.categorical, &o.images, &o.audio}) {
      for (const auto& name : *list) {
        if (std::none_of(top.begin(), top.end(),
                         [&](const TopColumn& c) { return c.name == name; })) {
          throw ConfigError(std::string(kParquetOpenWho) + ": " + f.name + ": no " +
                            (list == &o.images  ? "image"
                             : list == &o.audio ? "audio"
                                                : "categorical") +
                            " column " + in_quotes(name) + parquet::columns_text(top_names));
        }
      }
    }
    if (o.columns.empty()) {
      for (const TopColumn& c : top) t.columns.push_back(map_column(c, o, schema, f.name));
    } else {
      for (const auto& name : o.columns) {
        for (const TopColumn& c : top) {
          if (c.name == name) t.columns.push_back(map_column(c, o, schema, f.name));
        }
      }
    }
  }
  if (!first && t.options.columns.empty()) {  // every column read: none of this file's is dropped
    for (const TopColumn& c : top) {
      if (std::none_of(t.columns.begin(), t.columns.end(),
                       [&](const TableColumn& col) { return col.name == c.name; })) {
        throw ConfigError(std::string(kParquetOpenWho) + ": " + f.name + ": column " +
                          in_quotes(c.name) + ", which " + t.files[0].name +
                          " has not (every column is read: the files' schemas differ)");
      }
    }
  }
  for (const TableColumn& col : t.columns) {
    const auto it = std::find_if(top.begin(), top.end(),
                                 [&](const TopColumn& c) { return c.name == col.name; });
    if (it == top.end()) {
      throw ConfigError(std::string(kParquetOpenWho) + ": " + f.name + ": no column " +
                        in_quotes(col.name) + ", which " + t.files[0].name + " has" +
                        parquet::columns_text(top_names));
    }
    const auto dtype = parquet::scalar_dtype(*it);
    const auto leaf = column_leaf(*it, col.kind);
    const bool list = col.kind == TableField::list;
    if (!leaf ||
        (list ? *it->list_element->type != col.physical || parquet::list_dtype(*it) != col.dtype ||
                    list_column_shape(*it, schema, f.name) != col.shape
              : (col.kind != TableField::image && col.kind != TableField::audio &&
                 *it->element->type != col.physical) ||
                    (col.kind == TableField::scalar && *dtype != col.dtype))) {
      throw ConfigError(std::string(kParquetOpenWho) + ": " + f.name + ": column " +
                        in_quotes(col.name) + " is of type " + parquet::type_text(*it) +
                        ", not as in " + t.files[0].name);
    }
    f.leaves.push_back(*leaf);
  }
  f.groups = std::move(meta.row_groups);
  std::size_t file_row = 0;
  for (std::size_t g = 0; g < f.groups.size(); ++g) {
    check_chunks(f, g, data_end, t.columns, leaves);
    const auto rows = static_cast<std::size_t>(f.groups[g].num_rows);
    if (rows == 0) continue;
    t.groups.push_back({static_cast<std::size_t>(&f - t.files.data()), g, t.size, rows, file_row});
    t.size += rows;
    file_row += rows;
  }
  check_chunks_apart(f, t.columns);
}

/// Categories and lengths: what a loader asks of every row before it reads any.
void scan_rows(ParquetTable& t) {
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    TableColumn& col = t.columns[c];
    if (col.kind == TableField::scalar || col.kind == TableField::image ||
        col.kind == TableField::audio || (col.kind == TableField::list && !col.ragged())) {
      continue;
    }
    std::set<std::string, std::less<>> distinct;
    for (std::size_t g = 0; g < t.groups.size(); ++g) try {
        // A URL's chunk, kept for the row group's first decode.
        const bool remote = t.files[t.groups[g].file].remote != nullptr;
        std::vector<std::byte> bytes = remote ? t.fetch_chunk(g, c) : std::vector<std::byte>{};
        // Byte arrays' sizes alone (not their bytes: a dictionary value repeated by every row
        // would be made once a row); a categorical column's values, up to 1 GiB a chunk.
        parquet::RawColumn shape;
        shape.sizes_only = col.kind == TableField::bytes;
        shape.max_bytes = std::size_t{1} << 30;
        const parquet::RawColumn raw = t.decode_raw(g, c, bytes, shape);
        if (col.kind == TableField::list) {
          col.lengths.insert(col.lengths.end(), raw.lengths.begin(), raw.lengths.end());
          for (const std::uint32_t n : raw.lengths) {
            col.max_length = std::max<std::int64_t>(col.max_length, n);
          }
        }
        for (std::size_t r = 0; r < raw.rows && col.kind != TableField::list; ++r) {
          if (col.kind == TableField::bytes) {
            const std::size_t size = raw.size(r);
            if (size > std::numeric_limits<std::uint32_t>::max()) {
              throw DataError(std::string(kParquetOpenWho) + ": " + t.files[t.groups[g].file].name +
                              ": row group " + std::to_string(t.groups[g].group) + ", column " +
                              in_quotes(col.name) + ": a value of more than 4 GiB");
            }
            col.lengths.push_back(static_cast<std::uint32_t>(size));
            col.max_length =
                std::max<std::int64_t>(col.max_length, static_cast<std::int64_t>(size));
          } else if (raw.is_valid(r)) {
            const auto v = raw.value(r);
            const std::string_view text(reinterpret_cast<const char*>(v.data()), v.size());
            if (distinct.find(text) == distinct.end()) distinct.emplace(text);
          }
        }
        if (remote) t.keep_chunk(g, c, std::move(bytes));
      } catch (const std::bad_alloc&) {
        // Pages of a few bytes may claim a billion empty values: 4 bytes a row for their lengths.
        throw DataError(std::string(kParquetOpenWho) + ": " + t.files[t.groups[g].file].name +
                        ": row group " + std::to_string(t.groups[g].group) + ", column " +
                        in_quotes(col.name) +
                        ": out of memory reading its rows' lengths at open (" +
                        std::to_string(col.lengths.size()) +
                        " rows read; 4 bytes a row for each ragged field)");
      }
    if (col.kind == TableField::categorical)
      col.categories.assign(distinct.begin(), distinct.end());
  }
}

}  // namespace

std::unique_ptr<ParquetTable> open_parquet(std::vector<std::filesystem::path> files,
                                           TableOptions options) {
  check_parquet_options(files, options);
  static std::atomic<std::uint64_t> next_id{1};
  auto t = std::make_unique<ParquetTable>();
  t->id = next_id.fetch_add(1);
  t->options = std::move(options);
  t->files.resize(files.size());
  for (std::size_t i = 0; i < files.size(); ++i) {
    ParquetFile& f = t->files[i];
    f.name = files[i].string();
    if (remote::is_url(f.name)) {
      f.remote = std::make_unique<remote::RangeReader>(f.name, t->options.remote, kParquetOpenWho);
    } else {
      f.map = std::make_unique<MappedFile>(files[i], FileLabel{kParquetOpenWho, f.name}, false);
    }
    index_file(*t, f, i == 0);
  }
  if (t->columns.empty()) throw ConfigError(std::string(kParquetOpenWho) + ": no columns to read");
  if (t->size == 0)
    throw DataError(std::string(kParquetOpenWho) + ": " + t->files[0].name + ": no rows");
  for (const TableGroup& g : t->groups) t->starts.push_back(g.first);
  t->starts.push_back(t->size);
  for (const TableColumn& col : t->columns) {
    if (col.kind == TableField::image) {
      t->fields.push_back(image_field(t->options.image, col.name));
      continue;
    }
    if (col.kind == TableField::audio) {
      t->fields.push_back(
          audio_field(t->options.audio_options, t->options.audio_options.channels, col.name));
      continue;
    }
    FieldSpec f{col.name, col.dtype, {}};
    if (col.kind == TableField::bytes) f.shape = {ragged};
    if (col.kind == TableField::list) f.shape = col.shape;  // -1 is `ragged`
    t->fields.push_back(std::move(f));
  }
  scan_rows(*t);
  for (std::size_t g = 0; g < t->groups.size(); ++g) {
    const std::size_t decoded = estimated_decoded_bytes(*t, g);
    t->largest_decoded = std::max(t->largest_decoded, decoded);
    t->total_decoded += decoded;
    t->largest_scratch = std::max(t->largest_scratch, decode_scratch_bytes(*t, g));
  }
  t->cache.set_largest(t->largest_decoded);
  if (std::any_of(t->files.begin(), t->files.end(),
                  [](const ParquetFile& f) { return f.remote != nullptr; })) {
    t->ahead = std::make_unique<AheadFetcher>(*t);
  }
  return t;
}

}  // namespace ferry::detail
