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
// input that needs a gradient.
at::Tensor checkpointed(const std::function<at::Tensor(const at::Tensor&)>& fn, const at::Tensor& x);

}  // namespace segtrain::models
