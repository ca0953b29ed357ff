#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_sample(const SampleOptions&) { not_built("sample", 3); }

}  // namespace segtrain::trainer
