#include "models/modules/weight_init.h"

namespace segtrain::models {

namespace {
thread_local bool skipped = false;
}  // namespace

SkipWeightInit::SkipWeightInit() : previous_(skipped) { skipped = true; }
SkipWeightInit::~SkipWeightInit() { skipped = previous_; }

bool weight_init_skipped() { return skipped; }

}  // namespace segtrain::models
