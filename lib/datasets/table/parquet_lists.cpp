#include "datasets/table/parquet_lists.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "datasets/table/arrow_table.hpp"

namespace ferry::detail::parquet {
namespace {

constexpr std::int64_t kMaxRowValues = std::int64_t{1} << 31;  // a fixed shape's values

/// Builds rows from (repetition, definition) level pairs, one pair at a time, across pages
/// (a row may begin on one page and end on another).
class ListBuilder {
 public:
  ListBuilder(const ListLevels& levels, const std::vector<std::int64_t>& shape, RawColumn& col)
      : lv_(levels),
        shape_(shape),
        col_(col),
        len_(levels.defined.size(), 0),
        open_(levels.defined.size(), false) {}

  void page(const PageLevels& levels, const Values& values,
            const std::vector<std::uint32_t>* indices) {
    std::size_t next = 0;  // the page's next value
    for (std::size_t i = 0; i < levels.def.size(); ++i) {
      const std::uint32_t r = levels.rep.empty() ? 0 : levels.rep[i];
      const auto d = static_cast<int>(levels.def[i]);
      if (!entry(r, d)) continue;
      std::size_t at = next++;
      if (indices != nullptr) at = (*indices)[at];
      if (at >= values.count) {
        throw ChunkError("a dictionary index " + std::to_string(at) + " past the dictionary's " +
                         std::to_string(values.count) + " values");
      }
      const std::size_t w = col_.width;
      col_.fixed.insert(col_.fixed.end(),
                        values.fixed.begin() + static_cast<std::ptrdiff_t>(at * w),
                        values.fixed.begin() + static_cast<std::ptrdiff_t>((at + 1) * w));
    }
  }

  void finish(std::size_t rows) {
    if (started_) close_from(0);
    col_.offsets.push_back(col_.fixed.size() / col_.width);
    if (col_.rows != rows) {
      throw ChunkError("its levels make " + std::to_string(col_.rows) +
                       " rows where the row "
                       "group has " +
                       std::to_string(rows));
    }
  }

 private:
  /// One level pair; whether a value follows (then the caller appends it).
  bool entry(std::uint32_t r, int d) {
    const std::size_t depth = lv_.defined.size();
    if (r == 0) {
      if (started_) close_from(0);
      start_row();
    } else {
      if (!started_) throw ChunkError("the first value continues a row (repetition level > 0)");
      close_from(r);
      const std::size_t k = r - 1;  // the list that gets another element
      if (!open_[k] || len_[k] == 0 || d < lv_.filled[k]) {
        throw ChunkError("a repetition level " + std::to_string(r) + " with definition level " +
                         std::to_string(d) + ": an element of a list that is empty or null");
      }
      ++len_[k];
    }
    for (std::size_t k = r; k < depth; ++k) {  // the lists that begin here
      if (d < lv_.defined[k]) {
        if (k == 0) {
          col_.valid.back() = 0;
        } else {
          col_.null_inside.back() = 1;
        }
        return false;
      }
      open_[k] = true;
      len_[k] = 0;
      if (d < lv_.filled[k]) return false;
      len_[k] = 1;
    }
    if (d == lv_.value_def) return true;
    col_.null_inside.back() = 1;  // a null element: its place kept, zero
    col_.fixed.resize(col_.fixed.size() + col_.width, std::byte{0});
    return false;
  }

  void start_row() {
    started_ = true;
    ++col_.rows;
    col_.valid.push_back(1);
    col_.null_inside.push_back(0);
    col_.lengths.push_back(0);
    col_.offsets.push_back(col_.fixed.size() / col_.width);
  }

