// GPT2LMHeadModel: learned absolute positions, pre-LN blocks, tanh GELU, a head tied
// to the embedding; Conv1D weights stored [in, out].
#include "models/spec/auto_values.h"
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

constexpr bool kTranspose = true, kPrefixed = true;

class Gpt2 final : public Family {
 public:
  const char* model_type() const override { return "gpt2"; }
  Arch arch() const override { return Arch::gpt2; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    c.arch = Arch::gpt2;
    c.vocab_size = field<int64_t>(cfg, "vocab_size", source);
    c.d_model = hidden_size(cfg, "n_embd", source);
    c.n_layers = field<int64_t>(cfg, "n_layer", source);
    c.n_heads = field<int64_t>(cfg, "n_head", source);
    c.d_ff = field_or<int64_t>(cfg, "n_inner", 4 * c.d_model, source);
    c.max_positions = field<int64_t>(cfg, "n_positions", source);
    c.layer_norm_eps = field_or<double>(cfg, "layer_norm_epsilon", 1e-5, source);
    const auto act = field_or<std::string>(cfg, "activation_function", "gelu_new", source);
    require(act == "gelu_new" || act == "gelu_pytorch_tanh", source, "activation_function \"" + act + "\"");
    require(!field_or<bool>(cfg, "scale_attn_by_inverse_layer_idx", false, source), source,
            "scale_attn_by_inverse_layer_idx");
    require(field_or<bool>(cfg, "scale_attn_weights", true, source), source, "scale_attn_weights=false");
    require(field_or<bool>(cfg, "tie_word_embeddings", true, source), source, "an untied gpt2 head");
    return c;
  }

  bool exports(const ModelConfig& c) const override { return c.arch == Arch::gpt2; }

  // The (interpolated) table is written whole and n_positions is its rows.
  HfConfigOut write_config(const ModelConfig& c) const override {
    const int64_t rows = ape_rows(c);
    HfConfigOut out;
    out.config = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"vocab_size", vocab_size_of(c)},
                  {"n_positions", rows}, {"n_ctx", rows}, {"n_embd", c.d_model}, {"n_layer", c.n_layers},
                  {"n_head", c.n_heads}, {"n_inner", d_ff_of(c)}, {"activation_function", "gelu_new"},
                  {"layer_norm_epsilon", c.layer_norm_eps}, {"resid_pdrop", 0.0}, {"embd_pdrop", 0.0},
                  {"attn_pdrop", 0.0}, {"tie_word_embeddings", true}};
    if (c.extension.method == ExtensionMethod::interpolate)
      out.note = "position table interpolated to n_positions rows (Karypis et al. 2024)";
    return out;
  }

  const HfNameTable& names() const override {
    static const HfNameTable table = {
        "transformer.",
        {{"wte.weight", "wte.weight"},
         {"wpe.weight", "wpe.weight"},
         {"ln_f.weight", "ln_f.weight"},
         {"ln_f.bias", "ln_f.bias"},
         {"blocks.{}.ln1.weight", "h.{}.ln_1.weight"},
         {"blocks.{}.ln1.bias", "h.{}.ln_1.bias"},
         {"blocks.{}.ln2.weight", "h.{}.ln_2.weight"},
         {"blocks.{}.ln2.bias", "h.{}.ln_2.bias"},
         {"blocks.{}.qkv.weight", "h.{}.attn.c_attn.weight", kPrefixed, kTranspose},
         {"blocks.{}.qkv.bias", "h.{}.attn.c_attn.bias"},
         {"blocks.{}.proj.weight", "h.{}.attn.c_proj.weight", kPrefixed, kTranspose},
         {"blocks.{}.proj.bias", "h.{}.attn.c_proj.bias"},
         {"blocks.{}.fc.weight", "h.{}.mlp.c_fc.weight", kPrefixed, kTranspose},
         {"blocks.{}.fc.bias", "h.{}.mlp.c_fc.bias"},
         {"blocks.{}.fc_out.weight", "h.{}.mlp.c_proj.weight", kPrefixed, kTranspose},
         {"blocks.{}.fc_out.bias", "h.{}.mlp.c_proj.bias"}},
        {"attn.bias", "attn.masked_bias", "lm_head.weight"}};
    return table;
  }
};

}  // namespace

const Family& gpt2_family() {
  static const Gpt2 family;
  return family;
}

}  // namespace segtrain::models
