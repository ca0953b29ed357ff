#pragma once
// Positional math of the three schemes and every extension method (seeds 000-004).
// Everything here is fp32 (or fp64 rounded to fp32) whatever the compute dtype:
// the ALiBi precision study shows that ALiBi biases at thousands of positions collapse in 16 bits.
#include <ATen/ATen.h>

#include <cstdint>

#include "models/spec/auto_values.h"
#include "models/spec/config.h"

namespace segtrain::models {

// --- learned absolute positions (gpt2) -------------------------------------
// Karypis et al. 2024 (segmented training), section 3.2: row i of the new table is the old table linearly
// interpolated at i / beta, beta = new_rows / old_rows; rows past beta*(L_t-1)
// copy the last original row. For integer beta this is the paper's formula.
at::Tensor interpolate_ape_table(const at::Tensor& table, int64_t new_rows);
// Fractional original position each new row is read from (i / beta, clamped).
at::Tensor ape_source_positions(int64_t old_rows, int64_t new_rows);

// --- RoPE (gpt_neox, llama) ---------------------------------------------------------
struct RopeParams {
  at::Tensor inv_freq;          // [rotary_dim / 2], fp32
  double attention_scale = 1.0;  // multiplies cos and sin (YaRN), as transformers
  double base = 0.0;             // effective theta (NTK variants)
};
// seq_len is the actual sequence length (max position id + 1); only dynamic_ntk
// looks at it, like transformers' dynamic rope update.
RopeParams rope_params(const ModelConfig& config, int64_t seq_len);

// --- ALiBi (bloom) -----------------------------------------------------------
// BLOOM's slopes, including head counts that are not powers of two: the first
// 2^k heads get 2^(-8/2^k)^h, the rest the odd powers of 2^(-4/2^k).
at::Tensor alibi_slopes(int64_t heads);
// NTK-ALiBi (the NTK-ALiBi note) generalised: each slope m is divided by a^t with
// t = ln(m_max / m) / ln(m_max / m_min), so the steepest head extrapolates (t=0)
// and the shallowest interpolates by a (t=1), geometric in between. For H a power
// of two, t = (h-1)/(H-1) exactly as the NTK-ALiBi note. One head: t = 1.
at::Tensor ntk_alibi_slopes(int64_t heads, double a);
// Slopes in effect for a sequence of seq_len positions (max position id + 1):
// interpolate m*L/L' with L' = factor*L (static) or L' = seq_len (dynamic), only
// when L' > L (Al-Khateeb et al. 2023); ntk_alibi with a = factor.
at::Tensor alibi_slopes_for(const ModelConfig& config, int64_t seq_len);

}  // namespace segtrain::models
