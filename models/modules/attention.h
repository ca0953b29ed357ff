#pragma once
// Causal self-attention through at::scaled_dot_product_attention.
#include <ATen/ATen.h>

#include <utility>

#include "models/modules/alibi_folded.h"

namespace segtrain::models {

// What attention adds to q·k besides causality by sequence order: nothing (RoPE, APE), a
// float mask (ALiBi's fp32 bias; the causal mask after a KV cache's read tokens), or ALiBi
// folded into q·k (alibi_folded.h).
struct AttentionBias {
  at::Tensor mask;
  FoldedAlibi folded;
  AttentionBias() = default;
  AttentionBias(at::Tensor float_mask) : mask(std::move(float_mask)) {}  // NOLINT(google-explicit-constructor): a mask is a bias
};

// One float mask of shape (B, H, T, T) holding the causal mask (by sequence
// order) and the ALiBi bias -m_h * (pos_q - pos_k) from the actual position ids,
// in fp32. It never requires grad, which keeps SDPA's fused CPU kernel in use.
// positions: [B, T] integer; slopes: [H] fp32.
//
// The mask is a view [..., :T] of a buffer whose rows are alibi_row_stride(T)
// floats long, so its storage is 4·B·H·T·alibi_row_stride(T) bytes. CUDA's
// memory-efficient SDPA kernel wants a bias whose strides are multiples of 8
// elements and pads a misaligned one itself, on every call, i.e. once per layer;
// built aligned, the one bias serves all layers as it is.
at::Tensor alibi_causal_mask(const at::Tensor& positions, const at::Tensor& slopes);

// The mask of queries that follow tokens already read (generation with a KV cache):
// query i of q_positions [B, Tq] is token Tk - Tq + i of k_positions [B, Tk] (the read
// tokens, then the queries) and sees keys 0..Tk - Tq + i. With ALiBi slopes [H] it also
// holds the bias -m_h * (pos_q - pos_k); fp32, (B, H, Tq, Tk), or (1, 1, Tq, Tk) without slopes.
at::Tensor causal_mask_after_read(const at::Tensor& q_positions, const at::Tensor& k_positions,
                                  const at::Tensor& slopes = {});

// The bias row alignment of CUDA's memory-efficient attention kernel, in elements.
inline constexpr int64_t kAlibiBiasAlignment = 8;
// T rounded up to a multiple of kAlibiBiasAlignment: the mask's last-dim stride.
int64_t alibi_row_stride(int64_t length);

// Whether grouped-query attention repeats k and v to the query heads rather than passing SDPA's
// enable_gqa: on CUDA in fp32 or with a mask, where no fused kernel takes H_kv < H.
bool repeats_kv_heads(c10::DeviceType device, at::ScalarType compute_dtype, bool masked);

// q: [B, H, T, hd]; k, v: [B, H_kv, T, hd] with H_kv dividing H (grouped-query
// attention: SDPA's enable_gqa, or k/v repeated where repeats_kv_heads). Without a mask the causal mask is implicit (SDPA's
// flash kernel on CUDA under bf16 autocast). With a mask it stays fp32 (seed
// 002): under autocast q/k/v run in the autocast dtype on CPU, and in fp32 on
// CUDA, whose fused bias kernel (memory-efficient) needs q's dtype for the bias.
// A folded ALiBi bias runs folded_alibi_attention.
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionBias& bias = {});

}  // namespace segtrain::models
