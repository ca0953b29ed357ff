#pragma once
// The one way evaluation enters inference: model->eval() and no autograd for a
// scope, the model's mode given back when the scope ends (also by an exception:
// a stop during a run's periodic evaluation leaves a model that trains on).
// Perplexity, passkey and generation (RULER's tasks, `segtrain generate`) use it.
#include <ATen/core/grad_mode.h>

#include "models/modules/transformer.h"

namespace segtrain::trainer {

class EvalMode {
 public:
  explicit EvalMode(models::TransformerLM& model) : model_(model), was_training_(model->is_training()) {
    model_->eval();
  }
  ~EvalMode() {
    if (was_training_) model_->train();
  }
  EvalMode(const EvalMode&) = delete;
  EvalMode& operator=(const EvalMode&) = delete;

 private:
  models::TransformerLM& model_;
  bool was_training_;
  at::NoGradGuard no_grad_;
};

}  // namespace segtrain::trainer
