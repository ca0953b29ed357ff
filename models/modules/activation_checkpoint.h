#pragma once
// Activation checkpointing: run a function without keeping its activations and
// recompute them in backward. LibTorch has no C++ API for it, so this is a small
// autograd node that re-runs the function and backpropagates through it
// (reentrant, like torch.utils.checkpoint with use_reentrant=True).
#include <ATen/ATen.h>

#include <functional>

namespace segtrain::models {

// fn must be deterministic (no dropout) and may read parameters, whose grads are
// accumulated when the recomputed graph is backpropagated. x must be the only
// input that needs a gradient. `reads_trainable` says that fn reads a parameter that
// needs one: then fn is recomputed even where x needs none (the first block of a model
// whose embedding is frozen, as under LoRA: PyTorch's reentrant checkpoint would keep that
// block's activations, which is why HF's PEFT makes the embedding's output need a gradient).
at::Tensor checkpointed(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x,
                        bool reads_trainable);

}  // namespace segtrain::models