  /// Ends the open lists of levels `level` and deeper, checking their lengths.
  void close_from(std::size_t level) {
    const std::size_t row = col_.rows - 1;
    for (std::size_t k = open_.size(); k-- > level;) {
      if (!open_[k]) continue;
      open_[k] = false;
      if (k == 0) col_.lengths.back() = static_cast<std::uint32_t>(len_[k]);
      if (shape_[k] >= 0 && len_[k] != shape_[k] &&
          (col_.wrong.empty() || col_.wrong.back().row != row)) {
        col_.wrong.push_back({row, k, static_cast<std::uint64_t>(len_[k])});
      }
    }
  }

  const ListLevels& lv_;
  const std::vector<std::int64_t>& shape_;
  RawColumn& col_;
  std::vector<std::int64_t> len_;  // per level: the open list's elements so far
  std::vector<bool> open_;         // per level: a list is open (there, not null)
  bool started_ = false;
};

int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

RawColumn decode_list_chunk(std::span<const std::byte> bytes, Physical type, Codec codec,
                            const ListLevels& levels, const std::vector<std::int64_t>& shape,
                            std::size_t total, std::size_t rows) {
  RawColumn col;
  col.list = true;
  col.width = physical_width(type);
  if (col.width == 0) throw ChunkError("a list of byte arrays, which ferry does not read");
  ListBuilder builder(levels, shape, col);
  decode_pages(bytes, type, codec, levels.value_def, static_cast<int>(levels.defined.size()), total,
               [&](const PageLevels& page_levels, const Values& values,
                   const std::vector<std::uint32_t>* indices) {
                 builder.page(page_levels, values, indices);
               });
  builder.finish(rows);
  // Without nulls, neither is kept: a read then touches the offsets and values alone.
  if (std::find(col.valid.begin(), col.valid.end(), std::uint8_t{0}) == col.valid.end()) {
    col.valid = {};
  }
  if (std::find(col.null_inside.begin(), col.null_inside.end(), std::uint8_t{1}) ==
      col.null_inside.end()) {
    col.null_inside = {};
  }
  return col;
}

std::optional<std::vector<arrow::Field>> stored_arrow_schema(std::string_view base64) {
  if (base64.empty()) return std::nullopt;
  std::vector<std::byte> bytes;
  bytes.reserve(base64.size() / 4 * 3 + 3);
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : base64) {
    if (c == '=') break;
    const int v = base64_digit(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<std::uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<std::byte>((acc >> bits) & 0xff));
    }
  }
  try {
    arrow::Frame frame = arrow::read_frame(bytes, 0);
    if (frame.end || frame.message.type != arrow::HeaderType::schema) return std::nullopt;
    return std::move(frame.message.schema.fields);
  } catch (const arrow::FormatError&) {
    return std::nullopt;
  }
}

std::optional<std::vector<std::int64_t>> list_shape(const TopColumn& c, const arrow::Field* f,
                                                    const std::string& what) {
  const std::size_t depth = c.depth();
  if (depth == 0) return std::nullopt;
  if (f != nullptr) {
    ArrowColumn array;
    if (depth > 1 &&
        map_hf_array(*f, array, what + " (ARROW:schema: " + arrow::type_text(*f) + ")") &&
        array.shape.size() == depth) {
      return array.shape;
    }
    std::vector<std::int64_t> shape;
    std::int64_t values = 1;
    const arrow::Field* level = f;
    for (std::size_t k = 0; k < depth && level->children.size() == 1 && !level->dictionary; ++k) {
      if (level->type == arrow::TypeId::fixed_size_list && level->list_size > 0) {
        shape.push_back(level->list_size);
        values *= level->list_size;
      } else if (k == 0 &&
                 (level->type == arrow::TypeId::list || level->type == arrow::TypeId::large_list)) {
        shape.push_back(-1);
      } else {
        break;
      }
      if (values > kMaxRowValues) break;
      level = &level->children[0];
    }
    if (shape.size() == depth && level->children.empty()) return shape;
  }
  if (depth == 1) return std::vector<std::int64_t>{-1};
  return std::nullopt;
}

}  // namespace ferry::detail::parquet
