// The one object of the tests that depends on where the checkout is (tests/source_dir.hpp).
#include "source_dir.hpp"

namespace ferry::testing {

const char* source_dir() noexcept { return FERRY_CHECKOUT_DIR; }

}  // namespace ferry::testing
