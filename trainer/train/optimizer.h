#pragma once
// AdamW over all parameters with one fused kernel launch per group
// (at::_fused_adamw_), never a per-parameter loop. Two groups: decayed and not.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <map>
#include <string>
#include <vector>

namespace segtrain::trainer {

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  // Substrings of parameter names that are never decayed; 1-D parameters
  // (biases, norm gains) never are either.
  std::vector<std::string> no_decay;
};

class FusedAdamW {
 public:
  FusedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, AdamWOptions options);

  // One update at learning rate `lr`. Parameters without a gradient are skipped.
  void step(double lr);
  void zero_grad();

  int64_t steps_taken() const { return steps_taken_; }
  bool decays(const std::string& name) const;

  // Moments and step counts keyed "exp_avg.<param>", "exp_avg_sq.<param>", "step.<param>".
  std::map<std::string, at::Tensor> state_dict() const;
  // Throws InputError naming the first missing or mis-shaped entry.
  void load_state_dict(const std::map<std::string, at::Tensor>& state);

 private:
  struct Group {
    double weight_decay = 0;
    std::vector<std::string> names;
    std::vector<at::Tensor> params, exp_avg, exp_avg_sq, steps;
  };
  void step_group(Group& group, double lr);

  AdamWOptions options_;
  std::vector<Group> groups_;
  int64_t steps_taken_ = 0;
};

}  // namespace segtrain::trainer
