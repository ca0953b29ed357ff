// Qwen2ForCausalLM: Llama's block with biases on q, k and v always (never on o).
// Its sliding window (qwen_sliding_window) is kept and longer sequences refused.
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/llama_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

class Qwen2 final : public Family {
 public:
  const char* model_type() const override { return "qwen2"; }
  Arch arch() const override { return Arch::llama; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    read_llama_block(cfg, model_type(), 32768, c, source);
    c.qkv_bias = true;
    c.sliding_window = qwen_sliding_window(cfg, c.n_layers, source);
    return c;
  }

  // Biases on q/k/v alone are Qwen2's (Llama's attention_bias covers o too).
  bool exports(const ModelConfig& c) const override {
    return c.arch == Arch::llama && !c.sliding_window && c.qkv_bias && !c.o_bias;
  }

  HfConfigOut write_config(const ModelConfig& c) const override {
    if (c.mlp_bias) throw InputError("export: Qwen2 (q/k/v biases) has no mlp_bias");
    HfConfigOut out;
    out.config = write_llama_block(c, "Qwen2ForCausalLM", model_type(), out.note);
    out.config["use_sliding_window"] = false;
    out.config["sliding_window"] = nullptr;
    return out;
  }

  const HfNameTable& names() const override { return llama_block_names(); }
};

}  // namespace

const Family& qwen2_family() {
  static const Qwen2 family;
  return family;
}

}  // namespace segtrain::models
