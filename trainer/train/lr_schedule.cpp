#include "trainer/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace segtrain::trainer {

double LrSchedule::at(int64_t step) const {
  if (step < warmup_steps) return peak * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (shape == Schedule::constant) return peak;
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps - 1);
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / decay_steps, 0.0, 1.0);
  const double fraction = shape == Schedule::cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return floor + (peak - floor) * fraction;
}

}  // namespace segtrain::trainer
