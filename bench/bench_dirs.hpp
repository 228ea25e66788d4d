// Where the checkout and the build tree are, for a benchmark that runs the repository's scripts
// (bench/py, bench/table) or finds the Python module it built. The paths are compiled into one
// object (bench_dirs.cpp), not defined on each benchmark's command line: a definition's value is
// hashed as written, so every benchmark's object would miss ccache in a clone at another path.
#pragma once

#include <string>

namespace ferry::bench {

/// The checkout's root, with no trailing slash.
std::string source_dir();

/// The build tree's root (CMake's PROJECT_BINARY_DIR), with no trailing slash.
std::string binary_dir();

}  // namespace ferry::bench
