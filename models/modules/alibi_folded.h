#pragma once
// ALiBi's bias folded into q·k, so that a bf16 run's attention takes the fused causal
// kernel (flash) with no bias tensor at all, where the bias as a tensor keeps CUDA on the
// fp32 memory-efficient kernel and B·H·T² floats of memory (attention.h).
//
// The bias -m_h (p_i - p_j) differs from m_h (p_j - p_0), p_0 the row's first position,
// by a constant of the query's row, which softmax ignores (transformers' BLOOM adds m_h p_j
// alone). That is a dot product of per-head constants with per-key digits, each exact in
// bf16:
//   p_j - p_0 = 65536 a + 256 b + c, b and c in [0, 256), |a| <= 256;
//   m_h / scale = hi + lo, hi and lo bf16 (the pair carries 16 significant bits);
// q gains kFoldedAlibiDims dimensions [65536 hi, 256 hi, hi, 65536 lo, 256 lo, lo, 0, 0],
// k [a, b, c, a, b, c, 0, 0], v zeros, and SDPA's scale stays 1/sqrt(head_dim). Every
// product of a digit and a constant is exact in the kernel's fp32 accumulator, which sums
// them with q·k, so no bias is ever rounded to 16 bits (a bf16 bias tensor gives about 38
// neighbouring positions one value by 8k: the ALiBi precision study's concern). What remains
// is the accumulator's rounding of each logit, which sits near m_h (p_i - p_0): 2^-24 of it
// (the fp32 bias tensor's logits sit near q·k instead). The cost: 8 more dimensions in q·k
// and in v.
// Where precision allows: m_h (p_i - p_0) at most kFoldedAlibiMaxBias, so that this rounding
// (at most 2^-10 of a logit) stays below the flash kernel's own rounding of the attention
// weights to bf16 (2^-9 of each); a longer span without interpolated slopes keeps the fp32
// bias tensor.
#include <ATen/ATen.h>

#include <cstdint>

#include "models/modules/position_bounds.h"

namespace segtrain::models {

inline constexpr int64_t kFoldedAlibiDims = 8;
// Positions whose distance from their row's first stays below 2^24 fold (three digits).
inline constexpr int64_t kFoldedAlibiMaxSpan = int64_t{1} << 24;
// The largest m_h (p_i - p_0) that folds: 2^-24 of it is 2^-10.
inline constexpr double kFoldedAlibiMaxBias = 16384.0;

struct FoldedAlibi {
  at::Tensor q_dims;  // [1, H, 1, kFoldedAlibiDims], the per-head constants
  at::Tensor k_dims;  // [B or 1, 1, T, kFoldedAlibiDims], the per-key digits
  bool defined() const { return q_dims.defined(); }
};

// The dimensions for positions [B, T] (integer ids, each row's first its smallest, the
// batch's within kFoldedAlibiMaxSpan of each other) and slopes [H] fp32, for heads of
// head_dim, in `dtype` (bf16 or fp32: both hold them exactly). Reads nothing back.
FoldedAlibi fold_alibi(const at::Tensor& positions, const at::Tensor& slopes, int64_t head_dim,
                       at::ScalarType dtype);

// Whether folding fits: heads of at most 248 dimensions (flash's 256 with the folded ones),
// and precision allows: largest_slope times the batch's span of positions (bounds) at most
// kFoldedAlibiMaxBias (the span also below kFoldedAlibiMaxSpan).
bool alibi_folds_within_precision(int64_t head_dim, const PositionBounds& bounds, double largest_slope);

// Whether a forward on `device` folds ALiBi: a CUDA device under bf16 autocast (the flash
// kernel's case), with the fused kernels on (unless SEGTRAIN_FUSED_KERNELS=0), where
// alibi_folds_within_precision for the largest of host_slopes ([H] on the host, read from its
// memory: no op, no wait). Elsewhere the fp32 bias tensor serves (attention.h).
bool folds_alibi(const c10::Device& device, int64_t head_dim, const PositionBounds& bounds,
                 const at::Tensor& host_slopes);

// Causal attention of q [B, H, T, hd] over k, v [B, H_kv, T, hd] (H_kv dividing H) with the
// folded bias; the same result as causal_attention with alibi_causal_mask, within the
// rounding the header states. Runs on any device and in fp32 or bf16 (autocast's dtype).
at::Tensor folded_alibi_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const FoldedAlibi& folded);

}  // namespace segtrain::models
