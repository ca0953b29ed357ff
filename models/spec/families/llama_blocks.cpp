#include "models/spec/families/llama_blocks.h"

#include "models/spec/auto_values.h"
#include "models/spec/families/hf_config_fields.h"

namespace segtrain::models {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

void read_llama_block(const json& cfg, const std::string& model_type, int64_t default_positions, ModelConfig& c,
                      const std::string& source) {
  read_standard_sizes(cfg, Arch::llama, c, source);
  require(c.n_heads > 0, source, "num_attention_heads <= 0");
  c.n_kv_heads = field_or<int64_t>(cfg, "num_key_value_heads", c.n_heads, source);
  c.head_dim = field_or<int64_t>(cfg, "head_dim", c.d_model / c.n_heads, source);
  c.max_positions = field_or<int64_t>(cfg, "max_position_embeddings", default_positions, source);
  c.layer_norm_eps = field_or<double>(cfg, "rms_norm_eps", 1e-6, source);
  const auto act = field_or<std::string>(cfg, "hidden_act", "silu", source);
  require(act == "silu", source, "hidden_act \"" + act + "\"");
  c.tie_embeddings = field_or<bool>(cfg, "tie_word_embeddings", false, source);
  const json rope = rope_settings(cfg);
  const double partial = field_or<double>(rope, "partial_rotary_factor",
                                          field_or<double>(cfg, "partial_rotary_factor", 1.0, source), source);
  require(partial == 1.0, source, "partial_rotary_factor " + json(partial).dump() + " on a " + model_type + " model");
  c.rope.rotary_pct = 1.0;
  c.rope.theta = field_or<double>(rope, "rope_theta", field_or<double>(cfg, "rope_theta", 10000.0, source), source);
  read_rope_scaling(cfg, rope, c, source);
}

std::optional<int64_t> qwen_sliding_window(const json& cfg, int64_t n_layers, const std::string& source) {
  if (!cfg.contains("sliding_window") || cfg["sliding_window"].is_null()) return std::nullopt;
  bool slides = field_or<bool>(cfg, "use_sliding_window", false, source) &&
                field_or<int64_t>(cfg, "max_window_layers", 28, source) < n_layers;
  if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
    slides = false;
    for (const auto& layer : cfg["layer_types"]) slides = slides || layer == "sliding_attention";
  }
  if (!slides) return std::nullopt;
  return field<int64_t>(cfg, "sliding_window", source);
}

json write_llama_block(const ModelConfig& c, const std::string& cls, const std::string& model_type,
                       std::string& note) {
  const RopeExport rope = rope_export(c, 1.0);
  note = rope.note;
  json cfg = {{"architectures", {cls}}, {"model_type", model_type}, {"vocab_size", vocab_size_of(c)},
              {"hidden_size", c.d_model}, {"intermediate_size", d_ff_of(c)}, {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_heads}, {"num_key_value_heads", n_kv_heads_of(c)},
              {"head_dim", head_dim_of(c)}, {"hidden_act", "silu"}, {"max_position_embeddings", rope.max_positions},
              {"rms_norm_eps", c.layer_norm_eps}, {"tie_word_embeddings", c.tie_embeddings},
              {"attention_dropout", 0.0}, {"rope_theta", rope.theta}, {"rope_scaling", rope.scaling},
              {"rope_parameters", rope.parameters}};
  if (rope.original_length) cfg["original_max_position_embeddings"] = *rope.original_length;
  return cfg;
}

const HfNameTable& llama_block_names() {
  static const HfNameTable table = [] {
    constexpr bool kUnprefixed = false;
    HfNameTable t{"model.",
                  {{"wte.weight", "embed_tokens.weight"},
                   {"ln_f.weight", "norm.weight"},
                   {"lm_head.weight", "lm_head.weight", kUnprefixed}},
                  {"rotary_emb.inv_freq"}};
    t.tensors.push_back({"blocks.{}.ln1.weight", "layers.{}.input_layernorm.weight"});
    t.tensors.push_back({"blocks.{}.ln2.weight", "layers.{}.post_attention_layernorm.weight"});
    for (const std::string proj : {"q_proj", "k_proj", "v_proj", "o_proj"})
      for (const std::string param : {".weight", ".bias"})
        t.tensors.push_back({"blocks.{}." + proj + param, "layers.{}.self_attn." + proj + param});
    for (const std::string proj : {"gate_proj", "up_proj", "down_proj"})
      for (const std::string param : {".weight", ".bias"})
        t.tensors.push_back({"blocks.{}." + proj + param, "layers.{}.mlp." + proj + param});
    return t;
  }();
  return table;
}

}  // namespace segtrain::models
