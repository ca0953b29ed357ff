#pragma once
// How long a run is: Karypis et al.'s compute-equivalent rule (L_e/L_t epochs for the
// segmented samplers, 1 for full) or a token budget, rounded up to whole
// global batches. A mixture (data.mixture) takes its first source's rule over that source's
// windows, and every source's samples count: a mixture trains as many tokens as its first
// source alone would, a share of them from the others.
#include <cstdint>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct TrainingPlan {
  int64_t samples_per_epoch = 0;  // the (first) source's windows
  int64_t sample_length = 0;
  int64_t global_batch = 0;     // sequences per optimizer step, all ranks
  int64_t tokens_per_step = 0;  // global_batch * sample_length
  double epochs = 0;
  int64_t total_steps = 0;
};

// `global_batch` sequences a step (batch_size.h); InputError when the store has no window to train on.
TrainingPlan plan_training(const Config& config, int64_t samples_per_epoch, int64_t sample_length,
                           int64_t global_batch);

}  // namespace segtrain::trainer
