#include "models/projection.h"

#include <torch/nn/functional/dropout.h>
#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>

#include "models/weight_init.h"

namespace segtrain::models {

namespace {

torch::nn::Linear no_bias_linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

}  // namespace

ProjectionImpl::ProjectionImpl(int64_t in, int64_t out, bool with_bias) : in_features(in), out_features(out) {
  weight = register_parameter("weight", at::empty({out, in}));
  if (with_bias) bias = register_parameter("bias", at::empty({out}));
  if (weight_init_skipped()) return;  // a file fills them (models/weight_init.h)
  // torch::nn::Linear's reset_parameters, draw for draw: a model built from scratch
  // starts from the same random stream whatever module holds its projections.
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

at::Tensor ProjectionImpl::forward(const at::Tensor& x) {
  auto y = at::linear(x, weight, bias);
  if (!has_lora()) return y;
  namespace F = torch::nn::functional;
  const auto in = lora_dropout > 0 ? F::dropout(x, F::DropoutFuncOptions().p(lora_dropout).training(is_training())) : x;
  return y + lora_B(lora_A(in)) * lora_scale;
}

void ProjectionImpl::add_lora(int64_t rank, double alpha, double dropout) {
  if (has_lora()) throw std::logic_error("this projection has a LoRA adapter already");
  lora_A = register_module("lora_A", no_bias_linear(in_features, rank));
  lora_B = register_module("lora_B", no_bias_linear(rank, out_features));
  torch::NoGradGuard no_grad;
  torch::nn::init::kaiming_uniform_(lora_A->weight, std::sqrt(5.0));
  lora_B->weight.zero_();
  lora_A->to(weight.device());
  lora_B->to(weight.device());
  lora_scale = alpha / static_cast<double>(rank);
  lora_dropout = dropout;
}

}  // namespace segtrain::models
