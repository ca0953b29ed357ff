#pragma once
// The Llama family's block (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM):
//   h   = x + o_proj(attention(rope(q_proj(ln1(x))), rope(k_proj(..)), v_proj(..)))
// (Qwen3, model.qk_norm: rope(q_norm(q_proj(..))) and rope(k_norm(k_proj(..))), each
// RMSNorm over one head's head_dim)
//   out = h + down_proj(silu(gate_proj(ln2(h))) * up_proj(ln2(h)))
// with RMSNorm computed in fp32 exactly as transformers' LlamaRMSNorm, RoPE on the
// whole head_dim (rotate-half) and grouped-query attention (n_kv_heads key/value
// heads shared by n_heads / n_kv_heads query heads each) through SDPA's own GQA,
// so keys and values are never repeated in memory. Also DecoderBlock, the
// interface TransformerLM runs every block layout through.
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "models/modules/attention.h"
#include "models/modules/kv_cache.h"
#include "models/modules/projection.h"
#include "models/spec/config.h"

namespace segtrain::models {

// The residual stream between two blocks: `stream` and the last block's branch (its MLP's output)
// not yet added to it, so that the next norm to read the sum adds it as it reads it
// (kernels/residual_norm.h: one pass forward and one backward fewer where that is fused).
struct Residual {
  at::Tensor stream;
  at::Tensor branch;  // undefined: nothing pending, stream is the whole
  // stream + branch, for a reader that is not one norm (a parallel-residual block, a checkpointed one).
  at::Tensor whole() const { return branch.defined() ? stream + branch : stream; }
};

// One transformer block of any layout.
struct DecoderBlock : torch::nn::Module {
  // rope_cos/sin: [B, 1, T, rotary_dim] or undefined; bias: nothing, an fp32 mask (B,H,T,T)
  // or ALiBi folded (attention.h). With `kv`, the block attends over the keys and values it
  // holds as well, and appends the new ones (then the mask is (B|1, H|1, T, T_read + T):
  // causal, or ALiBi's bias). A block must add in.branch (through its first norm,
  // kernels/residual_norm.h, or Residual::whole()); it returns the stream after it, whose
  // last add a sequential-residual block leaves pending (Residual::branch).
  virtual Residual forward(const Residual& in, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                           const AttentionBias& bias, KvLayer* kv = nullptr) = 0;
};

// x.float() * rsqrt(mean(x.float()^2) + eps), cast back to x's dtype, then * weight.
struct RMSNormImpl : torch::nn::Module {
  RMSNormImpl(int64_t dim, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

struct LlamaBlockImpl : DecoderBlock {
  explicit LlamaBlockImpl(const ModelConfig& config);
  Residual forward(const Residual& in, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                   const AttentionBias& bias, KvLayer* kv = nullptr) override;

  int64_t n_heads, n_kv_heads, head_dim;
  RMSNorm ln1{nullptr}, ln2{nullptr};
  Projection q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // model.qk_norm (Qwen3): over each head, before RoPE
  Projection gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaBlock);

}  // namespace segtrain::models
