#pragma once
// AdamW on the flat buckets (flat_buckets.h), one piece of a parameter at a
// time, in two layouts and two storages.
//
// Layout. Sharded (ZeRO-1, as DeepSpeed's stage 1 and llm.c's zero_stage 1):
// every rank holds all parameters and gradients but AdamW's state only for its
// 1/N part of each segment of the buckets, its slice; GradientSync
// reduce-scatters the gradients into the slices while backward runs; step()
// updates a bucket's slice with the fused AdamW kernel and starts that
// bucket's all-gathers at once, so the gathers of earlier buckets run while
// later ones are updated. Whole (no group, or shard false): a rank updates
// every slice; no gather. A slice may cut a parameter; its pieces keep the
// decay group of the parameter they belong to. The elementwise update gives
// the same values as FusedAdamW on whole tensors.
//
// Storage. fp32 parameters are their own master weights: the state is the two
// moments, 8 bytes a parameter (over N ranks when sharded). bf16 parameters
// (train.param_dtype: bf16; Megatron's distributed-optimizer layout): each
// piece also keeps an fp32 master copy of its parameter values and an fp32 sum
// of the step's gradient (filled by accumulate() from every micro-batch's
// reduced gradient), 16 bytes a parameter over N ranks, beside the 2 + 2 of
// the bf16 parameters and gradient buffers (2 in one process: below). The
// update goes to the master and is copied back rounded to bf16, then gathered. Master values and sums lie in
// one fp32 buffer for each range a rank updates (a Span; the pieces are views of
// it), so that summing, zeroing and copying back are one kernel a range, not one
// a piece: on an H200, GPT-2 medium's 388 pieces (its parameters cut by 4 MiB
// segments) made 388 of the 396 fp32 += bf16 adds a step that took 3.8 ms of its
// 82 ms (the LM head's 8 slices the rest). A range's first sum of a step is a copy
// (the bf16 -> fp32 conversion kernel, where an fp32 += bf16 add is a slower kernel
// that mixes dtypes); zero_grad only marks the sums empty. A captured step
// (keep_gradients) replays kernels without this host bookkeeping: from then on
// zero_grad zeroes the sums in place and every sum adds.
//
// In one process (sums_in_backward) no bf16 gradient buffer exists: a hook on each
// parameter (PyTorch's post-accumulate-grad hook) sums the gradient backward has just
// left in .grad into the parameter's pieces (a copy where it is a piece's first of the
// step) and drops it. Where the buckets took it instead, autograd added it into a
// zeroed bf16 buffer and the sum then read that buffer: 8 bytes a parameter and a
// micro-batch more traffic (GPT-2 medium: 2.8 GB a step), and 2 bytes a parameter held.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"
#include "trainer/train/optimizer.h"

namespace segtrain::trainer {

struct ShardedAdamWSetup {
  ProcessGroup* group = nullptr;  // nullptr: one process (every slice is its own)
  bool shard = true;              // false: every rank updates every slice of all-reduced gradients
  // Non-empty: the buckets hold bf16 parameters, and these fp32 values (by
  // parameter name, on any device) become the master weights.
  std::map<std::string, at::Tensor> master_from;
  // One process with master weights, over buckets without gradient buffers: each gradient is
  // summed as backward leaves it, by a hook this optimizer installs on every parameter.
  bool sums_in_backward = false;
};

class ShardedAdamW : public Optimizer {
 public:
  // `buckets` holds the parameters of `named_parameters` that require a gradient.
  ShardedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, AdamWOptions options,
               FlatBuckets& buckets, ShardedAdamWSetup setup);
  ~ShardedAdamW() override;  // removes the hooks of sums_in_backward
  ShardedAdamW(const ShardedAdamW&) = delete;
  ShardedAdamW& operator=(const ShardedAdamW&) = delete;

