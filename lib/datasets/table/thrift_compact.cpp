#include "datasets/table/thrift_compact.hpp"

#include <cstring>

namespace ferry::detail::thrift {
namespace {

std::int64_t unzigzag(std::uint64_t v) noexcept {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

}  // namespace

void Reader::need(std::size_t n) const {
  if (n > bytes_.size() - pos_) {
    throw ThriftError("ends early (a value of " + std::to_string(n) + " bytes at byte " +
                      std::to_string(pos_) + " of " + std::to_string(bytes_.size()) + ")");
  }
}

std::uint8_t Reader::byte() {
  need(1);
  return static_cast<std::uint8_t>(bytes_[pos_++]);
}

std::uint64_t Reader::varint() {
  std::uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const std::uint8_t b = byte();
    v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  throw ThriftError("a varint longer than 10 bytes at byte " + std::to_string(pos_));
}

void Reader::begin_struct() {
  if (depth_ == std::size(stack_)) throw ThriftError("structs nested too deep");
  stack_[depth_++] = last_id_;
  last_id_ = 0;
}

void Reader::end_struct() {
  if (depth_ == 0) throw ThriftError("a struct ends that never began");
  last_id_ = stack_[--depth_];
}

FieldHeader Reader::field() {
  const std::uint8_t b = byte();
  const auto type = static_cast<Type>(b & 0x0f);
  if (type == Type::stop) return {};
  if (static_cast<std::uint8_t>(type) > static_cast<std::uint8_t>(Type::strct)) {
    throw ThriftError("unknown field type " + std::to_string(b & 0x0f) + " at byte " +
                      std::to_string(pos_ - 1));
  }
  const int delta = b >> 4;
  std::int64_t id = 0;
  if (delta != 0) {
    id = last_id_ + delta;
  } else {
    id = unzigzag(varint());
  }
  if (id < -32768 || id > 32767) throw ThriftError("a field id out of range");
  last_id_ = static_cast<std::int16_t>(id);
  return {last_id_, type};
}

bool Reader::read_bool(Type t) {
  if (t == Type::bool_true) return true;
  if (t == Type::bool_false) return false;
  const std::uint8_t b = byte();  // an element of a list
  return b == 1;
}

std::int64_t Reader::read_int(Type t) {
  switch (t) {
    case Type::i8:
      return static_cast<std::int8_t>(byte());
    case Type::i16:
    case Type::i32:
    case Type::i64:
      return unzigzag(varint());
    default:
      throw ThriftError("an integer expected, found type " + std::to_string(static_cast<int>(t)) +
                        " at byte " + std::to_string(pos_));
  }
}

double Reader::read_double() {
  need(8);
  double d = 0;
  std::memcpy(&d, bytes_.data() + pos_, 8);
  pos_ += 8;
  return d;
}

std::string_view Reader::read_binary() {
  const std::uint64_t n = varint();
  if (n > bytes_.size() - pos_) {
    throw ThriftError("a string of " + std::to_string(n) + " bytes at byte " +
                      std::to_string(pos_) + " goes past the end (" +
                      std::to_string(bytes_.size()) + " bytes)");
  }
  const auto* p = reinterpret_cast<const char*>(bytes_.data() + pos_);
  pos_ += n;
  return {p, static_cast<std::size_t>(n)};
}

ListHeader Reader::read_list() {
  const std::uint8_t b = byte();
  std::uint64_t n = b >> 4;
  if (n == 15) n = varint();
  // Each element takes at least one byte (but bools in a list: one byte too).
  if (n > bytes_.size() - pos_) {
    throw ThriftError("a list of " + std::to_string(n) + " elements at byte " +
                      std::to_string(pos_) + " cannot fit in the bytes left");
  }
  return {static_cast<std::size_t>(n), static_cast<Type>(b & 0x0f)};
}

void Reader::skip(Type t) {
  // Lists, sets and maps nest as structs do: each level a call deeper, so their depth is bounded
  // alike (a footer of 50 KB nesting a list 50,000 deep overflowed the stack).
  struct Level {  // leaves the level however skip() ends
    std::size_t* depth = nullptr;
    Level() = default;
    Level(const Level&) = delete;
    Level& operator=(const Level&) = delete;
    ~Level() {
      if (depth != nullptr) --*depth;
    }
  } level;
  if (t == Type::list || t == Type::set || t == Type::map) {
    if (skip_depth_ == kMaxSkipDepth) throw ThriftError("values nested too deep");
    ++skip_depth_;
    level.depth = &skip_depth_;
  }
  switch (t) {
    case Type::bool_true:
    case Type::bool_false:
      return;
    case Type::i8:
      byte();
      return;
    case Type::i16:
    case Type::i32:
    case Type::i64:
      varint();
      return;
    case Type::dbl:
      need(8);
      pos_ += 8;
      return;
    case Type::binary:
      read_binary();
      return;
    case Type::list:
    case Type::set: {
      const ListHeader h = read_list();
      const Type e =
          h.element == Type::bool_true || h.element == Type::bool_false ? Type::i8 : h.element;
      for (std::size_t i = 0; i < h.size; ++i) skip(e);
      return;
    }
    case Type::map: {
      const std::uint64_t n = varint();
      if (n == 0) return;
      if (n > bytes_.size() - pos_) throw ThriftError("a map larger than the bytes left");
      const std::uint8_t kv = byte();
      auto fix = [](Type x) {
        return x == Type::bool_true || x == Type::bool_false ? Type::i8 : x;
      };
      const Type k = fix(static_cast<Type>(kv >> 4));
      const Type v = fix(static_cast<Type>(kv & 0x0f));
      for (std::uint64_t i = 0; i < n; ++i) {
        skip(k);
        skip(v);
      }
      return;
    }
    case Type::strct: {
      begin_struct();
      for (FieldHeader f = field(); f.type != Type::stop; f = field()) skip(f.type);
      end_struct();
      return;
    }
    case Type::stop:
      break;
  }
  throw ThriftError("a value of unknown type " + std::to_string(static_cast<int>(t)) + " at byte " +
                    std::to_string(pos_));
}

}  // namespace ferry::detail::thrift
