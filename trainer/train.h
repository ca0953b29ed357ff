#pragma once
#include "trainer/config.h"

namespace segtrain::trainer {

// One training run (`segtrain train`): returns the exit code; throws InputError
// for bad input and Interrupted after checkpointing on SIGINT/SIGTERM.
int run_training(const LoadedConfig& loaded, bool resume);

}  // namespace segtrain::trainer
