// One rank's optimizer file of a checkpoint (optimizer-<rank>-of-<ranks>.safetensors,
// pieces named exp_avg.<param>@<offset>, or an earlier release's whole tensors)
// through read_optimizer_state, as `segtrain train --resume` reads it, then a
// range of one parameter across its pieces, as a sharded rank reads its slice.
#include "tests/fuzz/fuzz_target.h"
#include "trainer/train/run_checkpoint.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(optimizer_state) {
  const auto dir = fuzz::scratch_dir() / "checkpoint";
  fuzz::write_file(dir / "optimizer.index.json",
                   R"({"world_size": 1, "steps": 3, "files": ["optimizer-00000-of-00001.safetensors"]})");
  fuzz::write_file(dir / "optimizer-00000-of-00001.safetensors", fuzz::as_text(data, size));
  const auto saved = trainer::read_optimizer_state(dir);
  if (saved) (void)saved->read("exp_avg", "blocks.0.fc.weight", 32, 8, 16);
}
