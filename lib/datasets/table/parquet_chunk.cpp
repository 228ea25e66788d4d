#include "datasets/table/parquet_chunk.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

#include "datasets/table/parquet_codec.hpp"
#include "datasets/table/thrift_compact.hpp"

namespace ferry::detail::parquet {
namespace {

// The most values a page may hold beyond 8 a byte (booleans' density): an all-null page or a
// run of one dictionary index takes a few bytes for any count, and writers make pages of at
// most some tens of thousands of rows (20,000 by default for Arrow's and parquet-mr's).
constexpr std::size_t kMaxPageValues = std::size_t{1} << 20;

std::uint32_t load_le32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  std::memcpy(&v, p, 4);
  return v;
}

/// The RLE / bit-packed hybrid (the Parquet specification, "Run Length Encoding / Bit-Packing
/// Hybrid"), without a length prefix: exactly `data`.
class RleDecoder {
 public:
  RleDecoder(std::span<const std::byte> data, int bit_width) : data_(data), width_(bit_width) {
    if (bit_width < 0 || bit_width > 32) {
      throw ChunkError("a bit width of " + std::to_string(bit_width) + " (at most 32)");
    }
  }

  /// The next n values into out. \throws ChunkError when the runs end first.
  void get(std::uint32_t* out, std::size_t n) {
    while (n > 0) {
      if (left_ == 0) next_run();
      const std::size_t take = std::min<std::size_t>(n, left_);
      if (packed_) {
        for (std::size_t i = 0; i < take; ++i) out[i] = unpack(run_pos_++);
      } else {
        std::fill_n(out, take, value_);
      }
      out += take;
      n -= take;
      left_ -= take;
    }
  }

 private:
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) throw ChunkError("levels or indices end early (a run's header)");
      const auto b = static_cast<std::uint8_t>(data_[pos_++]);
      v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return v;
    }
    throw ChunkError("a run header longer than 10 bytes");
  }

  void next_run() {
    const std::uint64_t header = varint();
    const std::uint64_t count = header >> 1;
    if (count == 0) throw ChunkError("an empty run in levels or indices");
    if ((header & 1) != 0) {  // bit-packed groups of 8
      if (count > (std::uint64_t{1} << 31)) throw ChunkError("a bit-packed run too long");
      packed_ = true;
      left_ = count * 8;
      run_start_ = pos_;
      run_pos_ = 0;
      // The run's bytes; the last run may stop short of its groups (only the values used count).
      const std::uint64_t run_bytes = count * static_cast<std::uint64_t>(width_);
      run_bytes_ = std::min<std::uint64_t>(run_bytes, data_.size() - pos_);
      pos_ += run_bytes_;
    } else {
      packed_ = false;
      left_ = count;
      const std::size_t bytes = (static_cast<std::size_t>(width_) + 7) / 8;
      if (bytes > data_.size() - pos_) throw ChunkError("levels or indices end early (a run)");
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < bytes; ++i) {
        v |= static_cast<std::uint32_t>(static_cast<std::uint8_t>(data_[pos_ + i])) << (8 * i);
      }
      pos_ += bytes;
      value_ = v;
    }
  }

  std::uint32_t unpack(std::uint64_t i) const {
    if (width_ == 0) return 0;
    const std::uint64_t bit = i * static_cast<std::uint64_t>(width_);
    const std::uint64_t last_byte = (bit + static_cast<std::uint64_t>(width_) - 1) / 8;
    if (last_byte >= run_bytes_) throw ChunkError("levels or indices end early (packed values)");
    std::uint64_t v = 0;
    const std::uint64_t first = bit / 8;
    if (run_bytes_ - first >= 8) {  // one load: a value of <= 32 bits lies within 8 bytes
      std::memcpy(&v, data_.data() + run_start_ + first, 8);
      v >>= bit % 8;
      return static_cast<std::uint32_t>(v & ((std::uint64_t{1} << width_) - 1));
    }
    for (std::uint64_t b = first; b <= last_byte; ++b) {
      v |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(data_[run_start_ + b]))
           << (8 * (b - first));
    }
    v >>= bit % 8;
    return static_cast<std::uint32_t>(v & ((std::uint64_t{1} << width_) - 1));
  }

  std::span<const std::byte> data_;
  int width_;
  std::size_t pos_ = 0;
  std::uint64_t left_ = 0;
  bool packed_ = false;
  std::uint32_t value_ = 0;
  std::size_t run_start_ = 0;
  std::uint64_t run_bytes_ = 0;
  std::uint64_t run_pos_ = 0;
};

