#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_inspect_alibi_precision(const InspectAlibiPrecisionOptions&) { not_built("inspect alibi-precision", 4); }

}  // namespace segtrain::trainer
