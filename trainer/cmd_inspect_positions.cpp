#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_inspect_positions(const InspectPositionsOptions&) { not_built("inspect positions", 4); }

}  // namespace segtrain::trainer
