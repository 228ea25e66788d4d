#include "ferry/csv_dataset.hpp"

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "datasets/common/file_io.hpp"
#include "datasets/common/host_rows.hpp"
#include "datasets/csv/csv_parse.hpp"
#include "datasets/remote/remote_cache.hpp"
#include "ferry/error.hpp"

namespace ferry {

/// Makes a CsvDataset of a parsed table: its values become the tensors' rows, without a copy.
std::shared_ptr<CsvDataset> CsvDataset::from_table(detail::CsvTable t) {
  std::shared_ptr<CsvDataset> ds(new CsvDataset());
  const auto rows = static_cast<std::int64_t>(t.rows);
  ds->num_features_ = t.num_features;
  ds->feature_names_ = std::make_shared<std::vector<std::string>>(std::move(t.feature_names));
  ds->classes_ = std::make_shared<std::vector<std::string>>(std::move(t.classes));
  auto features = std::make_shared<std::vector<float>>(std::move(t.features));
  auto labels = std::make_shared<std::vector<std::int64_t>>(std::move(t.labels));
  auto targets = std::make_shared<std::vector<float>>(std::move(t.targets));
  std::vector<std::pair<std::string, Tensor>> columns;
  if (t.num_features != 0) {  // none when every feature is categorical
    columns.emplace_back(
        "features", detail::view_rows(features, {rows, static_cast<std::int64_t>(t.num_features)}));
  }
  if (t.has_label && t.classes_mode) {
    columns.emplace_back("label", detail::view_rows(labels, {rows}));
  } else if (t.has_label) {
    columns.emplace_back("label", detail::view_rows(targets, {rows}));
  }
  auto names = std::make_shared<std::vector<std::string>>();
  for (detail::CsvCategorical& c : t.categorical) {
    auto codes = std::make_shared<std::vector<std::int64_t>>(std::move(c.codes));
    columns.emplace_back(c.name, detail::view_rows(codes, {rows}));
    names->push_back(c.name);
    ds->categorical_.push_back({c.name,
                                std::make_shared<std::vector<std::string>>(std::move(c.categories)),
                                std::move(codes)});
  }
  ds->categorical_names_ = std::move(names);
  ds->table_ = std::make_shared<TensorDataset>(std::move(columns));
  ds->features_ = std::move(features);
  ds->labels_ = std::move(labels);
  ds->targets_ = std::move(targets);
  return ds;
}

std::shared_ptr<CsvDataset> CsvDataset::open(const std::filesystem::path& path,
                                             const CsvOptions& options) {
  detail::check_csv_options(options);
  const std::string name = path.string();
  const detail::FileLabel label{"CsvDataset", name};
  // A URL is fetched into the cache first, and read from there; messages name the URL.
  const detail::remote::LocalFile local =
      detail::remote::local_file(path, options.remote, "CsvDataset");
  const detail::MappedFile file(local.path, label, /*populate=*/true);
  if (detail::is_gzip(file.bytes())) {
    const std::string text =
        detail::gunzip(file.bytes(), label,
                       {options.max_decompressed_bytes, "CsvOptions::max_decompressed_bytes"});
    return from_table(detail::parse_csv(text, options, name));
  }
  const std::span<const std::byte> bytes = file.bytes();
  return from_table(detail::parse_csv({reinterpret_cast<const char*>(bytes.data()), bytes.size()},
                                      options, name));
}

std::shared_ptr<CsvDataset> CsvDataset::to(Device device) const {
  std::shared_ptr<CsvDataset> ds(new CsvDataset());
  ds->num_features_ = num_features_;
  ds->feature_names_ = feature_names_;
  ds->classes_ = classes_;
  ds->categorical_names_ = categorical_names_;
  ds->categorical_ = categorical_;
  if (device == this->device()) {
    ds->table_ = table_;
    ds->features_ = features_;
    ds->labels_ = labels_;
    ds->targets_ = targets_;
  } else if (device.is_cpu()) {
    // Back from a GPU: into host vectors again, which the tensors view. The fields are
    // "features" (unless every feature is categorical), "label" (unless there is none), then
    // the categorical columns in order.
    const std::vector<Tensor>& t = table_->tensors();
    std::vector<std::pair<std::string, Tensor>> columns;
    auto features = std::make_shared<std::vector<float>>();
    auto labels = std::make_shared<std::vector<std::int64_t>>();
    auto targets = std::make_shared<std::vector<float>>();
    std::size_t f = 0;
    if (num_features_ != 0) {
      features = detail::host_values<float>(t[f]);
      columns.emplace_back("features", detail::view_rows(features, t[f].shape()));
      ++f;
    }
    if (t.size() > f + categorical_.size()) {  // a label
      if (t[f].dtype() == DType::i64) {
        labels = detail::host_values<std::int64_t>(t[f]);
        columns.emplace_back("label", detail::view_rows(labels, t[f].shape()));
      } else {
        targets = detail::host_values<float>(t[f]);
        columns.emplace_back("label", detail::view_rows(targets, t[f].shape()));
      }
      ++f;
    }
    for (Categorical& c : ds->categorical_) {
      auto codes = detail::host_values<std::int64_t>(t[f]);
      columns.emplace_back(c.name, detail::view_rows(codes, t[f].shape()));
      c.codes = std::move(codes);
      ++f;
    }
    ds->table_ = std::make_shared<TensorDataset>(std::move(columns));
    ds->features_ = std::move(features);
    ds->labels_ = std::move(labels);
    ds->targets_ = std::move(targets);
  } else {
    ds->table_ = table_->to(device);
    for (Categorical& c : ds->categorical_) c.codes = nullptr;
  }
  return ds;
}

namespace {

template <class T>
const T& on_host(const std::shared_ptr<const T>& values, const char* what, Device device) {
  if (!values) {
    throw ConfigError(std::string("CsvDataset: ") + what +
                      " are host memory, and the rows are on " + device.str() +
                      " (to(Device::cpu()) brings them back)");
  }
  return *values;
}

}  // namespace

const std::vector<float>& CsvDataset::features() const {
  return on_host(features_, "features()", device());
}

const std::vector<std::int64_t>& CsvDataset::labels() const {
  return on_host(labels_, "labels()", device());
}

const std::vector<float>& CsvDataset::targets() const {
  return on_host(targets_, "targets()", device());
}

const std::vector<std::string>& CsvDataset::categorical_names() const noexcept {
  return *categorical_names_;
}

const CsvDataset::Categorical& CsvDataset::categorical(std::string_view name) const {
  for (const Categorical& c : categorical_) {
    if (c.name == name) return c;
  }
  std::string list;
  for (const Categorical& c : categorical_) list += (list.empty() ? "\"" : ", \"") + c.name + "\"";
  throw ConfigError("CsvDataset: \"" + std::string(name) + "\" is not a categorical column" +
                    (list.empty() ? std::string(" (there are none: CsvOptions::categorical)")
                                  : " (they are " + list + ")"));
}

const std::vector<std::string>& CsvDataset::categories(std::string_view name) const {
  return *categorical(name).categories;
}

std::map<std::string, std::vector<std::string>> CsvDataset::vocabulary() const {
  std::map<std::string, std::vector<std::string>> out;
  for (const Categorical& c : categorical_) out.emplace(c.name, *c.categories);
  return out;
}

const std::vector<std::int64_t>& CsvDataset::codes(std::string_view name) const {
  return on_host(categorical(name).codes, "codes()", device());
}

CsvOptions& CsvOptions::categories_from(const CsvDataset& train) {
  vocabulary = train.vocabulary();
  return *this;
}

}  // namespace ferry
