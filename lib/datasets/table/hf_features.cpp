#include "datasets/table/hf_features.hpp"

#include <cctype>

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
  /// A string's text, its escapes as written (names and "_type" values have none).
  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    const std::size_t start = i_;
    for (; i_ < s_.size() && s_[i_] != '"'; ++i_) {
      if (s_[i_] == '\\') ++i_;
    }
    if (i_ >= s_.size()) return false;
    out = s_.substr(start, i_ - start);
    ++i_;
    return true;
  }
  /// Steps over one value of any kind, nested at most 64 deep.
  bool skip(int depth = 0) {
    if (depth > 64) return false;
    std::string_view ignored;
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
    do {
      std::string_view name;
      if (!string(name) || !eat(':') || !member(name)) return false;
    } while (eat(','));
    return eat('}');
  }

 private:
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
          std::string_view type;
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
