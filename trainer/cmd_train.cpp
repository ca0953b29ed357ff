#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_train(const TrainOptions&) { not_built("train", 5); }

}  // namespace segtrain::trainer
