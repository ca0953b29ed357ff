#pragma once
// RMSNorm over the last dimension: one home for the arithmetic every RMSNorm module
// calls (models/modules/llama_block.h: the blocks' norms, Qwen3's q and k norms, the
// final norm).
#include <ATen/ATen.h>

namespace segtrain::kernels {

// weight * x / sqrt(mean(x^2) + eps) over the last dimension, as transformers'
// LlamaRMSNorm: the statistics in fp32, the result in the promoted type of weight and x.
// On a CUDA device with fused kernels (the default), where x and weight share a floating
// dtype, ATen's fused kernel computes it (one kernel forward and one backward, where the
// composite runs six and keeps fp32 intermediates for backward); it rounds the product
// once where transformers rounds the normalised value and then the product (bf16: within
// one unit in the last place of the composite).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// ATen's fused op (at::_fused_rms_norm) whatever the switch says, outside autocast, so its
// result has x's dtype as the composite's does when the dtypes agree. Where no fused kernel
// exists (the CPU) ATen computes it as a composite of its own, which the CPU tests compare.
// InputError when x and weight differ in dtype (ATen would warn and take its composite).
at::Tensor rms_norm_fused(const at::Tensor& x, const at::Tensor& weight, double eps);

// transformers' LlamaRMSNorm step for step: the reference the fused op is tested against.
at::Tensor rms_norm_composite(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace segtrain::kernels
