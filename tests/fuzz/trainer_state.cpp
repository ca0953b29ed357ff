// A run's trainer_state.json through newest_checkpoint, which `segtrain train
// --resume` and the experiment grid call on a run directory.
#include "tests/fuzz/fuzz_target.h"
#include "trainer/train/run_checkpoint.h"

using namespace segtrain;

SEGTRAIN_FUZZ_TARGET(trainer_state) {
  const auto run = fuzz::scratch_dir() / "run";
  fuzz::write_file(run / "final" / "trainer_state.json", fuzz::as_text(data, size));
  (void)trainer::newest_checkpoint(run);
}
