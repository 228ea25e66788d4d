// The headers nearly every test includes, precompiled once per build tree and reused by each
// test (tests/CMakeLists.txt, docs/CI.md): GoogleTest, ferry's public headers and the standard
// library's. A test still includes what it uses; this file only saves parsing them again.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "ferry/ferry.hpp"
