#include "ferry/csv_dataset.hpp"

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "datasets/csv_parse.hpp"
#include "datasets/file_io.hpp"

namespace ferry {

/// Fills a CsvDataset from a parsed table.
struct CsvBuilder {
  static std::shared_ptr<CsvDataset> build(detail::CsvTable t) {
    std::shared_ptr<CsvDataset> ds(new CsvDataset());
    ds->rows_ = t.rows;
    ds->num_features_ = t.num_features;
    ds->has_label_ = t.has_label;
    ds->classes_mode_ = t.classes_mode;
    ds->feature_names_ = std::move(t.feature_names);
    ds->classes_ = std::move(t.classes);
    ds->features_ = std::move(t.features);
    ds->labels_ = std::move(t.labels);
    ds->targets_ = std::move(t.targets);
    return ds;
  }
};

std::shared_ptr<CsvDataset> CsvDataset::open(const std::filesystem::path& path,
                                             const CsvOptions& options) {
  detail::check_csv_options(options);
  const std::string name = path.string();
  const detail::FileLabel label{"CsvDataset", name};
  const detail::MappedFile file(path, label, /*populate=*/true);
  if (detail::is_gzip(file.bytes())) {
    const std::string text =
        detail::gunzip(file.bytes(), label,
                       {options.max_decompressed_bytes, "CsvOptions::max_decompressed_bytes"});
    return CsvBuilder::build(detail::parse_csv(text, options, name));
  }
  const std::span<const std::byte> bytes = file.bytes();
  return CsvBuilder::build(detail::parse_csv(
      {reinterpret_cast<const char*>(bytes.data()), bytes.size()}, options, name));
}

std::vector<FieldSpec> CsvDataset::fields() const {
  std::vector<FieldSpec> out = {
      {"features", DType::f32, {static_cast<std::int64_t>(num_features_)}, {}}};
  if (has_label_) out.push_back({"label", classes_mode_ ? DType::i64 : DType::f32, {}, {}});
  return out;
}

void CsvDataset::read(std::size_t index, SampleRef out) const {
  std::memcpy(out.data(0), features_.data() + index * num_features_, num_features_ * sizeof(float));
  if (!has_label_) return;
  if (classes_mode_) {
    *out.as<std::int64_t>(1) = labels_[index];
  } else {
    *out.as<float>(1) = targets_[index];
  }
}

void CsvDataset::prefetch(std::size_t index) const noexcept {
  if (index >= rows_) return;
  const auto* row = reinterpret_cast<const char*>(features_.data() + index * num_features_);
  const std::size_t bytes = num_features_ * sizeof(float);
  for (std::size_t at = 0; at < bytes && at < 1024; at += 64) __builtin_prefetch(row + at);
  if (has_label_) {
    if (classes_mode_) {
      __builtin_prefetch(labels_.data() + index);
    } else {
      __builtin_prefetch(targets_.data() + index);
    }
  }
}

}  // namespace ferry
