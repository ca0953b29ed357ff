#pragma once
// Every linear projection of a block (q/k/v/o, the MLP's): y = x W^T + b, and once a
// LoRA converter (models/converters/lora.h) adds a low-rank adapter to it, as PEFT's
// lora.Linear computes one (Hu et al. 2021):
//   y = x W^T + b + (alpha / rank) * B(A(dropout(x)))
// with A [rank, in] and B [out, rank] (B zero at first, so the adapted model starts as
// the base). Its parameters are named as torch::nn::Linear's ("weight", "bias") and
// the adapter's as PEFT's ("lora_A.weight", "lora_B.weight"), so HF names, checkpoints
// and PEFT's adapter files map one to one.
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdint>

namespace segtrain::models {

struct ProjectionImpl : torch::nn::Module {
  // Initialised as torch::nn::Linear is (the same random draws).
  ProjectionImpl(int64_t in, int64_t out, bool bias);
  at::Tensor forward(const at::Tensor& x);

  // Adds the adapter: A drawn as PEFT draws it (Kaiming-uniform, a = sqrt(5)), B zero,
  // both fp32 on the weight's device. Throws std::logic_error when it has one.
  void add_lora(int64_t rank, double alpha, double dropout);
  bool has_lora() const { return !lora_A.is_empty(); }

  int64_t in_features, out_features;
  at::Tensor weight, bias;  // bias undefined when the projection has none
  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};
  double lora_scale = 0;    // alpha / rank
  double lora_dropout = 0;  // on the adapter's input, while training
};
TORCH_MODULE(Projection);

}  // namespace segtrain::models
