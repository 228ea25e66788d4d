#pragma once

// What the table suites share to make their files at run time with tests/table's independent
// writers (node, with npm's apache-arrow and parquet-wasm in tests/table/node_modules), the
// fixed CPU loader they read them with, and a child process to run memory bombs and hangs in.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <new>
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

/// Runs `body` in a child process whose address space is limited to `address_space` bytes
/// (not under a sanitizer, which reserves far more) and which a timer of `seconds` kills.
/// Returns what `body` returned (say, the text of the error it caught), or what went wrong
/// instead: "std::bad_alloc", "an exception: ...", "killed by signal 14" (the timer).
/// The child starts threads: a case that calls it runs alone (FERRY_ALONE_CASES,
/// tests/CMakeLists.txt), as TSan refuses threads in the child of a process that has any.
inline std::string in_child(const std::function<std::string()>& body, std::uint64_t address_space,
                            unsigned seconds) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe() failed";
  const pid_t pid = ::fork();
  if (pid < 0) return "fork() failed";
  if (pid == 0) {
    ::close(fds[0]);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    const rlimit limit{address_space, address_space};
    ::setrlimit(RLIMIT_AS, &limit);
#else
    static_cast<void>(address_space);
#endif
    ::alarm(seconds);
    std::string said;
    try {
      said = body();
    } catch (const std::bad_alloc&) {
      said = "std::bad_alloc";
    } catch (const std::exception& e) {
      said = std::string("an exception: ") + e.what();
    }
    std::size_t at = 0;
    while (at < said.size()) {
      const ssize_t n = ::write(fds[1], said.data() + at, said.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string said;
  char buf[4096];
  for (ssize_t n = 0; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return said;
}

}  // namespace ferry::testing
