#pragma once
// A linear projection with a bias, x W^T + b, and the MLP's gelu(x W^T + b): one home for the call
// every projection makes (models/modules/projection.h) and the GELU MLP's first projection (the
// GPT-2-family blocks, models/modules/transformer.cpp).
//
// ATen's linear computes a trained bias's gradient as a sum over the [tokens, out] output gradient
// in a reduction kernel of its own (the H200's profile of GPT-2 medium: about 2.3 ms a step over its
// four biased projections a block, about a third of the bandwidth), and GELU's gradient in another
// pass that the bias's sum then reads again. On a CUDA device with SEGTRAIN_FUSED_KERNELS=all (the
// kernels no GPU has run yet: kernels/fused_kernels.h), where x, W and b share a floating dtype (the
// autocast dtype, if autocast is on) and b is trained, one autograd node does the forward as ATen
// does (addmm, then at::gelu) and its backward computes the bias gradient in the project's column-sum
// kernel (bias_gradient_cuda.cu: 16-byte loads, deterministic), for the GELU projection from the
// same read that computes GELU's gradient; the input's and the weight's gradients are ATen's GEMMs,
// as ATen's own backward computes them. Elsewhere, ATen's composite.
#include <ATen/ATen.h>

#include <string>
#include <utility>

namespace segtrain::kernels {

// x W^T + b (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// gelu(x W^T + b), GELU's tanh approximation where `tanh` (GPT-2's gelu_new), erf's where not.
at::Tensor linear_gelu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool tanh);

// Why the fused nodes do not take these tensors on any device ("" when they do): b undefined or
// not trained, dtypes that differ or are not floating, a weight that does not match x, or autocast
// on for x's device in another dtype (it would cast them).
std::string linear_fused_refusal(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// The nodes, whatever the switch and the device say (linear() and linear_gelu() take them where they
// apply on CUDA; the CPU tests their wiring, the gpu suite their kernels). InputError where
// linear_fused_refusal says why not.
at::Tensor linear_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
at::Tensor linear_gelu_fused(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, bool tanh);

// What the nodes' backward calls for a [rows, out] output gradient: the column-sum kernels on a CUDA
// tensor of a CUDA build, ATen's sum (and at::gelu_backward) elsewhere, the sum in fp32 rounded once.
at::Tensor bias_gradient(const at::Tensor& grad);
// (d pre, d b) for GELU's input pre and output gradient dy.
std::pair<at::Tensor, at::Tensor> gelu_bias_gradient(const at::Tensor& pre, const at::Tensor& dy, bool tanh);

}  // namespace segtrain::kernels
