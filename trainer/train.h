#pragma once
#include "trainer/config.h"

namespace segtrain::trainer {

// One training run (`segtrain train`): returns the exit code; throws InputError
// for bad input and Interrupted after checkpointing on SIGINT/SIGTERM. Without
// `final_eval` the run ends at final/ (an experiment evaluates its rows itself).
int run_training(const LoadedConfig& loaded, bool resume, bool final_eval = true);

}  // namespace segtrain::trainer
