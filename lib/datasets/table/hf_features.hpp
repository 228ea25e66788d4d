#pragma once

// The Hugging Face `datasets` features a table file declares (the "huggingface" key of its
// metadata: JSON, {"info": {"features": {"<column>": {"_type": "Image", ...}, ...}}}), as far as
// the table datasets need them: which columns are images.

#include <string>
#include <string_view>
#include <vector>

#include "ferry/table.hpp"

namespace ferry::detail {

/// The columns whose feature is an Image ({"_type": "Image"}) in `json`, in its order; none for
/// metadata that is not such JSON (a table reads without it).
std::vector<std::string> hf_image_columns(std::string_view json);
/// The columns whose feature is `type` ("Image", "Audio") in `json`, in its order.
std::vector<std::string> hf_feature_columns(std::string_view json, std::string_view type);

/// Adds to `o.images` the columns that the features in `json` make images and that are read
/// (among o.columns, or all of them), not categorical, and in the file (`has(name)`): they
/// decode as if named in images.
template <class Has>
void add_hf_images(TableOptions& o, std::string_view json, const Has& has) {
  const auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    for (const std::string& n : names) {
      if (n == name) return true;
    }
    return false;
  };
  for (std::string& name : hf_image_columns(json)) {
    if (listed(o.images, name) || listed(o.categorical, name) || listed(o.audio, name) ||
        !has(name) || (!o.columns.empty() && !listed(o.columns, name))) {
      continue;
    }
    o.images.push_back(std::move(name));
  }
}

/// add_hf_images() for the columns whose feature is Audio: they decode as if named in audio.
template <class Has>
void add_hf_audio(TableOptions& o, std::string_view json, const Has& has) {
  const auto listed = [](const std::vector<std::string>& names, const std::string& name) {
    for (const std::string& n : names) {
      if (n == name) return true;
    }
    return false;
  };
  for (std::string& name : hf_feature_columns(json, "Audio")) {
    if (listed(o.audio, name) || listed(o.images, name) || listed(o.categorical, name) ||
        !has(name) || (!o.columns.empty() && !listed(o.columns, name))) {
      continue;
    }
    o.audio.push_back(std::move(name));
  }
}

}  // namespace ferry::detail
