#include "models/modules/llama_block.h"

#include <tuple>

#include "kernels/residual_norm.h"
#include "kernels/rms_norm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "models/modules/attention.h"
#include "models/modules/positions.h"

namespace segtrain::models {

namespace {

Projection linear(int64_t in, int64_t out, bool bias) { return Projection(in, out, bias); }

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", at::ones({dim}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) { return kernels::rms_norm(x, weight, eps); }

LlamaBlockImpl::LlamaBlockImpl(const ModelConfig& c)
    : n_heads(c.n_heads), n_kv_heads(n_kv_heads_of(c)), head_dim(head_dim_of(c)) {
  const int64_t d = c.d_model, ff = d_ff_of(c);
  ln1 = register_module("ln1", RMSNorm(d, c.layer_norm_eps));
  ln2 = register_module("ln2", RMSNorm(d, c.layer_norm_eps));
  q_proj = register_module("q_proj", linear(d, n_heads * head_dim, c.qkv_bias));
  k_proj = register_module("k_proj", linear(d, n_kv_heads * head_dim, c.qkv_bias));
  v_proj = register_module("v_proj", linear(d, n_kv_heads * head_dim, c.qkv_bias));
  o_proj = register_module("o_proj", linear(n_heads * head_dim, d, c.o_bias));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RMSNorm(head_dim, c.layer_norm_eps));
    k_norm = register_module("k_norm", RMSNorm(head_dim, c.layer_norm_eps));
  }
  gate_proj = register_module("gate_proj", linear(d, ff, c.mlp_bias));
  up_proj = register_module("up_proj", linear(d, ff, c.mlp_bias));
  down_proj = register_module("down_proj", linear(ff, d, c.mlp_bias));
}

Residual LlamaBlockImpl::forward(const Residual& in, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                                 const AttentionBias& bias, KvLayer* kv) {
  // Each residual add as the norm after it reads the sum (kernels/residual_norm.h: fused where the
  // switch says all): the last block's MLP output with ln1 here, the attention's with ln2 below.
  const auto [x, h] = kernels::add_rms_norm(in.stream, in.branch, ln1->weight, ln1->eps);
  const int64_t b = x.size(0), t = x.size(1);
  auto q = q_proj(h).view({b, t, n_heads, head_dim}).transpose(1, 2);
  auto k = k_proj(h).view({b, t, n_kv_heads, head_dim}).transpose(1, 2);
  auto v = v_proj(h).view({b, t, n_kv_heads, head_dim}).transpose(1, 2);
  if (q_norm) q = q_norm(q), k = k_norm(k);  // over head_dim, the last dimension
  q = kernels::rope(q, rope_cos, rope_sin);
  k = kernels::rope(k, rope_cos, rope_sin);
  if (kv) std::tie(k, v) = kv->append(k, v);
  auto y = causal_attention(q, k, v, bias);
  const auto [attended, m] = kernels::add_rms_norm(x, o_proj(y.transpose(1, 2).reshape({b, t, n_heads * head_dim})),
                                                   ln2->weight, ln2->eps);
  const at::Tensor gate = gate_proj(m);  // before up, as transformers' MLP (an adapter's dropout draws in this order)
  return {attended, down_proj(kernels::swiglu(gate, up_proj(m)))};  // the MLP's add left to the next norm
}

}  // namespace segtrain::models
