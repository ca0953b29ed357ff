#pragma once
// One training run (`segtrain train`, and every run of an experiment grid).
#include "trainer/config/config.h"

namespace segtrain::trainer {

// Trains (or, with `resume`, continues) the run `loaded` describes, saves final/
// and, with `final_eval`, evaluates it into eval.json (an experiment evaluates
// its rows itself). Returns the exit code; throws InputError for bad input and
// Interrupted after checkpointing on SIGINT/SIGTERM. The command has set up the
// logger and the signal handlers (OnSignal::stop_at_checkpoint); the run only
// adds its own log file.
int run_training(const LoadedConfig& loaded, bool resume, bool final_eval = true);

}  // namespace segtrain::trainer
