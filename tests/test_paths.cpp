#include "test_paths.h"

// The values come from this unit's compile definitions alone (tests/CMakeLists.txt).
namespace segtrain::test::paths {
const char* const kSegtrainBin = SEGTRAIN_TEST_PATH_BIN;
const char* const kSegtrainLaunchBin = SEGTRAIN_TEST_PATH_LAUNCH_BIN;
const char* const kPython = SEGTRAIN_TEST_PATH_PYTHON;
const char* const kTransformers4 = SEGTRAIN_TEST_PATH_TRANSFORMERS4;
const char* const kSourceDir = SEGTRAIN_TEST_PATH_SOURCE_DIR;
const char* const kHfReferenceScript = SEGTRAIN_TEST_PATH_SOURCE_DIR "/tests/models/hf_reference.py";
const char* const kPeftReferenceScript = SEGTRAIN_TEST_PATH_SOURCE_DIR "/tests/models/peft_reference.py";
const char* const kHfReferenceDir = SEGTRAIN_TEST_PATH_BUILD_DIR "/tests/models/hf_reference";
}  // namespace segtrain::test::paths
