#pragma once
// One decoder-only TransformerLM built as model.arch's layout says
// (models/spec/arch.h), never by asking which arch it is:
//   gpt2     learned APE, pre-LN, tanh GELU, tied head
//   gpt_neox RoPE on rotary_pct of each head, parallel residual, exact GELU, untied head
//   bloom    ALiBi, LayerNorm after the embedding, tanh GELU, tied head
//   llama    RoPE on the whole head, RMSNorm, SwiGLU, grouped-query attention,
//            optional biases, tied or untied head (models/modules/llama_block.h)
// forward(tokens [B,T], positions [B,T], bounds) -> logits [B,T,V], which is
// logits(hidden(tokens, positions, bounds)); callers that need the head over slices of the
// tokens (models/modules/lm_head_loss.h) or at one position take hidden() and the head
// apart. Positions are any per-sample ids (segmented sequences keep their original
// ones); the causal mask follows sequence order. Parameter names are segtrain's
// own; models/spec/families/hf_names.h maps them to transformers'.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <string>

#include "models/modules/device_table.h"
#include "models/modules/kv_cache.h"
#include "models/modules/llama_block.h"
#include "models/modules/position_bounds.h"
#include "models/modules/projection.h"
#include "models/modules/tensor_source.h"
#include "models/spec/config.h"

namespace segtrain::models {

// The dtype a loaded parameter takes: fp32 (what trains and evaluates), or the file's
// own (the trainer then settles each parameter's dtype by whether it trains).
enum class WeightDtype { fp32, as_stored };

// Megatron's block (gpt2, gpt_neox, bloom): LayerNorm, GELU MLP, one fused qkv.
struct BlockImpl : DecoderBlock {
  BlockImpl(const ModelConfig& config);
  Residual forward(const Residual& in, const at::Tensor& rope_cos, const at::Tensor& rope_sin,
                   const AttentionBias& bias, KvLayer* kv = nullptr) override;

  const ArchLayout& layout;
  int64_t n_heads, head_dim;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  // qkv keeps each arch's HF layout (layout.qkv): [q|k|v], or [q,k,v] per head.
  Projection qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_out{nullptr};
};
TORCH_MODULE(Block);

struct TransformerLMImpl : torch::nn::Module {
  explicit TransformerLMImpl(ModelConfig config);
  // bounds must be PositionBounds::of(positions), computed by the caller on the host
  // batch: the forward then never reads a device tensor back (no synchronisation).
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions, const PositionBounds& bounds);
  // The final norm's output [B,T,D]: everything but the LM head.
  at::Tensor hidden(const at::Tensor& tokens, const at::Tensor& positions, const PositionBounds& bounds);
  // Conveniences that compute PositionBounds::of(positions) themselves: free on the
  // CPU, a synchronisation when positions live on a device.
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& positions);
  at::Tensor hidden(const at::Tensor& tokens, const at::Tensor& positions);
  // Generation: the final norm's output [B,T,D] for the next tokens of sequences whose
  // earlier tokens `cache` holds (none at first: the prompt), which it then holds too.
  // Positions continue under the model's extension: dynamic NTK, LongRoPE and dynamic
  // ALiBi take the length from the largest position id read (transformers' rule).
  at::Tensor decode(const at::Tensor& tokens, const at::Tensor& positions, KvCache& cache);
  // InputError when a learned position table has no row for some position within `bounds`
  // (`end` is the largest id + 1): what forward checks, for a caller that replays a captured
  // forward on new positions (trainer/train/trainer_captured_step.cpp).
  void check_positions(const PositionBounds& bounds) const;
  // The LM head's weight [V,D]: lm_head's, or wte's when the head is tied.
  at::Tensor head_weight() const;
  // The LM head on hidden states [...,D] -> logits [...,V].
  at::Tensor logits(const at::Tensor& hidden);

  // Fills the parameters from named tensors (names as in named_parameters()), one
  // tensor read at a time: each is copied into its fp32 parameter, or with
  // WeightDtype::as_stored becomes the parameter as read (a bf16 base stays bf16 and is
  // never copied). A gpt2 position table with the original number of rows is
  // interpolated to the extended table (the segmented-sequences paper's linear
  // interpolation). Throws InputError naming `source` on a missing tensor or shape
  // mismatch; with strict, also on an unexpected name.
  void load_tensors(const TensorSources& tensors, const std::string& source, bool strict = true,
                    WeightDtype dtype = WeightDtype::fp32);
  void load_tensors(const std::map<std::string, at::Tensor>& tensors, const std::string& source,
                    bool strict = true) {
    load_tensors(sources_of(tensors), source, strict);
  }
  std::map<std::string, at::Tensor> tensors() const;  // named parameters, detached

  const ModelConfig& config() const { return config_; }
  // Which blocks recompute in backward from the next forward on (the trainer's auto measures, then sets it).
  void set_activation_checkpointing(const ActivationCheckpointing& checkpointing) {
    config_.activation_checkpointing = checkpointing;
  }
  // How many times the positional tables (RoPE's inverse frequencies, ALiBi's slopes) went to the
  // device: once per device and length class, not once per forward.
  int64_t positional_table_uploads() const { return rope_table_.uploads() + alibi_table_.uploads(); }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::LayerNorm emb_ln{nullptr}, ln_f{nullptr};
  RMSNorm rms_f{nullptr};  // the final norm of an RMSNorm layout, registered as "ln_f" (ln_f is then null)
  torch::nn::ModuleList blocks;
  Projection lm_head{nullptr};  // an untied head (no bias); a tied one reuses wte

 private:
  // hidden() and decode(): the blocks over the new tokens, attending over `cache` too when given.
  at::Tensor run_blocks(const at::Tensor& tokens, const at::Tensor& positions, const PositionBounds& bounds,
                        KvCache* cache);
  ModelConfig config_;
  DeviceTable rope_table_, alibi_table_;
};
TORCH_MODULE(TransformerLM);

}  // namespace segtrain::models
