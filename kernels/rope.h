#pragma once
// Rotary position embedding applied to q or k: one home for the arithmetic every
// RoPE block calls (models/modules/llama_block.cpp, models/modules/transformer.cpp).
#include <ATen/ATen.h>

namespace segtrain::kernels {

// x [B, heads, T, head_dim] rotated by the fp32 angles' cos and sin [B or 1, 1, T, rd]
// (rd <= head_dim, even; dimensions past rd pass through), as transformers'
// apply_rotary_pos_emb. The result has the composite's dtype: x's type promoted with the
// fp32 angles, except under autocast, where it is x's (the autocast dtype the attention
// casts q and k to anyway, rounded once from the same fp32 value). On a CUDA device with
// fused kernels (the default) one kernel computes it (and one its gradient) in fp32
// registers; otherwise ATen's composite.
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// The CUDA kernel and its gradient's as one autograd node, whatever the switch says
// (rope() takes it when it applies; the gpu suite tests it against the composite).
// InputError in a build without CUDA.
at::Tensor rope_fused(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// ATen's composite, the reference the kernel is tested against.
at::Tensor rope_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace segtrain::kernels
