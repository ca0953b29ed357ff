// One training run from start to end (trainer.h): the Trainer set up, its training, final/
// saved, the final evaluation and the summary, and how a signal at each point ends the run. The
// Trainer itself is trainer_class.h; its files each hold one part of it.
#include "trainer/train/trainer.h"

#include "common/error.h"
#include "common/log.h"
#include "common/signals.h"
#include "trainer/train/trainer_class.h"

namespace segtrain::trainer {

int run_training(const LoadedConfig& loaded, Resume resume, bool final_eval) {
  throw_if_stopped();  // a signal while the command read its config: nothing to save yet
  Trainer trainer(loaded, resume);
  if (final_eval) trainer.log_final_evaluation_plan();
  try {
    trainer.train();
    trainer.save_final();
  } catch (const Interrupted&) {
    trainer.shut_down_group();  // every rank stopped at the same point: not a failure
    throw;
  }
  try {
    if (final_eval) trainer.evaluate_final();
  } catch (const Interrupted& stop) {
    // The training is done and saved: a stop during its evaluation ends the evaluation (within a
    // batch of windows), and the run is reported as trained, not as interrupted.
    trainer.shut_down_group();
    trainer.log_evaluation_stopped(stop.signal);
    return 128 + stop.signal;
  }
  trainer.log_summary(final_eval);
  trainer.shut_down_group();
  // Everything is done and written: a signal that came after the last check stops nothing.
  if (const int signal = stop_signal()) log::info("signal ", signal, " came after the run completed: nothing to stop");
  return 0;
}

}  // namespace segtrain::trainer
