#pragma once
// Learning rate by optimizer step: linear warmup to the peak, then a cosine,
// linear or constant decay that reaches min_lr at the last step.
#include <cstdint>

#include "trainer/config/config.h"

namespace segtrain::trainer {

struct LrSchedule {
  Schedule shape = Schedule::cosine;
  double peak = 3e-4;
  double floor = 3e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // `step` counts from 0 (the first update).
  double at(int64_t step) const;
};

}  // namespace segtrain::trainer