void plain_values(std::span<const std::byte> data, Physical type, std::size_t n, Values& out) {
  const std::size_t width = physical_width(type);
  out.count = n;
  if (type == Physical::boolean) {
    if ((n + 7) / 8 > data.size()) throw ChunkError("PLAIN booleans end early");
    out.fixed.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      out.fixed[i] = std::byte((static_cast<std::uint8_t>(data[i / 8]) >> (i % 8)) & 1);
    }
  } else if (width != 0) {
    if (n > data.size() / width) {
      throw ChunkError("PLAIN values end early (" + std::to_string(n) + " values of " +
                       std::to_string(width) + " bytes in " + std::to_string(data.size()) + ")");
    }
    out.fixed.assign(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(n * width));
  } else {
    std::size_t pos = 0;
    if (n > data.size() / 4) {  // each after its length in 4 bytes
      throw ChunkError("PLAIN byte arrays end early (" + std::to_string(n) + " values in " +
                       std::to_string(data.size()) + " bytes)");
    }
    out.offsets.reserve(n + 1);
    for (std::size_t i = 0; i < n; ++i) {
      if (4 > data.size() - pos) throw ChunkError("PLAIN byte arrays end early (a length)");
      const std::uint32_t len = load_le32(data.data() + pos);
      pos += 4;
      if (len > data.size() - pos) {
        throw ChunkError("a PLAIN byte array of " + std::to_string(len) +
                         " bytes goes past the page's end");
      }
      out.bytes.insert(out.bytes.end(), data.begin() + static_cast<std::ptrdiff_t>(pos),
                       data.begin() + static_cast<std::ptrdiff_t>(pos + len));
      pos += len;
      out.offsets.push_back(out.bytes.size());
    }
  }
}

/// Appends n values of `page` (decoded as PLAIN) or of `dict` (by indices) to `col`, at the rows
/// whose level says they are there.
/// place() for fixed-width values when every row has one: a copy, or a gather by index.
template <std::size_t W>
void place_all(RawColumn& col, std::size_t first_row, std::size_t rows, const Values& values,
               const std::vector<std::uint32_t>* indices) {
  std::byte* out = col.fixed.data() + first_row * W;
  if (indices == nullptr) {
    if (rows > 0) std::memcpy(out, values.fixed.data(), rows * W);
    return;
  }
  const std::uint32_t* idx = indices->data();
  for (std::size_t r = 0; r < rows; ++r) {
    if (idx[r] >= values.count) {
      throw ChunkError("a dictionary index " + std::to_string(idx[r]) + " past the dictionary's " +
                       std::to_string(values.count) + " values");
    }
    std::memcpy(out + r * W, values.fixed.data() + std::size_t{idx[r]} * W, W);
  }
}

void place(RawColumn& col, std::size_t first_row, const std::vector<std::uint32_t>& levels,
           int max_def, const Values& values, const std::vector<std::uint32_t>* indices) {
  if (max_def == 0 && col.width != 0) {
    const std::size_t rows = levels.size();
    switch (col.width) {
      case 1:
        return place_all<1>(col, first_row, rows, values, indices);
      case 2:
        return place_all<2>(col, first_row, rows, values, indices);
      case 4:
        return place_all<4>(col, first_row, rows, values, indices);
      case 8:
        return place_all<8>(col, first_row, rows, values, indices);
      default:
        break;
    }
  }
  std::size_t v = 0;
  const std::size_t rows = levels.size();
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t row = first_row + r;
    const bool present = max_def == 0 || levels[r] == static_cast<std::uint32_t>(max_def);
    if (!present) {
      col.valid[row] = 0;
      if (col.width == 0) col.offsets[row + 1] = col.offsets[row];
      continue;
    }
    std::size_t at = v++;
    if (indices != nullptr) {
      at = (*indices)[at];
      if (at >= values.count) {
        throw ChunkError("a dictionary index " + std::to_string(at) + " past the dictionary's " +
                         std::to_string(values.count) + " values");
      }
    }
    if (col.width != 0) {
      std::memcpy(col.fixed.data() + row * col.width, values.fixed.data() + at * col.width,
                  col.width);
    } else {
      const std::size_t n = values.offsets[at + 1] - values.offsets[at];
      col.offsets[row + 1] = col.offsets[row] + n;
      if (col.sizes_only) continue;
      if (n > col.max_bytes - col.bytes.size()) {
        throw ChunkError("byte arrays of more than " + std::to_string(col.max_bytes) +
                         " bytes in one chunk (row " + std::to_string(row) + ")");
      }
      col.bytes.insert(col.bytes.end(),
                       values.bytes.begin() + static_cast<std::ptrdiff_t>(values.offsets[at]),
                       values.bytes.begin() + static_cast<std::ptrdiff_t>(values.offsets[at + 1]));
    }
  }
}

}  // namespace

