#pragma once
// Every linear projection of a block (q/k/v/o, the MLP's): y = x W^T + b, and what an
// adapter a converter adds to it (models/modules/converters/lora.h: LoRA's, DoRA's) adds
// to that output. The projection knows an adapter only through ProjectionAdapter: its output
// with the adapter's part added, and the weight it folds into. Its parameters are named as
// torch::nn::Linear's ("weight", "bias"); an adapter registers its own on the projection
// under PEFT's names ("lora_A.weight", "lora_B.weight"), so HF names, checkpoints and
// PEFT's adapter files map one to one.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>

namespace segtrain::models {

struct ProjectionImpl;

class ProjectionAdapter {
 public:
  virtual ~ProjectionAdapter() = default;
  // `y` = x W^T + b, the output of `projection` for input `x`, with what the adapter adds to it
  // (the adapter may add it inside its last GEMM rather than in a pass of its own).
  virtual at::Tensor adapted(const at::Tensor& x, const at::Tensor& y, const ProjectionImpl& projection) const = 0;
  // The weight `weight` (W) becomes with the adapter merged into it, stored as W is.
  virtual at::Tensor fold(const at::Tensor& weight) const = 0;
};

struct ProjectionImpl : torch::nn::Module {
  // Initialised as torch::nn::Linear is (the same random draws).
  ProjectionImpl(int64_t in, int64_t out, bool bias);
  at::Tensor forward(const at::Tensor& x);
  // gelu(forward(x)), GELU's tanh approximation where `tanh`: without an adapter, one call
  // (kernels/linear.h) whose backward can take GELU's gradient and the bias's in one pass.
  at::Tensor forward_gelu(const at::Tensor& x, bool tanh);

  // Takes `adapter`, whose parameters are registered on this projection already. Throws
  // std::logic_error when it has one.
  void set_adapter(std::shared_ptr<const ProjectionAdapter> adapter);
  bool has_adapter() const { return adapter_ != nullptr; }

  int64_t in_features, out_features;
  at::Tensor weight, bias;  // bias undefined when the projection has none

 private:
  std::shared_ptr<const ProjectionAdapter> adapter_;
};
TORCH_MODULE(Projection);

}  // namespace segtrain::models
