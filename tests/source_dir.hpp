// Where the checkout is, for the tests that run its scripts or read its fixtures. The path is
// compiled into tests/source_dir.cpp alone: a test's own object does not depend on where the
// checkout lies, so that ccache reuses it in a fresh clone at another path (CI's: docs/CI.md).
#pragma once

namespace ferry::testing {

/// The checkout's root, absolute, without a trailing slash.
const char* source_dir() noexcept;

}  // namespace ferry::testing

#define FERRY_SOURCE_DIR (::ferry::testing::source_dir())
