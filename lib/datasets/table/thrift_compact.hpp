#pragma once

// A reader of Thrift's compact protocol, as Parquet's footer and page headers are written in it
// (the Thrift specification, "compact protocol"): enough to walk structs field by field, read
// their integers, strings and lists, and skip whatever a reader does not need. Every length is
// checked against the bytes left and nesting is bounded, so a corrupt or hostile buffer ends in
// ThriftError, never in a read past the buffer.

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ferry::detail::thrift {

/// What went wrong, without the file: the caller adds the file and the place.
class ThriftError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The compact protocol's element types.
enum class Type : std::uint8_t {
  stop = 0,
  bool_true = 1,
  bool_false = 2,
  i8 = 3,
  i16 = 4,
  i32 = 5,
  i64 = 6,
  dbl = 7,
  binary = 8,
  list = 9,
  set = 10,
  map = 11,
  strct = 12,
};

/// One field's header: its id and type (stop: the struct ended).
struct FieldHeader {
  std::int16_t id = 0;
  Type type = Type::stop;
};

/// A list's (or set's) header.
struct ListHeader {
  std::size_t size = 0;
  Type element = Type::stop;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) noexcept : bytes_(bytes) {}

  /// Bytes consumed so far.
  std::size_t position() const noexcept { return pos_; }

  /// The next field of the struct being read; call begin_struct() before the first field of a
  /// nested struct and end_struct() after its stop.
  FieldHeader field();
  void begin_struct();
  void end_struct();

  /// A field's value, by its type.
  bool read_bool(Type t);  // a field's bool is in its type; a list's bool is a byte
  std::int64_t read_int(Type t);
  std::string_view read_binary();
  ListHeader read_list();
  double read_double();
  /// Skips a value of type `t` (structs, lists and maps included).
  void skip(Type t);

 private:
  std::uint64_t varint();
  std::uint8_t byte();
  void need(std::size_t n) const;

  std::span<const std::byte> bytes_;
  std::size_t pos_ = 0;
  std::int16_t last_id_ = 0;
  std::int16_t stack_[64] = {};
  std::size_t depth_ = 0;
  static constexpr std::size_t kMaxSkipDepth = 64;  // lists, sets and maps skipped, nested
  std::size_t skip_depth_ = 0;
};

}  // namespace ferry::detail::thrift
