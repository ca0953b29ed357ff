// Qwen3ForCausalLM: Llama's block with an RMSNorm over each head's q and k before
// RoPE (q_norm, k_norm: model.qk_norm), head_dim given explicitly (128 when absent,
// transformers' default, not hidden_size / heads), attention_bias on q/k/v/o as
// Llama's. Its sliding window is read as Qwen2's (qwen_sliding_window); segtrain
// keeps it and refuses longer sequences.
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/llama_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

class Qwen3 final : public Family {
 public:
  const char* model_type() const override { return "qwen3"; }
  Arch arch() const override { return Arch::llama; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    read_llama_block(cfg, model_type(), 32768, c, source);
    c.head_dim = field_or<int64_t>(cfg, "head_dim", 128, source);
    c.qk_norm = true;
    c.qkv_bias = c.o_bias = field_or<bool>(cfg, "attention_bias", false, source);
    c.sliding_window = qwen_sliding_window(cfg, c.n_layers, source);
    return c;
  }

  // Every model with q/k norms: no other family has them (the registry asks Qwen3 first).
  bool exports(const ModelConfig& c) const override { return c.arch == Arch::llama && c.qk_norm; }

  HfConfigOut write_config(const ModelConfig& c) const override {
    if (c.qkv_bias != c.o_bias)
      throw InputError("export: Qwen3's attention_bias sets q/k/v and o together; this model has biases on " +
                       std::string(c.qkv_bias ? "q/k/v only" : "o only"));
    if (c.mlp_bias) throw InputError("export: Qwen3 has no mlp_bias");
    if (c.sliding_window)
      throw InputError("export: a Qwen3 model with a sliding window is not exported (segtrain never slides; the "
                       "window would be written for transformers to apply)");
    HfConfigOut out;
    out.config = write_llama_block(c, "Qwen3ForCausalLM", model_type(), out.note);
    out.config["attention_bias"] = c.qkv_bias;
    out.config["use_sliding_window"] = false;
    out.config["sliding_window"] = nullptr;
    return out;
  }

  // Llama's names and the two norms of each layer's attention.
  const HfNameTable& names() const override {
    static const HfNameTable table = [] {
      HfNameTable t = llama_block_names();
      t.tensors.push_back({"blocks.{}.q_norm.weight", "layers.{}.self_attn.q_norm.weight"});
      t.tensors.push_back({"blocks.{}.k_norm.weight", "layers.{}.self_attn.k_norm.weight"});
      return t;
    }();
    return table;
  }
};

}  // namespace

const Family& qwen3_family() {
  static const Qwen3 family;
  return family;
}

}  // namespace segtrain::models
