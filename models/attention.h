#pragma once
// Causal self-attention through at::scaled_dot_product_attention.
#include <ATen/ATen.h>

namespace segtrain::models {

// One float mask of shape (B, H, T, T) holding the causal mask (by sequence
// order) and the ALiBi bias -m_h * (pos_q - pos_k) from the actual position ids,
// in fp32. It never requires grad, which keeps SDPA's fused CPU kernel in use.
// positions: [B, T] integer; slopes: [H] fp32.
at::Tensor alibi_causal_mask(const at::Tensor& positions, const at::Tensor& slopes);

// q, k, v: [B, H, T, hd]. Without a mask the causal mask is implicit. Under
// autocast q/k/v run in the autocast dtype but the mask stays fp32 (seed 002).
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask = {});

}  // namespace segtrain::models