std::size_t physical_width(Physical type) noexcept {
  switch (type) {
    case Physical::boolean:
      return 1;
    case Physical::fixed_len_byte_array:  // FLOAT16's, the only one scalar_dtype() reads
      return 2;
    case Physical::int32:
    case Physical::float32:
      return 4;
    case Physical::int64:
    case Physical::float64:
      return 8;
    default:
      return 0;
  }
}

const char* encoding_name(std::int32_t encoding) noexcept {
  static constexpr const char* kNames[] = {
      "PLAIN",          "GROUP_VAR_INT",       "PLAIN_DICTIONARY",        "RLE",
      "BIT_PACKED",     "DELTA_BINARY_PACKED", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY",
      "RLE_DICTIONARY", "BYTE_STREAM_SPLIT"};
  if (encoding < 0 || encoding >= static_cast<std::int32_t>(std::size(kNames))) {
    return "an unknown encoding";
  }
  return kNames[encoding];
}

void decode_pages(std::span<const std::byte> bytes, Physical type, Codec codec, int max_def,
                  int max_rep, std::size_t total, const PageSink& sink) {
  check_codec(codec);
  Values dict;
  bool have_dict = false;
  std::vector<std::byte> page;
  std::vector<std::uint32_t> levels;
  std::vector<std::uint32_t> reps;
  // Levels take as many bits as their maximum needs (a struct's child: 2).
  const auto level_bits = static_cast<int>(std::bit_width(static_cast<unsigned>(max_def)));
  const auto rep_bits = static_cast<int>(std::bit_width(static_cast<unsigned>(max_rep)));
  const char* unit = max_rep > 0 ? " values" : " rows";
  std::vector<std::uint32_t> indices;
  std::size_t pos = 0;
  std::size_t done = 0;
  for (std::size_t page_no = 0; done < total; ++page_no) {
    const std::string at =
        "page " + std::to_string(page_no) + " (byte " + std::to_string(pos) + " of the chunk): ";
    try {
      if (pos >= bytes.size()) {
        throw ChunkError("the chunk ends after " + std::to_string(done) + " of its " +
                         std::to_string(total) + unit);
      }
      std::size_t header_bytes = 0;
      const PageHeader h = parse_page_header(bytes.subspan(pos), header_bytes);
      pos += header_bytes;
      if (h.compressed_size < 0 ||
          static_cast<std::size_t>(h.compressed_size) > bytes.size() - pos) {
        throw ChunkError("a page of " + std::to_string(h.compressed_size) +
                         " bytes goes past the chunk's end");
      }
      if (h.uncompressed_size < 0 ||
          static_cast<std::size_t>(h.uncompressed_size) > kMaxPageBytes) {
        throw ChunkError("a page that claims " + std::to_string(h.uncompressed_size) +
                         " bytes decompressed (at most 1 GiB)");
      }
      const auto body = bytes.subspan(pos, static_cast<std::size_t>(h.compressed_size));
      pos += body.size();
      if (h.type == page_type::index) continue;
      if (!h.has_body) throw ChunkError("a page header without its page type's header");
      if (h.num_values < 0) throw ChunkError("a negative count of values");
      const auto count = static_cast<std::size_t>(h.num_values);
      // The sizes a header claims are bounded by the page's bytes before anything is made of
      // them: its decompressed bytes by what its codec makes of them, and its values (below)
      // by those bytes.
      const auto size = static_cast<std::size_t>(h.uncompressed_size);
      const bool v2_plain = h.type == page_type::data_v2 && !h.is_compressed;
      if (size > max_decompressed(v2_plain ? Codec::uncompressed : codec, body.size())) {
        throw ChunkError("a page of " + std::to_string(body.size()) + " bytes that claims " +
                         std::to_string(size) + " decompressed, more than " +
                         codec_name(v2_plain ? Codec::uncompressed : codec) + " makes of them");
      }
      if (h.type == page_type::dictionary) {
        if (h.encoding != encoding::plain && h.encoding != encoding::plain_dictionary) {
          throw ChunkError(std::string("a dictionary page in ") + encoding_name(h.encoding));
        }
        decompress(codec, body, page, size);
        dict = Values{};
        plain_values(page, type, count, dict);
        have_dict = true;
        continue;
      }
      if (h.type != page_type::data && h.type != page_type::data_v2) {
        throw ChunkError("a page of unknown type " + std::to_string(h.type));
      }
      if (count > total - done) {
        throw ChunkError("a page of " + std::to_string(count) + " values past the chunk's " +
                         std::to_string(total) + unit);
      }
      if (count > kMaxPageValues + 8 * static_cast<std::size_t>(h.uncompressed_size)) {
        throw ChunkError("a page of " + std::to_string(count) + " values in " +
                         std::to_string(h.uncompressed_size) +
                         " bytes (at most 2^20 more than 8 a byte)");
      }
      // The page's bytes are decompressed before its levels are made: what they hold (at most
      // `size`, grown as they decompress) bounds its values, and so the levels' memory.
      std::span<const std::byte> values;
      if (h.type == page_type::data) {
        decompress(codec, body, page, size);
        values = page;
        levels.assign(count, static_cast<std::uint32_t>(max_def));
        reps.assign(max_rep > 0 ? count : 0, 0);
        // v1: repetition levels, then definition levels, each after its length in 4 bytes.
        for (const bool rep : {true, false}) {
          if ((rep ? max_rep : max_def) == 0) continue;
          const char* what = rep ? "repetition levels" : "definition levels";
          if ((rep ? h.rep_encoding : h.def_encoding) != encoding::rle) {
            throw ChunkError(std::string(what) + " in " +
                             encoding_name(rep ? h.rep_encoding : h.def_encoding) +
                             ", which ferry does not read (it reads RLE)");
          }
          if (values.size() < 4) throw ChunkError(std::string(what) + " end early");
          const std::uint32_t n = load_le32(values.data());
          if (n > values.size() - 4) throw ChunkError(std::string(what) + " past the page's end");
          RleDecoder(values.subspan(4, n), rep ? rep_bits : level_bits)
              .get(rep ? reps.data() : levels.data(), count);
          values = values.subspan(4 + n);
        }
      } else {
        if (h.def_length < 0 || h.rep_length < 0 ||
            static_cast<std::size_t>(h.def_length) + static_cast<std::size_t>(h.rep_length) >
                std::min(body.size(), static_cast<std::size_t>(h.uncompressed_size))) {
          throw ChunkError("levels of " + std::to_string(h.rep_length) + " + " +
                           std::to_string(h.def_length) + " bytes past the page's end");
        }
        const std::size_t level_bytes =
            static_cast<std::size_t>(h.def_length) + static_cast<std::size_t>(h.rep_length);
        const auto rest = body.subspan(level_bytes);
        if (h.is_compressed && codec != Codec::uncompressed) {
          decompress(codec, rest, page, size - level_bytes);
          values = page;
        } else {
          values = rest;
        }
        levels.assign(count, static_cast<std::uint32_t>(max_def));
        reps.assign(max_rep > 0 ? count : 0, 0);
        if (max_rep > 0) {
          RleDecoder(body.subspan(0, static_cast<std::size_t>(h.rep_length)), rep_bits)
              .get(reps.data(), count);
        }
        if (max_def > 0) {
          RleDecoder(body.subspan(static_cast<std::size_t>(h.rep_length),
                                  static_cast<std::size_t>(h.def_length)),
                     level_bits)
              .get(levels.data(), count);
        }
      }
      std::size_t present = 0;
      for (const std::uint32_t l : levels) {
        if (l > static_cast<std::uint32_t>(max_def))
          throw ChunkError("a definition level too high");
        present += l == static_cast<std::uint32_t>(max_def) ? 1 : 0;
      }
      for (const std::uint32_t r : reps) {
        if (r > static_cast<std::uint32_t>(max_rep))
          throw ChunkError("a repetition level too high");
      }
      const PageLevels page_levels{reps, levels};
      if (h.encoding == encoding::plain) {
        Values v;
        plain_values(values, type, present, v);
        sink(page_levels, v, nullptr);
      } else if (h.encoding == encoding::plain_dictionary ||
                 h.encoding == encoding::rle_dictionary) {
        if (!have_dict) throw ChunkError("dictionary indices and no dictionary page before them");
        indices.resize(present);
        if (present > 0) {
          if (values.empty()) throw ChunkError("dictionary indices end early (the bit width)");
          RleDecoder(values.subspan(1), static_cast<int>(values[0])).get(indices.data(), present);
        }
        sink(page_levels, dict, &indices);
      } else if (h.encoding == encoding::rle && type == Physical::boolean) {
        if (values.size() < 4) throw ChunkError("RLE booleans end early");
        const std::uint32_t n = load_le32(values.data());
        if (n > values.size() - 4) throw ChunkError("RLE booleans past the page's end");
        indices.resize(present);
        RleDecoder(values.subspan(4, n), 1).get(indices.data(), present);
        Values v;
        v.count = present;
        v.fixed.resize(present);
        for (std::size_t i = 0; i < present; ++i) {
          if (indices[i] > 1) {
            throw ChunkError("an RLE boolean of " + std::to_string(indices[i]) + " (value " +
                             std::to_string(i) + ")");
          }
          v.fixed[i] = std::byte(indices[i]);
        }
        sink(page_levels, v, nullptr);
      } else if (h.encoding == encoding::delta_binary_packed ||
                 h.encoding == encoding::delta_length_byte_array ||
                 h.encoding == encoding::delta_byte_array ||
                 h.encoding == encoding::byte_stream_split) {
        Values v;
        if (h.encoding == encoding::delta_binary_packed) {
          delta_binary_packed(values, type, present, v);
        } else if (h.encoding == encoding::byte_stream_split) {
          byte_stream_split(values, type, present, v);
        } else if (type != Physical::byte_array && (type != Physical::fixed_len_byte_array ||
                                                    h.encoding != encoding::delta_byte_array)) {
          throw ChunkError(std::string(encoding_name(h.encoding)) +
                           " values in a column that is not BYTE_ARRAY");
        } else if (h.encoding == encoding::delta_length_byte_array) {
          delta_length_byte_array(values, present, v);
        } else {
          delta_byte_array(values, present, v);
          if (type == Physical::fixed_len_byte_array) fixed_width(v, physical_width(type));
        }
        sink(page_levels, v, nullptr);
      } else {
        throw ChunkError(std::string("values in ") + encoding_name(h.encoding) + " (encoding " +
                         std::to_string(h.encoding) + "), which ferry does not read");
      }
      done += count;
    } catch (const thrift::ThriftError& e) {
      throw ChunkError(at + "corrupt page header: " + e.what());
    } catch (const ChunkError& e) {
      throw ChunkError(at + e.what());
    }
  }
}

