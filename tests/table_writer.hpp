#pragma once

// What the table suites share to make their files at run time with tests/table's independent
// writers (node, with npm's apache-arrow and parquet-wasm in tests/table/node_modules), and the
// fixed CPU loader they read them with.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ferry/ferry.hpp"

namespace ferry::testing {

/// Runs tests/table's writer `script` (tests/table/node_modules must hold `packages`) with
/// `args`, each quoted, its output dropped. Returns why a suite must be skipped (a package or
/// node missing, the writer failed), or an empty string.
inline std::string run_table_writer(const std::filesystem::path& source_dir,
                                    const std::string& script,
                                    const std::vector<std::string>& packages,
                                    const std::vector<std::string>& args) {
  const std::filesystem::path writer = source_dir / "tests/table";
  for (const std::string& package : packages) {
    if (!std::filesystem::exists(writer / "node_modules" / package)) {
      return package + " is not installed (scripts/setup runs npm ci in tests/table)";
    }
  }
  if (std::system("node --version >/dev/null 2>&1") != 0) return "node is not installed";
  std::string cmd = "node '" + (writer / script).string() + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " >/dev/null";
  if (std::system(cmd.c_str()) != 0) return script + " failed: " + cmd;
  return {};
}

/// A loader on the CPU with fixed options (no autotune).
inline LoaderOptions table_loader_options(std::size_t batch, bool shuffle, int workers,
                                          std::uint64_t seed) {
  LoaderOptions lo;
  lo.batch_size = batch;
  lo.shuffle = shuffle;
  lo.seed = seed;
  lo.workers = workers;
  lo.autotune = false;
  lo.device = Device::cpu();
  return lo;
}

/// The rows an epoch of `ds` delivers under ErrorPolicy::skip, in order (one worker, batches of
/// 4, no shuffle).
inline std::vector<std::uint64_t> rows_kept(const std::shared_ptr<const Dataset>& ds) {
  LoaderOptions lo = table_loader_options(4, false, 1, 0);
  lo.on_error = ErrorPolicy::skip;
  Loader loader(ds, lo);
  std::vector<std::uint64_t> rows;
  for (const Batch& b : loader.epoch(0)) {
    for (std::size_t j = 0; j < b.size(); ++j) rows.push_back(b.indices()[j]);
  }
  return rows;
}

}  // namespace ferry::testing
