#include "datasets/table/arrow_format.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

#include "datasets/table/parquet_schema.hpp"

namespace ferry::detail::arrow {
namespace {

constexpr int kMaxDepth = 64;                // fields nested deeper are refused
constexpr std::size_t kMaxFields = 1 << 16;  // fields in one schema, children included

}  // namespace

template <class T>
T FlatTable::load(std::size_t at) const {
  if (at > buf_.size() || buf_.size() - at < sizeof(T)) {
    throw FormatError("a flatbuffer offset (" + std::to_string(at) + ") past its end (" +
                      std::to_string(buf_.size()) + " bytes)");
  }
  T v;
  std::memcpy(&v, buf_.data() + at, sizeof(T));
  return v;
}

FlatTable FlatTable::root(std::span<const std::byte> buf) {
  FlatTable t(buf, 0);
  return t;
}

FlatTable::FlatTable(std::span<const std::byte> buf, std::size_t pos) : buf_(buf) {
  if (pos == 0) {  // the root: the buffer starts with its offset
    pos = load<std::uint32_t>(0);
  }
  pos_ = pos;
  const auto soffset = static_cast<std::int64_t>(load<std::int32_t>(pos));
  const std::int64_t vtable = static_cast<std::int64_t>(pos) - soffset;
  if (vtable < 0 || static_cast<std::uint64_t>(vtable) >= buf.size()) {
    throw FormatError("a flatbuffer table's vtable lies outside the buffer");
  }
  vtable_ = static_cast<std::size_t>(vtable);
  vsize_ = load<std::uint16_t>(vtable_);
  const std::size_t tsize = load<std::uint16_t>(vtable_ + 2);
  if (vsize_ < 4 || vsize_ > buf.size() - vtable_ || tsize > buf.size() - pos_) {
    throw FormatError("a flatbuffer table or its vtable runs past the buffer");
  }
}

std::size_t FlatTable::field(int slot) const {
  const std::size_t v = 4 + 2 * static_cast<std::size_t>(slot);
  if (v + 2 > vsize_) return 0;
  const std::size_t off = load<std::uint16_t>(vtable_ + v);
  return off == 0 ? 0 : pos_ + off;
}

bool FlatTable::has(int slot) const { return field(slot) != 0; }

template <class T>
T FlatTable::scalar(int slot, T fallback) const {
  const std::size_t at = field(slot);
  return at == 0 ? fallback : load<T>(at);
}

std::size_t FlatTable::follow(std::size_t at) const {
  const std::uint64_t target = std::uint64_t{at} + load<std::uint32_t>(at);
  if (target >= buf_.size()) throw FormatError("a flatbuffer offset points past the buffer");
  return static_cast<std::size_t>(target);
}

std::optional<FlatTable> FlatTable::table(int slot) const {
  const std::size_t at = field(slot);
  if (at == 0) return std::nullopt;
  const std::size_t target = follow(at);
  if (target == 0) throw FormatError("a flatbuffer table at offset 0");
  return FlatTable(buf_, target);
}

FlatTable::Vector FlatTable::vector(int slot, std::size_t element_size) const {
  const std::size_t at = field(slot);
  if (at == 0) return {};
  const std::size_t v = follow(at);
  const std::uint64_t count = load<std::uint32_t>(v);
  if (count * element_size > buf_.size() - v - 4) {
    throw FormatError("a flatbuffer vector of " + std::to_string(count) +
                      " elements runs past the buffer");
  }
  return {static_cast<std::size_t>(count), v + 4};
}

FlatTable FlatTable::table_at(const Vector& v, std::size_t i) const {
  const std::size_t target = follow(v.at + 4 * i);
  if (target == 0) throw FormatError("a flatbuffer table at offset 0");
  return FlatTable(buf_, target);
}

std::string_view FlatTable::string(int slot) const {
  const Vector v = vector(slot, 1);
  return {reinterpret_cast<const char*>(buf_.data() + v.at), v.count};
}

namespace {

/// What parsing a schema may visit and copy: fields, key-value pairs and the bytes of the
/// strings kept, within a budget of twice the buffer's bytes. A flatbuffer may point at one
/// object many times (legally), so the work is counted, not the objects: a small schema whose
/// fields share one table of a million key-value pairs is refused instead of walked once per
/// reference.
struct Work {
  std::size_t fields = 0;
  std::size_t left = 0;
  void take(std::size_t n) {
    if (n > left) {
      throw FormatError(
          "the schema's objects, counted each time they are pointed at, are more "
          "than its bytes can hold (objects shared many times over)");
    }
    left -= n;
  }
};

Field parse_field(const FlatTable& t, int depth, Work& work) {
  if (depth > kMaxDepth) throw FormatError("the schema nests deeper than 64 levels");
  if (++work.fields > kMaxFields) throw FormatError("the schema has more than 65536 fields");
  Field f;
  const std::string_view name = t.string(0);
  work.take(1 + name.size());
  f.name = std::string(name);
  f.nullable = t.scalar<std::uint8_t>(1, 0) != 0;
  f.type = static_cast<TypeId>(t.scalar<std::uint8_t>(2, 0));
  if (const auto type = t.table(3)) {
    switch (f.type) {
      case TypeId::int_:
        f.bit_width = type->scalar<std::int32_t>(0, 0);
        f.is_signed = type->scalar<std::uint8_t>(1, 0) != 0;
        break;
      case TypeId::floating:
        f.precision = type->scalar<std::int16_t>(0, 0);
        break;
      case TypeId::fixed_size_list:
      case TypeId::fixed_size_binary:
        f.list_size = type->scalar<std::int32_t>(0, 0);
        break;
      case TypeId::union_:
        f.union_mode = type->scalar<std::int16_t>(0, 0);
        break;
      default:
        break;
    }
  }
  if (const auto dict = t.table(4)) {
    f.dictionary = true;
    f.dictionary_id = dict->scalar<std::int64_t>(0, 0);
    if (const auto index = dict->table(1)) {
      f.index_bits = index->scalar<std::int32_t>(0, 0);
      f.index_signed = index->scalar<std::uint8_t>(1, 0) != 0;
    }
    if (f.index_bits != 8 && f.index_bits != 16 && f.index_bits != 32 && f.index_bits != 64) {
      throw FormatError("a dictionary's indices of " + std::to_string(f.index_bits) + " bits");
    }
  }
  const FlatTable::Vector children = t.vector(5, 4);
  for (std::size_t i = 0; i < children.count; ++i) {
    f.children.push_back(parse_field(t.table_at(children, i), depth + 1, work));
  }
  const FlatTable::Vector metadata = t.vector(6, 4);
  work.take(metadata.count);
  for (std::size_t i = 0; i < metadata.count; ++i) {
    const FlatTable kv = t.table_at(metadata, i);
    const std::string_view key = kv.string(0);
    if (key == "ARROW:extension:name" || key == "ARROW:extension:metadata") {
      const std::string_view value = kv.string(1);
      work.take(value.size());
      (key == "ARROW:extension:name" ? f.extension_name : f.extension_metadata) = value;
    }
  }
  return f;
}

Schema parse_schema(const FlatTable& t) {
  if (t.scalar<std::int16_t>(0, 0) != 0) {
    throw FormatError("a big-endian schema (only little-endian files are read)");
  }
  Schema s;
  const FlatTable::Vector fields = t.vector(1, 4);
  Work work;
  work.left = 2 * t.buffer_size() + 4096;
  for (std::size_t i = 0; i < fields.count; ++i) {
    s.fields.push_back(parse_field(t.table_at(fields, i), 0, work));
  }
  const FlatTable::Vector metadata = t.vector(2, 4);
  work.take(metadata.count);
  for (std::size_t i = 0; i < metadata.count; ++i) {
    const FlatTable kv = t.table_at(metadata, i);
    if (kv.string(0) == "huggingface") {
      const std::string_view value = kv.string(1);
      work.take(value.size());
      s.huggingface = std::string(value);
    }
  }
  return s;
}

RecordBatch parse_batch(const FlatTable& t) {
  RecordBatch b;
  b.length = t.scalar<std::int64_t>(0, 0);
  if (b.length < 0) throw FormatError("a record batch of " + std::to_string(b.length) + " rows");
  const FlatTable::Vector nodes = t.vector(1, 16);
  b.nodes.resize(nodes.count);
  for (std::size_t i = 0; i < nodes.count; ++i) {
    b.nodes[i] = {t.load<std::int64_t>(nodes.at + 16 * i),
                  t.load<std::int64_t>(nodes.at + 16 * i + 8)};
  }
  const FlatTable::Vector buffers = t.vector(2, 16);
  b.buffers.resize(buffers.count);
  for (std::size_t i = 0; i < buffers.count; ++i) {
    b.buffers[i] = {t.load<std::int64_t>(buffers.at + 16 * i),
                    t.load<std::int64_t>(buffers.at + 16 * i + 8)};
  }
  if (const auto c = t.table(3)) {
    const auto codec = c->scalar<std::int8_t>(0, 0);
    if (codec != 0 && codec != 1) {
      throw FormatError("body compression codec " + std::to_string(codec) +
                        " (LZ4_FRAME and ZSTD are read)");
    }
    if (c->scalar<std::int8_t>(1, 0) != 0) {
      throw FormatError("a body compression method other than BUFFER");
    }
    b.compression = static_cast<Compression>(codec);
  }
  const FlatTable::Vector variadic = t.vector(4, 8);
  for (std::size_t i = 0; i < variadic.count; ++i) {
    b.variadic.push_back(t.load<std::int64_t>(variadic.at + 8 * i));
  }
  return b;
}

}  // namespace

Message parse_message(std::span<const std::byte> flatbuffer) {
  const FlatTable t = FlatTable::root(flatbuffer);
  const auto version = t.scalar<std::int16_t>(0, 0);
  if (version < 3) {
    throw FormatError("metadata version V" + std::to_string(version + 1) + " (V4 and V5 are read)");
  }
  Message m;
  m.type = static_cast<HeaderType>(t.scalar<std::uint8_t>(1, 0));
  m.body_length = t.scalar<std::int64_t>(3, 0);
  if (m.body_length < 0) throw FormatError("a message body of negative length");
  const auto header = t.table(2);
  switch (m.type) {
    case HeaderType::schema:
      if (!header) throw FormatError("a schema message without its schema");
      m.schema = parse_schema(*header);
      break;
    case HeaderType::record_batch:
      if (!header) throw FormatError("a record batch message without its record batch");
      m.batch = parse_batch(*header);
      m.batch.v4 = version == 3;
      break;
    case HeaderType::dictionary_batch: {
      if (!header) throw FormatError("a dictionary batch message without its batch");
      m.dictionary_id = header->scalar<std::int64_t>(0, 0);
      const auto data = header->table(1);
      if (!data) throw FormatError("a dictionary batch without its data");
      m.batch = parse_batch(*data);
      m.batch.v4 = version == 3;
      m.is_delta = header->scalar<std::uint8_t>(2, 0) != 0;
      break;
    }
    default:
      throw FormatError("a message of type " + std::to_string(static_cast<int>(m.type)) +
                        " (a schema, a dictionary batch or a record batch is read)");
  }
  return m;
}

namespace {

// A block's name in errors ("record batch 3 (byte 1200)").
std::string block_name(const Footer& f, std::size_t k) {
  const bool dictionary = k < f.dictionaries.size();
  const std::size_t i = dictionary ? k : k - f.dictionaries.size();
  const Block& b = dictionary ? f.dictionaries[i] : f.batches[i];
  return std::string(dictionary ? "dictionary " : "record batch ") + std::to_string(i) + " (byte " +
         std::to_string(b.offset) + ")";
}

// Refuses a footer whose blocks repeat or overlap (no writer lists a message twice), before any
// is read: each block's bytes are then parsed once, in time bounded by the file's size.
void check_blocks(const Footer& f) {
  struct Extent {
    std::uint64_t first;
    std::uint64_t end;  // at least first + 1: an empty block still takes its offset
    std::size_t k;      // dictionaries first, then record batches
  };
  std::vector<Extent> extents;
  extents.reserve(f.dictionaries.size() + f.batches.size());
  const auto add = [&](const Block& b) {
    const auto first = static_cast<std::uint64_t>(std::max<std::int64_t>(b.offset, 0));
    const auto meta = static_cast<std::uint64_t>(std::max<std::int32_t>(b.metadata_length, 0));
    const auto body = static_cast<std::uint64_t>(std::max<std::int64_t>(b.body_length, 0));
    const std::uint64_t most = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t end = meta > most - first ? most : first + meta;
    end = body > most - end ? most : end + body;
    extents.push_back({first, std::max(end, first + 1), extents.size()});
  };
  for (const Block& b : f.dictionaries) add(b);
  for (const Block& b : f.batches) add(b);
  std::sort(extents.begin(), extents.end(), [](const Extent& a, const Extent& b) {
    return a.first != b.first ? a.first < b.first : a.k < b.k;
  });
  for (std::size_t i = 1; i < extents.size(); ++i) {
    if (extents[i].first < extents[i - 1].end) {
      const Extent& a = extents[i - 1];
      const Extent& b = extents[i];
      throw FormatError(block_name(f, std::max(a.k, b.k)) +
                        (a.first == b.first ? " repeats " : " overlaps ") +
                        block_name(f, std::min(a.k, b.k)) + ": no file lists a message twice");
    }
  }
}

}  // namespace

Footer parse_footer(std::span<const std::byte> flatbuffer) {
  const FlatTable t = FlatTable::root(flatbuffer);
  Footer f;
  const auto schema = t.table(1);
  if (!schema) throw FormatError("no schema");
  f.schema = parse_schema(*schema);
  for (const int slot : {2, 3}) {
    const FlatTable::Vector v = t.vector(slot, 24);
    std::vector<Block>& out = slot == 2 ? f.dictionaries : f.batches;
    out.resize(v.count);
    for (std::size_t i = 0; i < v.count; ++i) {
      out[i] = {t.load<std::int64_t>(v.at + 24 * i), t.load<std::int32_t>(v.at + 24 * i + 8),
                t.load<std::int64_t>(v.at + 24 * i + 16)};
    }
  }
  check_blocks(f);
  return f;
}

Frame read_frame(std::span<const std::byte> bytes, std::size_t at) {
  Frame f;
  if (at >= bytes.size()) {
    f.end = true;
    return f;
  }
  const std::size_t left = bytes.size() - at;
  if (left < 4) throw FormatError("truncated: " + std::to_string(left) + " bytes left");
  std::uint32_t first = 0;
  std::memcpy(&first, bytes.data() + at, 4);
  std::int32_t length = 0;
  if (first == 0xFFFFFFFFU) {
    if (left < 8) throw FormatError("truncated: the message's length is cut off");
    std::memcpy(&length, bytes.data() + at + 4, 4);
    f.metadata = at + 8;
  } else {
    length = static_cast<std::int32_t>(first);
    f.metadata = at + 4;
  }
  if (length == 0) {
    f.end = true;
    return f;
  }
  if (length < 0 || static_cast<std::size_t>(length) > bytes.size() - f.metadata) {
    throw FormatError("truncated: metadata of " + std::to_string(length) + " bytes where " +
                      std::to_string(bytes.size() - f.metadata) + " are left");
  }
  f.metadata_length = static_cast<std::size_t>(length);
  f.message = parse_message(bytes.subspan(f.metadata, f.metadata_length));
  f.body = f.metadata + f.metadata_length;
  if (static_cast<std::uint64_t>(f.message.body_length) > bytes.size() - f.body) {
    throw FormatError("truncated: a body of " + std::to_string(f.message.body_length) +
                      " bytes where " + std::to_string(bytes.size() - f.body) + " are left");
  }
  f.next = f.body + static_cast<std::size_t>(f.message.body_length);
  return f;
}

std::string type_text(const Field& f) {
  static constexpr const char* kNames[] = {"none",
                                           "null",
                                           "int",
                                           "float",
                                           "binary",
                                           "utf8",
                                           "bool",
                                           "decimal",
                                           "date",
                                           "time",
                                           "timestamp",
                                           "interval",
                                           "list",
                                           "struct",
                                           "union",
                                           "fixed_size_binary",
                                           "fixed_size_list",
                                           "map",
                                           "duration",
                                           "large_binary",
                                           "large_utf8",
                                           "large_list",
                                           "run_end_encoded",
                                           "binary_view",
                                           "utf8_view",
                                           "list_view",
                                           "large_list_view"};
  const auto id = static_cast<std::size_t>(f.type);
  std::string text = id < std::size(kNames) ? kNames[id] : "type " + std::to_string(id);
  if (f.type == TypeId::int_) {
    text = (f.is_signed ? "int" : "uint") + std::to_string(f.bit_width);
  } else if (f.type == TypeId::floating) {
    text = f.precision == 0 ? "float16" : f.precision == 1 ? "float32" : "float64";
  }
  if (!f.children.empty()) {
    text += '<';
    for (std::size_t i = 0; i < f.children.size(); ++i) {
      if (i != 0) text += ", ";
      if (f.type == TypeId::struct_) text += parquet::in_quotes(f.children[i].name) + ": ";
      text += type_text(f.children[i]);
    }
    text += '>';
  }
  if (f.type == TypeId::fixed_size_list) text += '[' + std::to_string(f.list_size) + ']';
  if (f.dictionary) text = "dictionary<" + text + ">";
  if (!f.extension_name.empty()) {
    text += " (extension " + parquet::in_quotes(f.extension_name) + " " +
            parquet::in_quotes(f.extension_metadata) + ")";
  }
  return text;
}

}  // namespace ferry::detail::arrow
