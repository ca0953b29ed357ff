#pragma once
// LayerNorm over the last dimension: one home for the call every LayerNorm module makes
// (models/modules/transformer.cpp: the GPT-2-family blocks' norms, the embedding norm, the
// final norm).
#include <ATen/ATen.h>

namespace segtrain::kernels {

// What reads a LayerNorm's result: only a matmul under autocast (a block's norms, before its
// attention's and MLP's projections), or anything else (an embedding norm, whose result becomes
// the residual stream; the final norm, whose gradient comes back from the head in fp32).
enum class NormReader { matmul, other };

// (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (weight and bias may be
// undefined), as at::layer_norm computes it where it is called. Autocast has LayerNorm on its
// fp32 list: a bf16 residual stream (train.param_dtype: bf16) is copied to fp32, normalised in
// fp32, returned in fp32 and cast back to bf16 by the next matmul, and the fp32 copy is kept for
// backward. On a CUDA device with fused kernels (the default), where only a matmul reads the result
// and x, weight and bias share a 16-bit dtype, ATen's kernel is called outside autocast instead
// (layer_norm_16bit): it computes the statistics and the normalised value in fp32 registers and
// rounds once, to what the matmul's cast would have rounded the fp32 result to (and backward, from
// the matmul's 16-bit gradient, rounds x's gradient once, as the cast's backward did), reading and
// writing the stream in 16 bits. Another reader keeps autocast's fp32 result (an fp32 stream from
// BLOOM's embedding norm; the head's fp32 gradient into the final norm).
// Elsewhere, parameters narrower than x (bf16 weights in an fp32 stream: bf16 storage whose
// matmuls run in fp32 on a CPU without a fast bf16 GEMM, trainer/runtime/cpu_matmul.h) are read
// in x's dtype, since ATen's CPU kernel takes fp32 parameters with a bf16 input but not the
// reverse; the cast is autograd's, so their gradients come back in their own dtype.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps,
                      NormReader reader);

// ATen's LayerNorm outside autocast, whatever the switch says: the result in x's dtype. On the
// CPU, ATen's CPU kernel (the tests compare it with autocast's fp32 result). InputError unless
// x is bf16 or fp16 and weight and bias (where defined) have its dtype.
at::Tensor layer_norm_16bit(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

}  // namespace segtrain::kernels