RawColumn decode_chunk(std::span<const std::byte> bytes, Physical type, Codec codec, int max_def,
                       std::size_t rows, const RawColumn& shape) {
  RawColumn col;
  col.sizes_only = shape.sizes_only;
  col.max_bytes = shape.max_bytes;
  col.rows = rows;
  col.width = physical_width(type);
  if (col.width == 0) col.offsets.assign(1, 0);
  std::size_t row = 0;
  decode_pages(bytes, type, codec, max_def, 0, rows,
               [&](const PageLevels& levels, const Values& values,
                   const std::vector<std::uint32_t>* indices) {
                 const std::size_t count = levels.def.size();
                 // The column grows page by page: what a forged row count claims is never
                 // allocated.
                 if (max_def > 0) col.valid.resize(row + count, 1);
                 if (col.width != 0) {
                   col.fixed.resize((row + count) * col.width, std::byte{0});
                 } else {
                   col.offsets.resize(row + count + 1, col.offsets.back());
                 }
                 place(col, row, levels.def, max_def, values, indices);
                 row += count;
               });
  // A chunk without nulls keeps no validity: a read then touches the values alone.
  if (std::find(col.valid.begin(), col.valid.end(), std::uint8_t{0}) == col.valid.end()) {
    col.valid = {};
  }
  return col;
}

}  // namespace ferry::detail::parquet
