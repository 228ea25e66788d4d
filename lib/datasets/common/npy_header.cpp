#include "datasets/common/npy_header.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "ferry/error.hpp"

namespace ferry::detail {

namespace {

// Reads the Python literal of a .npy header: a dict of string keys whose values are a string,
// True/False or a tuple of non-negative integers. Errors name the byte of the file.
class NpyParser {
 public:
  NpyParser(std::string_view text, std::size_t offset, const FileLabel& label)
      : text_(text), offset_(offset), label_(label) {}

  NpyHeader parse() {
    NpyHeader h;
    constexpr std::array<const char*, 3> kKeys = {"descr", "fortran_order", "shape"};
    std::array<bool, 3> seen = {false, false, false};
    blanks();
    expect('{', "the header dict's '{'");
    for (;;) {
      blanks();
      if (peek() == '}') break;
      const std::size_t key_at = pos_;
      const std::string key = string_literal("a key");
      blanks();
      expect(':', "':' after the key");
      blanks();
      std::size_t k = 0;
      if (key == "descr") {
        k = 0;
        if (peek() != '\'' && peek() != '"') {
          fail("'descr' is not a string (structured dtypes are not token files)");
        }
        h.descr = string_literal("the descr string");
      } else if (key == "fortran_order") {
        k = 1;
        h.fortran_order = boolean();
      } else if (key == "shape") {
        k = 2;
        h.shape = tuple();
      } else {
        fail_at(key_at, "unexpected key '" + key + "' (expected descr, fortran_order, shape)");
      }
      if (seen[k]) fail_at(key_at, "key '" + key + "' appears twice");
      seen[k] = true;
      blanks();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail("expected ',' or '}' after the value of '" + key + "'");
    }
    ++pos_;  // '}'
    blanks();
    if (pos_ != text_.size()) fail("unexpected text after the header dict");
    for (std::size_t k = 0; k < kKeys.size(); ++k) {
      if (!seen[k]) fail(std::string("the header dict has no '") + kKeys[k] + "'");
    }
    return h;
  }

 private:
  char peek() const noexcept { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void blanks() noexcept {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  [[noreturn]] void fail_at(std::size_t pos, const std::string& what) const {
    throw DataError(label_.at(offset_ + pos) + "bad .npy header: " + what);
  }
  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }

  void expect(char c, const char* what) {
    if (peek() != c) fail(std::string("expected ") + what);
    ++pos_;
  }

  std::string string_literal(const char* what) {
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail(std::string("expected ") + what + " in quotes");
    const std::size_t start = ++pos_;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escapes in strings are not expected in a .npy header");
      ++pos_;
    }
    if (pos_ == text_.size()) fail_at(start - 1, std::string(what) + " is not closed");
    return std::string(text_.substr(start, pos_++ - start));
  }

  bool boolean() {
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true},
                                      std::pair<std::string_view, bool>{"False", false}}) {
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    }
    fail("'fortran_order' is not True or False");
  }

  std::vector<std::uint64_t> tuple() {
    const std::size_t start = pos_;
    expect('(', "'(' of the shape tuple");
    std::vector<std::uint64_t> dims;
    bool comma = false;  // after the last dimension
    for (;;) {
      blanks();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("expected a non-negative integer in the shape");
      std::uint64_t d = 0;
      const char* first = text_.data() + pos_;
      const auto [end, error] = std::from_chars(first, text_.data() + text_.size(), d);
      if (error != std::errc()) fail("a dimension of the shape is beyond 2^64");
      pos_ += static_cast<std::size_t>(end - first);
      if (peek() == 'L') ++pos_;  // Python 2's long
      dims.push_back(d);
      blanks();
      comma = peek() == ',';
      if (comma) {
        ++pos_;
        continue;
      }
      if (peek() != ')') fail("expected ',' or ')' in the shape");
    }
    ++pos_;
    // Python reads (n) as the number n: a tuple of one is written (n,).
    if (dims.size() == 1 && !comma) fail_at(start, "the shape is a number, not a tuple (n,)");
    return dims;
  }

  std::string_view text_;
  std::size_t offset_;  // of text_ in the file
  const FileLabel& label_;
  std::size_t pos_ = 0;
};

}  // namespace

NpyHeader parse_npy_header(std::string_view text, std::size_t offset, const FileLabel& label) {
  return NpyParser(text, offset, label).parse();
}

// The token type of a .npy descr; throws for one that is not a little-endian integer of ours.
DType npy_dtype(const std::string& descr, const FileLabel& label, std::size_t at) {
  const auto bad = [&](const std::string& why) -> DataError {
    return DataError(label.at(at) + "descr '" + descr + "': " + why);
  };
  if (descr.size() < 3) throw bad("not a NumPy dtype");
  const char order = descr[0];
  const std::string_view kind = std::string_view(descr).substr(1);
  struct Kind {
    std::string_view text;
    DType dtype;
  };
  static constexpr Kind kKinds[] = {{"u1", DType::u8},
                                    {"u2", DType::u16},
                                    {"u4", DType::u32},
                                    {"i4", DType::i32},
                                    {"i8", DType::i64}};
  for (const Kind& k : kKinds) {
    if (k.text != kind) continue;
    if (order == '<' || ((order == '|' || order == '>') && k.dtype == DType::u8)) return k.dtype;
    if (order == '>') throw bad("big-endian tokens are not supported (byte-swap the array first)");
    if (order == '=' || order == '|') {
      throw bad("byte order '" + std::string(1, order) + "' is not little-endian ('<')");
    }
    break;
  }
  throw bad("tokens must be u1, u2, u4, i4 or i8 integers, little-endian ('<u2', ...)");
}

}  // namespace ferry::detail
