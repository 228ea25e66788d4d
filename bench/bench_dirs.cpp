#include "bench_dirs.hpp"

namespace ferry::bench {

std::string source_dir() { return FERRY_CHECKOUT_DIR; }

std::string binary_dir() { return FERRY_BUILD_DIR; }

}  // namespace ferry::bench
