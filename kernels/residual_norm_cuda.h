#pragma once
// The CUDA kernels of kernels/residual_norm.h (residual_norm_cuda.cu), defined in CUDA builds only; the
// width they take is every build's (residual_norm.cpp's add_norm_fused_refusal refuses wider rows on any device).
// Tensors: contiguous CUDA tensors of one floating dtype (fp32, bf16 or fp16) starting on 16-byte
// boundaries, whose last dimension D is a multiple of 16 bytes and at most kFusedNormRowBytes
// (residual_norm.h checks both first); weight and bias [D] or undefined (1 and 0). The norm is
// LayerNorm where `centered` (or a mean is given), RMSNorm (no mean, no bias) where not.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace segtrain::kernels {

// The widest row the fused kernels take: 128 threads holding 8 packs of 16 bytes each
// (8,192 bf16 or 4,096 fp32 values; GPT-2's 768 to 1,600 and a 7B model's 4,096 in bf16).
inline constexpr int64_t kFusedNormRowBytes = 16 * 1024;

struct AddNormForward {
  at::Tensor sum, normed;  // x's shape and dtype
  at::Tensor mean, rstd;   // [rows] fp32, rows = numel / D; no mean for RMSNorm
};

// sum = x + branch (rounded to x's dtype), normed = the norm of the rounded sum, one block a row
// reading x and branch once and writing both.
AddNormForward add_norm_forward_cuda(const at::Tensor& x, const at::Tensor& branch, const at::Tensor& weight,
                                     const at::Tensor& bias, double eps, bool centered);

// The gradient of the sum's inputs (x's and branch's, the same tensor): the norm's input gradient
// from d normed plus d sum (undefined: none), one block a row, rounded once. LayerNorm's where a
// mean is given, RMSNorm's where it is undefined.
at::Tensor add_norm_input_gradient_cuda(const at::Tensor& d_normed, const at::Tensor& d_sum, const at::Tensor& sum,
                                        const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& weight);

// (d weight, d bias): the column sums of d normed x^ and of d normed over the rows, added in fp32 in
// bias_gradient_plan.h's order (deterministic) and rounded once to the dtype; without a mean
// (RMSNorm) x^ = sum rstd and d bias is undefined.
std::pair<at::Tensor, at::Tensor> norm_weight_gradients_cuda(const at::Tensor& d_normed, const at::Tensor& sum,
                                                             const at::Tensor& mean, const at::Tensor& rstd);

}  // namespace segtrain::kernels
