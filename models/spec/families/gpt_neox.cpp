// GPTNeoXForCausalLM: RoPE on rotary_pct of each head, parallel residual, exact
// GELU, an untied head ("embed_out", outside the base model).
#include "models/spec/auto_values.h"
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/megatron_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

constexpr bool kUnprefixed = false;

class GptNeox final : public Family {
 public:
  const char* model_type() const override { return "gpt_neox"; }
  Arch arch() const override { return Arch::gpt_neox; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    read_standard_sizes(cfg, Arch::gpt_neox, c, source);
    c.max_positions = field_or<int64_t>(cfg, "max_position_embeddings", 2048, source);
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_eps", 1e-5, source);
    const auto act = field_or<std::string>(cfg, "hidden_act", "gelu", source);
    require(act == "gelu", source, "hidden_act \"" + act + "\"");
    require(field_or<bool>(cfg, "use_parallel_residual", true, source), source, "use_parallel_residual=false");
    require(!field_or<bool>(cfg, "tie_word_embeddings", false, source), source, "a tied gpt_neox head");
    require(field_or<bool>(cfg, "attention_bias", true, source), source, "attention_bias=false");
    const json rope = rope_settings(cfg);
    c.rope.rotary_pct = field_or<double>(rope, "partial_rotary_factor",
                                         field_or<double>(cfg, "rotary_pct", 0.25, source), source);
    c.rope.theta = field_or<double>(rope, "rope_theta", field_or<double>(cfg, "rotary_emb_base",
                                    field_or<double>(cfg, "rope_theta", 10000.0, source), source), source);
    read_rope_scaling(cfg, rope, c, source);
    return c;
  }

  bool exports(const ModelConfig& c) const override { return c.arch == Arch::gpt_neox; }

  HfConfigOut write_config(const ModelConfig& c) const override {
    const RopeExport rope = rope_export(c, c.rope.rotary_pct);
    HfConfigOut out;
    out.note = rope.note;
    out.config = {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"},
                  {"vocab_size", vocab_size_of(c)}, {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers},
                  {"num_attention_heads", c.n_heads}, {"intermediate_size", d_ff_of(c)}, {"hidden_act", "gelu"},
                  {"max_position_embeddings", rope.max_positions}, {"layer_norm_eps", c.layer_norm_eps},
                  {"use_parallel_residual", true}, {"tie_word_embeddings", false}, {"attention_bias", true},
                  {"hidden_dropout", 0.0}, {"attention_dropout", 0.0}, {"rope_scaling", rope.scaling},
                  {"rope_parameters", rope.parameters}, {"rotary_pct", c.rope.rotary_pct},
                  {"partial_rotary_factor", c.rope.rotary_pct}, {"rotary_emb_base", rope.theta},
                  {"rope_theta", rope.theta}};
    if (rope.original_length) out.config["original_max_position_embeddings"] = *rope.original_length;
    return out;
  }

  const HfNameTable& names() const override {
    static const HfNameTable table = with_blocks({"gpt_neox.",
                                                  {{"wte.weight", "embed_in.weight"},
                                                   {"ln_f.weight", "final_layer_norm.weight"},
                                                   {"ln_f.bias", "final_layer_norm.bias"},
                                                   {"lm_head.weight", "embed_out.weight", kUnprefixed}},
                                                  {"attention.bias", "attention.masked_bias", "rotary_emb.inv_freq"}},
                                                 megatron_blocks("layers", "attention"));
    return table;
  }
};

}  // namespace

const Family& gpt_neox_family() {
  static const GptNeox family;
  return family;
}

}  // namespace segtrain::models
