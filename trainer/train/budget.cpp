#include "trainer/train/budget.h"

#include <cmath>
#include <string>

#include "common/error.h"
#include "data/mixture.h"
#include "data/sampler.h"

namespace segtrain::trainer {

TrainingPlan plan_training(const Config& c, int64_t samples_per_epoch, int64_t sample_length, int64_t global_batch) {
  TrainingPlan p;
  p.samples_per_epoch = samples_per_epoch;
  p.sample_length = sample_length;
  p.global_batch = global_batch;
  p.tokens_per_step = p.global_batch * sample_length;
  if (samples_per_epoch == 0)
    throw InputError("data.store: the train split has no document of at least data.extended_length = " +
                     std::to_string(c.data.extended_length) + " tokens, so there is nothing to train on");
  if (c.train.budget.tokens) {
    p.total_steps = (*c.train.budget.tokens + p.tokens_per_step - 1) / p.tokens_per_step;
    p.epochs = static_cast<double>(p.total_steps * p.global_batch) / static_cast<double>(samples_per_epoch);
  } else {
    // A mixture's budget is its first source's rule, and counts the samples of every source.
    p.epochs = data::compute_equivalent_epochs(data::data_sources(c.data).front().data);
    const auto samples = static_cast<int64_t>(std::ceil(p.epochs * static_cast<double>(samples_per_epoch) - 1e-9));
    p.total_steps = (samples + p.global_batch - 1) / p.global_batch;
  }
  return p;
}

}  // namespace segtrain::trainer
