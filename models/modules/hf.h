#pragma once
// transformers interop: HF folders (config.json + safetensors) in and out, for every
// model family of models/spec/families/ (GPT-2, GPT-NeoX, BLOOM, and Llama, Mistral, Qwen2,
// Qwen3 and Phi-3 on Llama's block). A folder's config.json alone is read torch-free
// (models/spec/families/hf_config.h read_hf_config), so the run config reads it the same way.
#include <string>

#include "models/modules/safetensors.h"
#include "models/modules/transformer.h"
#include "models/spec/config.h"

namespace segtrain::models {

// The folder's weights renamed to TransformerLM's parameter names by the table of
// the family its config.json's model_type names: accepts keys with or without the "transformer." /
// "gpt_neox." prefix, drops the table's ignored buffers (attention masks,
// inv_freq, tied lm_head copies) and warns about any other unknown tensor,
// transposes GPT-2's Conv1D weights, splits fused tensors (Phi-3's qkv_proj, gate_up_proj)
// at the sizes config.json gives. Each is read when asked, in the dtype stored.
TensorSources hf_tensor_sources(const std::string& dir);
// The same, every tensor read at once and converted to fp32.
TensorMap read_hf_tensors(const std::string& dir);

struct HfExportOptions {
  at::ScalarType dtype = at::kFloat;            // float32 or bfloat16 weights (config.json's torch_dtype)
  int64_t max_shard_bytes = 5'000'000'000;      // larger models go in shards + model.safetensors.index.json
  // The longest sequences the model was trained on (its run's data.extended_length); 0: unknown.
  // Without a scaling, max_position_embeddings says at least this: serving engines cap the context there.
  int64_t trained_length = 0;
};

// Writes config.json and model.safetensors (or shards and their index) that
// transformers 4.4x and 5.x load as they are, as the family that exports the
// model's config (models/spec/families/family.h):
//   gpt2     the (interpolated) table is written whole and n_positions = its rows;
//   gpt_neox interpolate -> rope "linear", dynamic_ntk -> "dynamic", yarn -> "yarn",
//            llama3 -> "llama3", longrope -> "longrope" (rope_scaling and rope_parameters),
//            ntk -> default rope with rope_theta = theta * a^(d/(d-2));
//   bloom    weights as they are; ALiBi extensions cannot be expressed.
//   llama    the family it was read as where that family reproduces it (Phi3ForCausalLM
//            with fused tensors), else LlamaForCausalLM (Qwen3ForCausalLM with q/k norms,
//            Qwen2ForCausalLM when only q/k/v have biases, MistralForCausalLM with a
//            sliding window), RoPE extensions as gpt_neox.
// config.json's "segtrain" field records the extension and whether transformers
// reproduces it ("transformers_reproduces"), with a note when it does not; the same
// is returned, for the caller to tell the user.
struct HfExported {
  bool transformers_reproduces = true;
  std::string note;
};
HfExported export_hf(const TransformerLM& model, const std::string& dir, const HfExportOptions& options = {});

}  // namespace segtrain::models
