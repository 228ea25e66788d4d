#include "ferry/csv_dataset.hpp"

#include <cstdint>
#include <cstring>
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
  std::vector<std::pair<std::string, Tensor>> columns{
      {"features", detail::view_rows(features, {rows, static_cast<std::int64_t>(t.num_features)})}};
  if (t.has_label && t.classes_mode) {
    columns.emplace_back("label", detail::view_rows(labels, {rows}));
  } else if (t.has_label) {
    columns.emplace_back("label", detail::view_rows(targets, {rows}));
  }
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
  if (device == this->device()) {
    ds->table_ = table_;
    ds->features_ = features_;
    ds->labels_ = labels_;
    ds->targets_ = targets_;
  } else if (device.is_cpu()) {
    // Back from a GPU: into host vectors again, which the tensors view.
    const std::vector<Tensor>& t = table_->tensors();
    auto features = detail::host_values<float>(t[0]);
    std::vector<std::pair<std::string, Tensor>> columns{
        {"features", detail::view_rows(features, t[0].shape())}};
    auto labels = std::make_shared<std::vector<std::int64_t>>();
    auto targets = std::make_shared<std::vector<float>>();
    if (t.size() > 1 && t[1].dtype() == DType::i64) {
      labels = detail::host_values<std::int64_t>(t[1]);
      columns.emplace_back("label", detail::view_rows(labels, t[1].shape()));
    } else if (t.size() > 1) {
      targets = detail::host_values<float>(t[1]);
      columns.emplace_back("label", detail::view_rows(targets, t[1].shape()));
    }
    ds->table_ = std::make_shared<TensorDataset>(std::move(columns));
    ds->features_ = std::move(features);
    ds->labels_ = std::move(labels);
    ds->targets_ = std::move(targets);
  } else {
    ds->table_ = table_->to(device);
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

}  // namespace ferry
