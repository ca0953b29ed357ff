#pragma once
// AdamW over all parameters with one fused kernel launch per group
// (at::_fused_adamw_), never a per-parameter loop. Two groups: decayed and not.
// Sharded over ranks (ZeRO-1): sharded_optimizer.h.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
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

// Whether AdamW decays this parameter: not when its name contains a no_decay
// pattern, and never a 1-D one (biases, norm gains).
bool decays(const AdamWOptions& options, const std::string& name, const at::Tensor& param);

// The entry `key` of a saved optimizer state, shaped like `like`; InputError
// naming the key when it is missing or shaped otherwise.
const at::Tensor& state_entry(const std::map<std::string, at::Tensor>& state, const std::string& key,
                              at::IntArrayRef like);

// What the training loop needs of an optimizer; FusedAdamW (every rank holds
// the whole state) and ShardedAdamW (ZeRO-1, sharded_optimizer.h) provide it.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The L2 norm of the whole gradient (over all ranks' slices when sharded;
  // the same value on every rank). When it is finite and above max_norm > 0
  // the gradients are scaled down to it.
  virtual double clip_grad_norm(double max_norm) = 0;
  // One update at learning rate `lr`.
  virtual void step(double lr) = 0;
  virtual void zero_grad() = 0;
  virtual int64_t steps_taken() const = 0;
  // The whole state, keyed "exp_avg.<param>", "exp_avg_sq.<param>" and
  // "step.<param>" with each parameter's shape: the same for every world size
  // and sharding. ShardedAdamW gathers it: every rank must call, and only rank
  // 0 gets the entries (the others an empty map).
  virtual std::map<std::string, at::Tensor> state_dict() = 0;
  // Takes (this rank's part of) such a state. Throws InputError naming the
  // first missing or mis-shaped entry.
  virtual void load_state_dict(const std::map<std::string, at::Tensor>& state) = 0;
  // Bytes of moments and step counts this rank holds.
  virtual int64_t state_bytes() const = 0;
};

class FusedAdamW : public Optimizer {
 public:
  FusedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, AdamWOptions options);

  double clip_grad_norm(double max_norm) override;
  // Parameters without a gradient are skipped.
  void step(double lr) override;
  void zero_grad() override;  // drops the gradients (.grad undefined)
  int64_t steps_taken() const override { return steps_taken_; }
  std::map<std::string, at::Tensor> state_dict() override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  int64_t state_bytes() const override;

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
