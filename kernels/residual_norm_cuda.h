#pragma once
// The CUDA kernels of kernels/residual_norm.h (residual_norm_cuda.cu), in CUDA builds only.
// Tensors: contiguous CUDA tensors of one floating dtype (fp32, bf16 or fp16) whose last
// dimension D is a multiple of 16 bytes' elements and at most kFusedNormRowBytes (residual_norm.h)
// (residual_norm.h checks both first); weight and bias [D] or undefined (1 and 0).
#include <ATen/ATen.h>

#include <utility>

namespace segtrain::kernels {

struct AddLayerNormForward {
  at::Tensor sum, normed;  // x's shape and dtype
  at::Tensor mean, rstd;   // [rows] fp32, rows = numel / D
};

// sum = x + branch (rounded to x's dtype), normed = LayerNorm(sum) from the rounded sum, one block
// a row reading x and branch once and writing both.
AddLayerNormForward add_layer_norm_forward_cuda(const at::Tensor& x, const at::Tensor& branch,
                                                const at::Tensor& weight, const at::Tensor& bias, double eps);

// The gradient of the sum's inputs (x's and branch's, the same tensor): LayerNorm's input gradient
// from d normed plus d sum (undefined: none), one block a row, rounded once.
at::Tensor add_layer_norm_input_gradient_cuda(const at::Tensor& d_normed, const at::Tensor& d_sum,
                                              const at::Tensor& sum, const at::Tensor& mean, const at::Tensor& rstd,
                                              const at::Tensor& weight);

// (d weight, d bias): the column sums of d normed x^ and of d normed over the rows, added in fp32 in
// bias_gradient_plan.h's order (deterministic) and rounded once to the dtype.
std::pair<at::Tensor, at::Tensor> layer_norm_weight_gradients_cuda(const at::Tensor& d_normed, const at::Tensor& sum,
                                                                   const at::Tensor& mean, const at::Tensor& rstd);

}  // namespace segtrain::kernels
