#pragma once
// When a run logs, saves, evaluates and stops: named predicates over the step
// count, so the training loop reads as a list of decisions (marian-nmt's
// Scheduler). `step` is the number of optimizer steps completed.
#include <cstdint>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct Cadence {
  int64_t total_steps = 0;
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  // 0: only final/
  int64_t eval_every = 0;        // 0: only at the end
  int64_t first_step = 1;        // this process's first step (after a resume: the step after it)

  Cadence(const TrainConfig& train, int64_t total, int64_t resumed_at = 0)
      : total_steps(total),
        log_every(train.log_every),
        checkpoint_every(train.checkpoint_every),
        eval_every(train.eval_every),
        first_step(resumed_at + 1) {}

  bool finished(int64_t step) const { return step >= total_steps; }
  // The first step is logged (a user sees the run move at once), then every
  // log_every; the last always, as it is saved as final/ and evaluated instead.
  bool should_log(int64_t step) const { return step == first_step || step % log_every == 0 || finished(step); }
  bool should_checkpoint(int64_t step) const { return every(checkpoint_every, step) && !finished(step); }
  bool should_evaluate(int64_t step) const { return every(eval_every, step) && !finished(step); }

 private:
  static bool every(int64_t period, int64_t step) { return period > 0 && step % period == 0; }
};

}  // namespace segtrain::trainer
