#pragma once
// ZeRO stage 1 (as DeepSpeed's stage 1 and llm.c's zero_stage 1 do it): every
// rank holds all parameters and gradients, but AdamW's moments only for its
// 1/N part of each segment of the flat buckets (flat_buckets.h): its slice.
// GradientSync reduce-scatters the gradients into the slices while backward
// runs; step() updates a bucket's slice with the fused AdamW kernel and starts
// that bucket's all-gathers at once, so the gathers of earlier buckets run
// while later ones are updated. Parameters are fp32 (bf16 is autocast), so they are their own
// master weights: the sharded state is the two moments, 8 bytes a parameter
// over N ranks. A slice may cut a parameter; its pieces keep the decay group
// of the parameter they belong to. The elementwise update gives the same
// values as FusedAdamW on whole tensors.
#include <ATen/ATen.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainer/train/distributed.h"
#include "trainer/train/flat_buckets.h"
#include "trainer/train/optimizer.h"

namespace segtrain::trainer {

class ShardedAdamW : public Optimizer {
 public:
  // `buckets` holds the parameters of `named_parameters` that require a gradient.
  ShardedAdamW(const std::vector<std::pair<std::string, at::Tensor>>& named_parameters, AdamWOptions options,
               FlatBuckets& buckets, ProcessGroup& group);

  at::Tensor grad_square_sum() override;  // of this rank's slices
  bool sharded() const override { return true; }
  void scale_grads(double factor) override;  // this rank's slices

  void step(double lr) override;
  void zero_grad() override;  // zeroes the flat gradient buffers in place
  int64_t steps_taken() const override { return steps_taken_; }
  // Gathers each bucket's moments (one bucket at a time on the device) and
  // copies them to host tensors on rank 0.
  std::map<std::string, at::Tensor> state_dict() override;
  void load_state_dict(const std::map<std::string, at::Tensor>& state) override;
  int64_t state_bytes() const override;

 private:
  // The part of one parameter inside this rank's slice of its bucket.
  struct Piece {
    size_t param = 0;           // index in FlatBuckets::params()
    int64_t param_offset = 0;   // first element, in the parameter's flat order
    int64_t bucket_offset = 0;  // the same element in the bucket's buffers
    int64_t numel = 0;
    bool decayed = false;
    at::Tensor exp_avg, exp_avg_sq, step;
  };
  // The fused kernel's arguments for one bucket and decay group.
  struct Update {
    double weight_decay = 0;
    std::vector<at::Tensor> params, grads, exp_avg, exp_avg_sq, steps;
  };

  AdamWOptions options_;
  FlatBuckets& buckets_;
  ProcessGroup& group_;
  std::vector<std::string> names_;             // by FlatBuckets parameter index
  std::vector<std::vector<Piece>> pieces_;     // by bucket
  std::vector<std::vector<Update>> updates_;   // by bucket
  std::vector<at::Tensor> slice_grads_;        // every piece's gradient, for the norm and the scaling
  int64_t steps_taken_ = 0;
};

}  // namespace segtrain::trainer
