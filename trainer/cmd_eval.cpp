#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_eval(const EvalOptions&) { not_built("eval", 5); }

}  // namespace segtrain::trainer
