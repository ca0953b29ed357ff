#pragma once
// How long a run is: Karypis et al.'s compute-equivalent rule (L_e/L_t epochs for the
// segmented samplers, 1 for full) or a token budget, rounded up to whole
// global batches.
#include <cstdint>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct TrainingPlan {
  int64_t samples_per_epoch = 0;
  int64_t sample_length = 0;
  int64_t global_batch = 0;     // sequences per optimizer step, all ranks
  int64_t tokens_per_step = 0;  // global_batch * sample_length
  double epochs = 0;
  int64_t total_steps = 0;
};

// InputError when the store has no window to train on.
TrainingPlan plan_training(const Config& config, int64_t samples_per_epoch, int64_t sample_length,
                           int64_t world_size);

}  // namespace segtrain::trainer
