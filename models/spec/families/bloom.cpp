// BloomForCausalLM: ALiBi, a LayerNorm after the embedding, tanh GELU, a head tied
// to the embedding. transformers' BLOOM has fixed slopes and ignores position ids:
// segtrain's ALiBi extensions are recorded for segtrain alone.
#include "models/spec/auto_values.h"
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/megatron_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

class Bloom final : public Family {
 public:
  const char* model_type() const override { return "bloom"; }
  Arch arch() const override { return Arch::bloom; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    c.arch = Arch::bloom;
    c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
    c.d_model = cfg.contains("hidden_size") ? hidden_size(cfg, "hidden_size", source)
                                            : hidden_size(cfg, "n_embed", source);
    c.n_layers = cfg.contains("n_layer") ? field<int64_t>(cfg, "n_layer", source)
                                         : field<int64_t>(cfg, "num_hidden_layers", source);
    c.n_heads = cfg.contains("n_head") ? field<int64_t>(cfg, "n_head", source)
                                       : field<int64_t>(cfg, "num_attention_heads", source);
    c.d_ff = 4 * c.d_model;
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_epsilon", 1e-5, source);
    // BLOOM configs carry no trained length; BLOOM itself was trained at 2048.
    int64_t trained = field_or<int64_t>(cfg, "seq_length", 2048, source);
    if (cfg.contains("segtrain") && cfg["segtrain"].contains("max_positions"))
      trained = field<int64_t>(cfg["segtrain"], "max_positions", source);
    c.max_positions = trained;
    require(!field_or<bool>(cfg, "apply_residual_connection_post_layernorm", false, source), source,
            "apply_residual_connection_post_layernorm=true");
    return c;
  }

  bool exports(const ModelConfig& c) const override { return c.arch == Arch::bloom; }

  HfConfigOut write_config(const ModelConfig& c) const override {
    if (d_ff_of(c) != 4 * c.d_model)
      throw InputError("export: BLOOM's MLP width is fixed at 4 * hidden_size; model.d_ff is " +
                       std::to_string(d_ff_of(c)));
    HfConfigOut out;
    out.config = {{"architectures", {"BloomForCausalLM"}}, {"model_type", "bloom"}, {"vocab_size", vocab_size_of(c)},
                  {"hidden_size", c.d_model}, {"n_layer", c.n_layers}, {"n_head", c.n_heads},
                  {"layer_norm_epsilon", c.layer_norm_eps}, {"apply_residual_connection_post_layernorm", false},
                  {"hidden_dropout", 0.0}, {"attention_dropout", 0.0}, {"pretraining_tp", 1},
                  {"slow_but_exact", false}, {"tie_word_embeddings", true}, {"seq_length", max_positions_of(c)}};
    if (c.extension.method != ExtensionMethod::none) {
      out.transformers_reproduces = false;
      out.note = "transformers' BLOOM uses fixed ALiBi slopes and ignores position ids; load with segtrain to apply " +
                 std::string(enum_name(kExtensionMethods, c.extension.method));
    }
    return out;
  }

  const HfNameTable& names() const override {
    static const HfNameTable table = with_blocks({"transformer.",
                                                  {{"wte.weight", "word_embeddings.weight"},
                                                   {"emb_ln.weight", "word_embeddings_layernorm.weight"},
                                                   {"emb_ln.bias", "word_embeddings_layernorm.bias"},
                                                   {"ln_f.weight", "ln_f.weight"},
                                                   {"ln_f.bias", "ln_f.bias"}},
                                                  {"lm_head.weight"}},
                                                 megatron_blocks("h", "self_attention"));
    return table;
  }
};

}  // namespace

const Family& bloom_family() {
  static const Bloom family;
  return family;
}

}  // namespace segtrain::models
