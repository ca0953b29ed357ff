#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_prepare(const PrepareOptions&) { not_built("prepare", 3); }

}  // namespace segtrain::trainer
