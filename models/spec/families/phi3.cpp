// Phi3ForCausalLM (Phi-3, Phi-3.5, Phi-4-mini): Llama's block without biases, whose q,
// k and v live in one tensor (qkv_proj = cat(q, k, v) along the rows) and gate and up in
// another (gate_up_proj = cat(gate, up)); the name table splits them on import and fuses
// them back on export. RoPE is default or LongRoPE, the latter as Phi-3 hub configs write
// it: rope_scaling {type: longrope, short_factor, long_factor} and the pretrained length
// in a top-level original_max_position_embeddings. A sliding_window is kept (as
// Mistral's: Phi-3 slides every layer) and longer sequences refused.
#include <cmath>
#include <vector>

#include "models/spec/auto_values.h"
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/llama_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

// The rope type of `rope` as transformers' Phi3Config reads it: "su" and "yarn" are
// old names of longrope there (Phi3Config maps them), not YaRN.
std::string phi3_rope_type(const json& rope, const std::string& source) {
  const auto type = field_or<std::string>(rope, "rope_type", field_or<std::string>(rope, "type", "default", source),
                                          source);
  return type == "su" || type == "yarn" ? "longrope" : type;
}

// config.json `cfg` with the defaults transformers' Phi3Config has where Llama's differ
// (rms_norm_eps 1e-5; original_max_position_embeddings 4096, which its LongRoPE reads
// before the rope block's) and the old longrope names renamed, for the Llama-block reader.
json as_phi3_reads(const json& cfg, const std::string& source) {
  json out = cfg;
  if (!out.contains("rms_norm_eps") || out["rms_norm_eps"].is_null()) out["rms_norm_eps"] = 1e-5;
  if (!out.contains("original_max_position_embeddings") || out["original_max_position_embeddings"].is_null())
    out["original_max_position_embeddings"] = 4096;
  for (const char* block : {"rope_scaling", "rope_parameters"}) {
    if (!out.contains(block) || !out[block].is_object()) continue;
    const std::string type = phi3_rope_type(out[block], source);
    out[block].erase("type");
    out[block]["rope_type"] = type;
  }
  return out;
}

// Each part's rows in the fused tensors: q, k, v and gate, up.
std::vector<int64_t> qkv_rows(const ModelConfig& c) {
  const int64_t kv = n_kv_heads_of(c) * head_dim_of(c);
  return {c.n_heads * head_dim_of(c), kv, kv};
}
std::vector<int64_t> gate_up_rows(const ModelConfig& c) { return {d_ff_of(c), d_ff_of(c)}; }

// Whether Phi3ForCausalLM of transformers 4.x and 5.x reproduces `c`'s RoPE: default
// rope (ntk is a grown rope_theta), or longrope as 4.x validates it, a block of type and
// factors alone: its factor is then max_position_embeddings / original length, so that
// ratio must be the factor exactly, and the default attention factor applies.
bool phi3_rope_fits(const ModelConfig& c) {
  switch (c.extension.method) {
    case ExtensionMethod::none:
    case ExtensionMethod::ntk: return true;
    case ExtensionMethod::longrope: {
      const double positions = factor_of(c) * static_cast<double>(original_length_of(c));
      return !c.extension.longrope.attention_factor && positions == std::round(positions);
    }
    default: return false;
  }
}

class Phi3 final : public Family {
 public:
  const char* model_type() const override { return "phi3"; }
  Arch arch() const override { return Arch::llama; }

  // Dropout (resid_pdrop, embd_pdrop, attention_dropout) is checked but not applied, as
  // for every family: segtrain trains without dropout, and inference has none. Phi-3's
  // attention_bias is not read: transformers' Phi-3 has no biases whatever it says.
  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    const json phi3 = as_phi3_reads(cfg, source);
    ModelConfig c;
    read_llama_block(phi3, model_type(), 4096, c, source);
    const std::string type = phi3_rope_type(rope_settings(phi3), source);
    if (type != "default" && type != "longrope")
      throw InputError(source + ": rope_scaling type \"" + type +
                       "\" on a phi3 model (transformers' Phi3ForCausalLM reads only longrope)");
    for (const char* dropout : {"resid_pdrop", "embd_pdrop", "attention_dropout"})
      field_or<double>(cfg, dropout, 0.0, source);
    if (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null())
      c.sliding_window = field<int64_t>(cfg, "sliding_window", source);
    return c;
  }

  // Only asked first for a model read as Phi-3 (the registry has it last): one without
  // biases or q/k norms whose head_dim is hidden_size / heads (Phi-3 has no head_dim
  // key) and whose RoPE Phi-3 reproduces; otherwise LlamaForCausalLM takes it.
  bool exports(const ModelConfig& c) const override {
    return c.arch == Arch::llama && !c.qk_norm && !c.qkv_bias && !c.o_bias && !c.mlp_bias &&
           head_dim_of(c) * c.n_heads == c.d_model && phi3_rope_fits(c);
  }

  HfConfigOut write_config(const ModelConfig& c) const override {
    HfConfigOut out;
    out.config = write_llama_block(c, "Phi3ForCausalLM", model_type(), out.note);
    json& cfg = out.config;
    cfg.erase("head_dim");  // hidden_size / heads, as Phi-3 derives it (exports checks)
    cfg["original_max_position_embeddings"] = original_length_of(c);
    if (c.extension.method == ExtensionMethod::longrope) {
      // transformers 4.x's Phi3Config takes exactly these three keys; 5.x reads the same block.
      cfg["rope_scaling"] = {{"type", "longrope"},
                             {"short_factor", c.extension.longrope.short_factor},
                             {"long_factor", c.extension.longrope.long_factor}};
      cfg["rope_parameters"] = cfg["rope_scaling"];
      cfg["rope_parameters"]["rope_type"] = "longrope";
      cfg["rope_parameters"]["rope_theta"] = cfg["rope_theta"];
      cfg["rope_parameters"].erase("type");
    }
    cfg["resid_pdrop"] = cfg["embd_pdrop"] = 0.0;
    // Phi3Config's default pad and EOS id, 32000, is Phi-3's <|endoftext|>; past a smaller
    // vocabulary its embedding refuses the pad id, so none is written there (segtrain keeps
    // no pad id: in transformers it only masks that row's gradient).
    if (vocab_size_of(c) <= 32000) cfg["pad_token_id"] = cfg["eos_token_id"] = nullptr;
    cfg["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
    return out;
  }

  // Llama's names with q/k/v and gate/up as Phi-3's two fused tensors a layer.
  const HfNameTable& names() const override {
    static const HfNameTable table = [] {
      HfNameTable t = llama_block_names();
      std::erase_if(t.tensors, [](const HfTensorName& row) {
        for (const char* fused : {".q_proj.", ".k_proj.", ".v_proj.", ".gate_proj.", ".up_proj."})
          if (row.ours.find(fused) != std::string::npos) return true;
        return false;
      });
      t.fused.push_back({"layers.{}.self_attn.qkv_proj.weight",
                         {"blocks.{}.q_proj.weight", "blocks.{}.k_proj.weight", "blocks.{}.v_proj.weight"},
                         qkv_rows});
      t.fused.push_back({"layers.{}.mlp.gate_up_proj.weight",
                         {"blocks.{}.gate_proj.weight", "blocks.{}.up_proj.weight"},
                         gate_up_rows});
      return t;
    }();
    return table;
  }
};

}  // namespace

const Family& phi3_family() {
  static const Phi3 family;
  return family;
}

}  // namespace segtrain::models
