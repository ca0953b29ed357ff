#pragma once
// One training run (`segtrain train`, and every run of an experiment grid).
#include "trainer/config/config.h"

namespace segtrain::trainer {

// Whether a run continues what its run.output_dir holds.
enum class Resume {
  no,        // a directory with a checkpoint is refused (the default: never train over a run by accident)
  required,  // --resume: continue from the newest complete checkpoint; none is an error
  if_any,    // --resume auto: continue when there is one, start fresh when not (requeued jobs)
};

// Trains (or continues, per `resume`) the run `loaded` describes, saves final/
// and, with `final_eval`, evaluates it into eval.json (an experiment evaluates
// its rows itself). Returns the exit code; throws InputError for bad input and
// Interrupted after checkpointing on SIGINT/SIGTERM. The command has set up the
// logger and the signal handlers (OnSignal::stop_at_checkpoint); the run only
// adds its own log file.
int run_training(const LoadedConfig& loaded, Resume resume, bool final_eval = true);

}  // namespace segtrain::trainer
