#include "datasets/table/parquet_format.hpp"

#include <limits>

#include "datasets/table/thrift_compact.hpp"

namespace ferry::detail::parquet {
namespace {

using thrift::FieldHeader;
using thrift::Reader;
using thrift::ThriftError;
using thrift::Type;

std::int32_t i32(Reader& r, Type t) {
  const std::int64_t v = r.read_int(t);
  if (v < std::numeric_limits<std::int32_t>::min() ||
      v > std::numeric_limits<std::int32_t>::max()) {
    throw ThriftError("an i32 out of range");
  }
  return static_cast<std::int32_t>(v);
}

/// Calls on_field(header) for each field of the struct that starts at the reader.
template <class F>
void each_field(Reader& r, F&& on_field) {
  r.begin_struct();
  for (FieldHeader f = r.field(); f.type != Type::stop; f = r.field()) on_field(f);
  r.end_struct();
}

template <class F>
void each_element(Reader& r, Type field_type, F&& on_element) {
  if (field_type != Type::list) throw ThriftError("a list expected");
  const thrift::ListHeader h = r.read_list();
  for (std::size_t i = 0; i < h.size; ++i) on_element(h.element);
}

Logical parse_logical(Reader& r) {
  Logical l;
  each_field(r, [&](FieldHeader f) {
    if (f.type != Type::strct) {
      r.skip(f.type);
      return;
    }
    if (l.which != 0) throw ThriftError("a logicalType union with more than one member set");
    l.which = f.id;
    if (f.id == 10) {  // INTEGER: IntType{1: bitWidth i8, 2: isSigned bool}
      each_field(r, [&](FieldHeader g) {
        if (g.id == 1) {
          l.bit_width = static_cast<int>(r.read_int(g.type));
        } else if (g.id == 2) {
          l.is_signed = r.read_bool(g.type);
        } else {
          r.skip(g.type);
        }
      });
    } else {
      r.skip(f.type);
    }
  });
  return l;
}

SchemaElement parse_schema_element(Reader& r) {
  SchemaElement e;
  each_field(r, [&](FieldHeader f) {
    switch (f.id) {
      case 1:
        e.type = static_cast<Physical>(i32(r, f.type));
        break;
      case 2:
        e.type_length = i32(r, f.type);
        break;
      case 3:
        e.repetition = i32(r, f.type);
        if (e.repetition < 0 || e.repetition > 2) {
          throw ThriftError("a repetition type of " + std::to_string(e.repetition) +
                            " (0 REQUIRED, 1 OPTIONAL or 2 REPEATED)");
        }
        break;
      case 4:
        e.name = std::string(r.read_binary());
        break;
      case 5:
        e.num_children = i32(r, f.type);
        break;
      case 6:
        e.converted = i32(r, f.type);
        break;
      case 10:
        if (f.type != Type::strct) throw ThriftError("logicalType is not a struct");
        e.logical = parse_logical(r);
        break;
      default:
        r.skip(f.type);
    }
  });
  return e;
}

void parse_column_metadata(Reader& r, ColumnChunk& c) {
  c.has_metadata = true;
  each_field(r, [&](FieldHeader f) {
    switch (f.id) {
      case 1:
        c.type = static_cast<Physical>(i32(r, f.type));
        break;
      case 4:
        c.codec = static_cast<Codec>(i32(r, f.type));
        break;
      case 5:
        c.num_values = r.read_int(f.type);
        break;
      case 6:
        c.total_uncompressed_size = r.read_int(f.type);
        break;
      case 7:
        c.total_compressed_size = r.read_int(f.type);
        break;
      case 9:
        c.data_page_offset = r.read_int(f.type);
        break;
      case 11:
        c.dictionary_page_offset = r.read_int(f.type);
        break;
      default:
        r.skip(f.type);
    }
  });
}

ColumnChunk parse_column_chunk(Reader& r) {
  ColumnChunk c;
  each_field(r, [&](FieldHeader f) {
    if (f.id == 1 && f.type == Type::binary) {
      c.external = !r.read_binary().empty();
    } else if (f.id == 3 && f.type == Type::strct) {
      parse_column_metadata(r, c);
    } else {
      r.skip(f.type);
    }
  });
  return c;
}

RowGroup parse_row_group(Reader& r) {
  RowGroup g;
  each_field(r, [&](FieldHeader f) {
    if (f.id == 1) {
      each_element(r, f.type, [&](Type t) {
        if (t != Type::strct) throw ThriftError("a column chunk is not a struct");
        g.columns.push_back(parse_column_chunk(r));
      });
    } else if (f.id == 3) {
      g.num_rows = r.read_int(f.type);
    } else {
      r.skip(f.type);
    }
  });
  return g;
}

}  // namespace

FileMetaData parse_file_metadata(std::span<const std::byte> bytes) {
  Reader r(bytes);
  FileMetaData m;
  each_field(r, [&](FieldHeader f) {
    switch (f.id) {
      case 2:
        each_element(r, f.type, [&](Type t) {
          if (t != Type::strct) throw ThriftError("a schema element is not a struct");
          m.schema.push_back(parse_schema_element(r));
        });
        break;
      case 3:
        m.num_rows = r.read_int(f.type);
        break;
      case 4:
        each_element(r, f.type, [&](Type t) {
          if (t != Type::strct) throw ThriftError("a row group is not a struct");
          m.row_groups.push_back(parse_row_group(r));
        });
        break;
      case 5:  // key_value_metadata: KeyValue{1: key, 2: value}
        each_element(r, f.type, [&](Type t) {
          if (t != Type::strct) throw ThriftError("a key-value pair is not a struct");
          std::string_view key;
          std::string_view value;
          each_field(r, [&](FieldHeader g) {
            if (g.id == 1 && g.type == Type::binary) {
              key = r.read_binary();
            } else if (g.id == 2 && g.type == Type::binary) {
              value = r.read_binary();
            } else {
              r.skip(g.type);
            }
          });
          if (key == "ARROW:schema") m.arrow_schema = std::string(value);
          if (key == "huggingface") m.huggingface = std::string(value);
        });
        break;
      default:
        r.skip(f.type);
    }
  });
  return m;
}

PageHeader parse_page_header(std::span<const std::byte> bytes, std::size_t& consumed) {
  Reader r(bytes);
  PageHeader h;
  each_field(r, [&](FieldHeader f) {
    switch (f.id) {
      case 1:
        h.type = i32(r, f.type);
        break;
      case 2:
        h.uncompressed_size = i32(r, f.type);
        break;
      case 3:
        h.compressed_size = i32(r, f.type);
        break;
      case 5:  // DataPageHeader
        if (f.type != Type::strct) throw ThriftError("data_page_header is not a struct");
        h.has_body = true;
        each_field(r, [&](FieldHeader g) {
          if (g.id == 1) {
            h.num_values = i32(r, g.type);
          } else if (g.id == 2) {
            h.encoding = i32(r, g.type);
          } else if (g.id == 3) {
            h.def_encoding = i32(r, g.type);
          } else if (g.id == 4) {
            h.rep_encoding = i32(r, g.type);
          } else {
            r.skip(g.type);
          }
        });
        break;
      case 7:  // DictionaryPageHeader
        if (f.type != Type::strct) throw ThriftError("dictionary_page_header is not a struct");
        h.has_body = true;
        each_field(r, [&](FieldHeader g) {
          if (g.id == 1) {
            h.num_values = i32(r, g.type);
          } else if (g.id == 2) {
            h.encoding = i32(r, g.type);
          } else {
            r.skip(g.type);
          }
        });
        break;
      case 8:  // DataPageHeaderV2
        if (f.type != Type::strct) throw ThriftError("data_page_header_v2 is not a struct");
        h.has_body = true;
        each_field(r, [&](FieldHeader g) {
          switch (g.id) {
            case 1:
              h.num_values = i32(r, g.type);
              break;
            case 2:
              h.num_nulls = i32(r, g.type);
              break;
            case 4:
              h.encoding = i32(r, g.type);
              break;
            case 5:
              h.def_length = i32(r, g.type);
              break;
            case 6:
              h.rep_length = i32(r, g.type);
              break;
            case 7:
              h.is_compressed = r.read_bool(g.type);
              break;
            default:
              r.skip(g.type);
          }
        });
        break;
      default:
        r.skip(f.type);
    }
  });
  consumed = r.position();
  return h;
}

}  // namespace ferry::detail::parquet
