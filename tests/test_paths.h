#pragma once
// The paths the suites run against: this build's segtrain binaries, the venv's Python and its
// transformers 4.x overlay, the checkout and its reference scripts. They are compiled into one
// small unit (test_paths.cpp, the library segtrain_test_paths every suite links) rather than into
// each suite's units: a suite's compile command then names no checkout, so another clone's build
// (CI's fresh one) takes the suites' objects from ccache (cmake/SegtrainCompilerCache.cmake).
namespace segtrain::test::paths {
extern const char* const kSegtrainBin;         // <build>/trainer/segtrain
extern const char* const kSegtrainLaunchBin;   // <build>/launch/segtrain-launch
extern const char* const kPython;              // the venv's python (the build's Python3_EXECUTABLE)
extern const char* const kTransformers4;       // <venv>/transformers4 (scripts/setup.sh)
extern const char* const kSourceDir;           // the checkout
extern const char* const kHfReferenceScript;   // tests/models/hf_reference.py
extern const char* const kPeftReferenceScript;  // tests/models/peft_reference.py
extern const char* const kHfReferenceDir;      // <build>/tests/models/hf_reference (made once, tests/models/reference.h)
}  // namespace segtrain::test::paths

#define SEGTRAIN_BIN (::segtrain::test::paths::kSegtrainBin)
#define SEGTRAIN_LAUNCH_BIN (::segtrain::test::paths::kSegtrainLaunchBin)
#define SEGTRAIN_PYTHON (::segtrain::test::paths::kPython)
#define SEGTRAIN_TRANSFORMERS4 (::segtrain::test::paths::kTransformers4)
#define SEGTRAIN_SOURCE_DIR (::segtrain::test::paths::kSourceDir)
#define HF_REFERENCE_SCRIPT (::segtrain::test::paths::kHfReferenceScript)
#define PEFT_REFERENCE_SCRIPT (::segtrain::test::paths::kPeftReferenceScript)
#define HF_REFERENCE_DIR (::segtrain::test::paths::kHfReferenceDir)
