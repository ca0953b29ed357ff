#include "tests/fuzz/fuzz_target.h"

// The value comes from this unit's compile definition alone (tests/fuzz/CMakeLists.txt).
namespace segtrain::fuzz {
const char* const kFuzzSourceDir = SEGTRAIN_FUZZ_DIR;
}  // namespace segtrain::fuzz
