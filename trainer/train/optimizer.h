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

#include "trainer/train/flat_buckets.h"
#include "trainer/train/optimizer_state.h"

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

// The factor that clips a gradient of L2 norm `norm` to at most `max_norm`
// (1 when it is within, or max_norm <= 0 turns clipping off; torch's
// clip_grad_norm_ with its 1e-6).
double clip_factor(double norm, double max_norm);

// The sum of squares of `grads` in fp64 on `device` (zero for none).
at::Tensor grad_square_sum_of(const std::vector<at::Tensor>& grads, const c10::Device& device);

// The fused kernel's two per-step scalars as 0-dim fp32 tensors on the parameters'
// device: the learning rate and grad_scale, the divisor the kernel applies to each
// gradient as it reads it (1 / the step's factor), so scaling costs no pass of its own
// over the gradients. Refilled each step by a fill kernel (no copy, no wait); held in
// device memory, not passed as host numbers, so that a captured step would read the
// step's values rather than the first's.
struct FusedStepScalars {
  explicit FusedStepScalars(const c10::Device& device);
  void set(double lr, double grad_factor);
  at::Tensor lr, grad_scale;
};

// What the training loop needs of an optimizer; FusedAdamW (every rank holds
// the whole state) and ShardedAdamW (ZeRO-1, sharded_optimizer.h) provide it.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The sum of squares of the gradient entries step() reads, in fp64 on the
  // device, not read on the host (the trainer sums it over ranks in the step's
  // one reduction, step_totals.h). Sharded: this rank's slices only.
  virtual at::Tensor grad_square_sum() = 0;
  // Whether each rank updates its own part of the parameters, so the ranks'
  // grad_square_sum add up to the whole gradient's (else each has it all).
  virtual bool sharded() const = 0;
  // One update at learning rate `lr` of the gradients multiplied by `grad_factor`
  // (the step's 1 / loss tokens and the clipping), inside the fused kernel
  // (FusedStepScalars). The gradients are left scaled.
  void step(double lr, double grad_factor = 1.0) {
    set_step_scalars(lr, grad_factor);
    update();
    count_step();
  }
  // step() in its three parts, for a step whose device work is a CUDA graph
  // (trainer/runtime/cuda_graph.h): the step's scalars written into device memory (the
  // host's values: outside the graph), the update (device work alone: what a graph
  // captures) and the host's count of steps taken.
  virtual void set_step_scalars(double lr, double grad_factor) = 0;
  virtual void update() = 0;
  virtual void count_step() = 0;
  virtual void zero_grad() = 0;
  // After a backward: the names of the trainable parameters it left without a gradient, which
  // the ordinary step skips and a kept gradient (keep_gradients) would update every step with a
  // zero one (weight decay and the moments' decay). None where gradients live in flat buckets.
  virtual std::vector<std::string> without_gradient() const { return {}; }
  // From now on every trainable parameter's gradient stays allocated and zero_grad zeroes it
  // in place, so that a graph finds it at the same address (gradients in flat buckets always
  // are); a parameter without one gets zeros.
  virtual void keep_gradients() {}
  // Undoes keep_gradients (a captured step's graphs dropped, SEGTRAIN_CUDA_GRAPH=auto): the next
  // zero_grad drops the gradients again, or marks the sums for the next backward to overwrite. Safe
  // once the gradients were zeroed in place: the backward in between adds into the zeros.
  virtual void stop_keeping_gradients() {}
  virtual int64_t steps_taken() const = 0;
  // This rank's moments as pieces: every parameter whole, or a sharded rank's
  // slices. Live views of the state: a checkpoint copies them before the next
  // step() changes them (run_checkpoint.h).
  virtual std::vector<StatePiece> state_pieces() = 0;
  // Takes the ranges this rank holds from a state saved with any slicing and
  // number of ranks. Throws InputError naming the first parameter it lacks.
  virtual void load_state(const SavedOptimizerState& saved) = 0;
  // Bytes of optimizer state this rank holds: moments and step counts, and
  // with master weights those and the fp32 gradient sums.
  virtual int64_t state_bytes() const = 0;
  // The fp32 master weights by parameter name when the parameters are held in
  // a lower precision (gathered like state_dict: rank 0 gets them); empty when
  // the parameters are their own master weights.
  virtual std::map<std::string, at::Tensor> master_weights() { return {}; }
  // Takes them back from a checkpoint's (fp32) weights; nothing without master weights.
  virtual void load_master_weights(const std::map<std::string, at::Tensor>& /*weights*/) {}
  // With master weights the optimizer sums each micro-batch's gradient into fp32
  // sums of its own: the loop hands every micro-batch's gradient over (reduced over
  // ranks through accumulate, or accumulate_local in one process, where backward may
  // have summed them already) and clears the parameters' gradients before the next.
  // Without, gradients accumulate in place.
  virtual bool keeps_master_weights() const { return false; }
  // Adds `reduced` (range `range` of bucket `bucket`'s buffers, summed over ranks)
  // to the master's gradient sums: GradientSync's sink. Nothing without master weights.
  virtual void accumulate(size_t /*bucket*/, FlatRange /*range*/, const at::Tensor& /*reduced*/) {}
  // One process: adds the parameters' gradients to the master's sums.
  virtual void accumulate_local() {}
};

class FlatBuckets;

class FusedAdamW : public Optimizer {
 public:
  // `views`: the buckets whose views the gradients are (data parallel), zeroed
  // in place; nullptr: zero_grad drops the gradients.
  FusedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, AdamWOptions options,
             FlatBuckets* views = nullptr);

  at::Tensor grad_square_sum() override;
  bool sharded() const override { return false; }
  // Parameters without a gradient are skipped.
  void set_step_scalars(double lr, double grad_factor) override { scalars_.set(lr, grad_factor); }
  void update() override;
  void count_step() override { ++steps_taken_; }
  // Drops the gradients (.grad undefined), or zeroes the buckets, or after keep_gradients
  // zeroes them in place.
  void zero_grad() override;
  std::vector<std::string> without_gradient() const override;
  void keep_gradients() override;
  void stop_keeping_gradients() override { keep_gradients_ = false; }
  int64_t steps_taken() const override { return steps_taken_; }
  std::vector<StatePiece> state_pieces() override;
  void load_state(const SavedOptimizerState& saved) override;
  int64_t state_bytes() const override;

 private:
  struct Group {
    double weight_decay = 0;
    std::vector<std::string> names;
    std::vector<at::Tensor> params, exp_avg, exp_avg_sq, steps;
  };
  void step_group(Group& group);

  AdamWOptions options_;
  std::vector<at::Tensor> grads() const;  // the defined ones

  std::vector<Group> groups_;
  c10::Device device_ = at::kCPU;  // the parameters'
  FusedStepScalars scalars_{at::kCPU};
  FlatBuckets* views_ = nullptr;
  bool keep_gradients_ = false;
  int64_t steps_taken_ = 0;
};

}  // namespace segtrain::trainer
