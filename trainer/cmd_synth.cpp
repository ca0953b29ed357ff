#include "trainer/commands.h"
#include "trainer/not_built.h"

namespace segtrain::trainer {

int cmd_synth(const SynthOptions&) { not_built("synth", 3); }

}  // namespace segtrain::trainer
