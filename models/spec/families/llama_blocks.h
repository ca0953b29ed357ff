#pragma once
// What the families built on Llama's block (RMSNorm, SwiGLU, grouped-query
// attention, RoPE on the whole head) share: reading and writing its config.json
// keys, and its tensor names. Each family adds its own keys (biases, windows).
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "models/spec/config.h"
#include "models/spec/families/hf_names.h"

namespace segtrain::models {

// The Llama-block keys of config.json `cfg` (a `model_type` model, whose
// max_position_embeddings defaults to `default_positions`) into `c`.
void read_llama_block(const nlohmann::json& cfg, const std::string& model_type, int64_t default_positions,
                      ModelConfig& c, const std::string& source);

// Qwen2's and Qwen3's window, nullopt when none is in effect: the layers listed as
// sliding_attention in layer_types (transformers 5 writes them), or else the layers
// from max_window_layers on when use_sliding_window is true.
std::optional<int64_t> qwen_sliding_window(const nlohmann::json& cfg, int64_t n_layers, const std::string& source);

// config.json's Llama-block keys for `c` as transformers' `cls` of `model_type`, with its
// RoPE settings; `note` gets what transformers does differently, if anything.
nlohmann::json write_llama_block(const ModelConfig& c, const std::string& cls, const std::string& model_type,
                                 std::string& note);

// LlamaForCausalLM's names, which Mistral and Qwen2 share: bias rows apply when the
// config has them; an untied head, "lm_head", is outside the base model, and a tied
// one is not saved (an extra copy is ignored).
const HfNameTable& llama_block_names();

}  // namespace segtrain::models