  at::Tensor grad_square_sum() override;  // of this rank's slices (their gradient sums with master weights)
  bool sharded() const override { return sharded_; }
  void set_step_scalars(double lr, double grad_factor) override { scalars_.set(lr, grad_factor); }
  void update() override;  // scales this rank's slices alone
  void count_step() override { ++steps_taken_; }
  // The flat gradient buffers to zero, in place; the fp32 sums marked empty (the next sum
  // overwrites them), or, after keep_gradients, zeroed in place.
  void zero_grad() override;
  // A captured step: the sums are zeroed by zero_grad's kernel and every sum adds (a replay runs
  // the kernels recorded at capture, not accumulate's choice between a copy and an add).
  void keep_gradients() override;
  void stop_keeping_gradients() override { sums_in_place_ = false; }
  int64_t steps_taken() const override { return steps_taken_; }
  std::vector<StatePiece> state_pieces() override;  // this rank's slices
  void load_state(const SavedOptimizerState& saved) override;
  int64_t state_bytes() const override;
  std::map<std::string, at::Tensor> master_weights() override;
  void load_master_weights(const std::map<std::string, at::Tensor>& weights) override;

  bool keeps_master_weights() const override { return master_; }
  // Sums into this rank's fp32 gradient sums where `range` overlaps its slices (a copy where it is a
  // range's first of the step and covers it whole).
  void accumulate(size_t bucket, FlatRange range, const at::Tensor& reduced) override;
  void accumulate_local() override;  // nothing with sums_in_backward (backward summed them)
  // sums_in_backward's hook: adds `grad`, parameter `param`'s (FlatBuckets::params() index), to its
  // pieces' sums, a copy where it is a piece's first of the step.
  void sum_gradient(size_t param, const at::Tensor& grad);

 private:
  // The part of one parameter inside this rank's slice of its bucket.
  struct Piece {
    size_t param = 0;           // index in FlatBuckets::params()
    int64_t param_offset = 0;   // first element, in the parameter's flat order
    int64_t bucket_offset = 0;  // the same element in the bucket's buffers
    int64_t numel = 0;
    bool decayed = false;
    at::Tensor exp_avg, exp_avg_sq, step;
    at::Tensor master, grad_sum;  // fp32, with master weights only
    bool summed = false;          // sums_in_backward: grad_sum holds this step's sum
  };
  // One range of a bucket this rank updates, with master weights: the fp32 buffers its pieces' master
  // and grad_sum are views of (the range's padding past the parameters stays 0 in both).
  struct Span {
    FlatRange range;
    at::Tensor master, grad_sum;  // fp32, [range.numel]
    bool summed = false;          // grad_sum holds this step's sum (else its contents are stale); not
                                  // used with sums_in_backward, whose pieces say it each
  };
  // The fused kernel's arguments for one bucket and decay group.
  struct Update {
    double weight_decay = 0;
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, steps;
  };
  // Every piece's value of `which` in a whole fp32 bucket (all ranks' pieces
  // when sharded: every rank must call).
  at::Tensor gather_whole(size_t bucket, at::Tensor Piece::*which);
  void apply(Update& u);  // the fused AdamW kernel on one update's tensors
  // Zeroes the sums no micro-batch reached this step, before the update or the norm reads them.
  void settle_sums();
  // sums_in_backward: each parameter's pieces, and the hook that sums its gradient into them.
  void install_gradient_hooks();

  AdamWOptions options_;
  FlatBuckets& buckets_;
  ProcessGroup* group_;
  bool sharded_, master_, sums_in_backward_;
  std::vector<std::string> names_;             // by FlatBuckets parameter index
  std::vector<std::vector<Piece>> pieces_;     // by bucket
  std::vector<std::vector<Update>> updates_;   // by bucket
  std::vector<std::vector<Span>> spans_;       // by bucket, with master weights only
  std::vector<std::vector<Piece*>> pieces_of_;  // by FlatBuckets parameter index: sums_in_backward's
  std::vector<Update> merged_updates_;         // unsharded: updates_ joined by decay group
  bool sums_in_place_ = false;                 // after keep_gradients
  std::vector<at::Tensor> update_grads_;       // what the updates read, for the norm
  FusedStepScalars scalars_{at::kCPU};
  int64_t steps_taken_ = 0;
};

}  // namespace segtrain::trainer
