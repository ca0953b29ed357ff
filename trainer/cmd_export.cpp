#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_export(const ExportOptions&) { not_built("export", 4); }

}  // namespace segtrain::trainer
