#include "datasets/table/hf_features.hpp"

#include <cctype>
#include <cstdint>

namespace ferry::detail {
namespace {

/// A JSON reader over `s` that checks every step: a false answer leaves it failed, and the
/// caller gives up on the metadata.
class Json {
 public:
  explicit Json(std::string_view s) : s_(s) {}

  bool eat(char c) {
    space();
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  bool at(char c) {
    space();
    return i_ < s_.size() && s_[i_] == c;
  }
  /// A string's text, its escapes decoded (\n, \", \uXXXX with surrogate pairs, to UTF-8; a
  /// lone surrogate becomes U+FFFD), as Python's json.dumps writes non-ASCII names.
  bool string(std::string& out) {
    out.clear();
    if (!eat('"')) return false;
    for (; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (s_[i_] != '\\') {
        out.push_back(s_[i_]);
        continue;
      }
      if (++i_ >= s_.size() || !escape(out)) return false;
    }
    if (i_ >= s_.size()) return false;
    ++i_;
    return true;
  }
  /// Steps over one value of any kind, nested at most 64 deep.
  bool skip(int depth = 0) {
    if (depth > 64) return false;
    std::string ignored;
    if (at('"')) return string(ignored);
    if (eat('{')) {
      if (eat('}')) return true;
      do {
        if (!string(ignored) || !eat(':') || !skip(depth + 1)) return false;
      } while (eat(','));
      return eat('}');
    }
    if (eat('[')) {
      if (eat(']')) return true;
      do {
        if (!skip(depth + 1)) return false;
      } while (eat(','));
      return eat(']');
    }
    const std::size_t start = i_;  // a number, true, false or null
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) != 0 ||
                              s_[i_] == '-' || s_[i_] == '+' || s_[i_] == '.')) {
      ++i_;
    }
    return i_ > start;
  }
  /// The members of an object, each handed to `member(name)`, which reads its value.
  template <class F>
  bool object(F&& member) {
    if (!eat('{')) return false;
    if (eat('}')) return true;
    std::string name;
    do {
      if (!string(name) || !eat(':') || !member(name)) return false;
    } while (eat(','));
    return eat('}');
  }

 private:
  /// The escape whose letter is at s_[i_], appended to `out`; i_ ends on its last character.
  bool escape(std::string& out) {
    switch (s_[i_]) {
      case '"':
      case '\\':
      case '/':
        out.push_back(s_[i_]);
        return true;
      case 'b':
        out.push_back('\b');
        return true;
      case 'f':
        out.push_back('\f');
        return true;
      case 'n':
        out.push_back('\n');
        return true;
      case 'r':
        out.push_back('\r');
        return true;
      case 't':
        out.push_back('\t');
        return true;
      case 'u':
        break;
      default:
        return false;
    }
    std::uint32_t code = 0;
    if (!hex4(code)) return false;
    if (code >= 0xD800 && code < 0xDC00 && i_ + 2 < s_.size() && s_[i_ + 1] == '\\' &&
        s_[i_ + 2] == 'u') {
      const std::size_t back = i_;
      i_ += 2;
      std::uint32_t low = 0;
      if (!hex4(low)) return false;
      if (low >= 0xDC00 && low < 0xE000) {
        code = 0x10000 + ((code - 0xD800) << 10U) + (low - 0xDC00);
      } else {
        i_ = back;  // a lone high surrogate; the next escape reads on its own
      }
    }
    if (code >= 0xD800 && code < 0xE000) code = 0xFFFD;
    utf8(code, out);
    return true;
  }
  /// The four hex digits after s_[i_] ('u'), into `code`; i_ ends on the last.
  bool hex4(std::uint32_t& code) {
    if (s_.size() - i_ < 5) return false;
    code = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[++i_];
      std::uint32_t digit = 0;
      if (c >= '0' && c <= '9') {
        digit = static_cast<std::uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        digit = static_cast<std::uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        digit = static_cast<std::uint32_t>(c - 'A' + 10);
      } else {
        return false;
      }
      code = (code << 4U) | digit;
    }
    return true;
  }
  static void utf8(std::uint32_t code, std::string& out) {
    const auto byte = [&](std::uint32_t b) { out.push_back(static_cast<char>(b)); };
    if (code < 0x80) {
      byte(code);
    } else if (code < 0x800) {
      byte(0xC0U | (code >> 6U));
      byte(0x80U | (code & 0x3FU));
    } else if (code < 0x10000) {
      byte(0xE0U | (code >> 12U));
      byte(0x80U | ((code >> 6U) & 0x3FU));
      byte(0x80U | (code & 0x3FU));
    } else {
      byte(0xF0U | (code >> 18U));
      byte(0x80U | ((code >> 12U) & 0x3FU));
      byte(0x80U | ((code >> 6U) & 0x3FU));
      byte(0x80U | (code & 0x3FU));
    }
  }
  void space() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_])) != 0) ++i_;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::vector<std::string> hf_image_columns(std::string_view json) {
  return hf_feature_columns(json, "Image");
}

std::vector<std::string> hf_feature_columns(std::string_view json, std::string_view wanted) {
  std::vector<std::string> images;
  Json j(json);
  const bool ok = j.object([&](std::string_view key) {
    if (key != "info") return j.skip();
    return j.object([&](std::string_view info_key) {
      if (info_key != "features" || !j.at('{')) return j.skip();
      return j.object([&](std::string_view column) {
        if (!j.at('{')) return j.skip();
        bool image = false;
        const bool read = j.object([&](std::string_view field) {
          std::string type;
          if (field != "_type" || !j.at('"')) return j.skip();
          if (!j.string(type)) return false;
          image = type == wanted;
          return true;
        });
        if (read && image) images.emplace_back(column);
        return read;
      });
    });
  });
  if (!ok) images.clear();
  return images;
}

}  // namespace ferry::detail
