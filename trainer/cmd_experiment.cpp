#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_experiment(const ExperimentOptions&) { not_built("experiment", 7); }

}  // namespace segtrain::trainer
