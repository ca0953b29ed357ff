// LlamaForCausalLM: attention_bias puts biases on q, k, v and o together, mlp_bias
// on gate, up and down.
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/llama_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

class Llama final : public Family {
 public:
  const char* model_type() const override { return "llama"; }
  Arch arch() const override { return Arch::llama; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    read_llama_block(cfg, model_type(), 2048, c, source);
    c.qkv_bias = c.o_bias = field_or<bool>(cfg, "attention_bias", false, source);
    c.mlp_bias = field_or<bool>(cfg, "mlp_bias", false, source);
    return c;
  }

  // Llama's block without a window (Mistral's) or biases on q/k/v alone (Qwen2's).
  bool exports(const ModelConfig& c) const override {
    return c.arch == Arch::llama && !c.sliding_window && !(c.qkv_bias && !c.o_bias);
  }

  HfConfigOut write_config(const ModelConfig& c) const override {
    if (c.o_bias && !c.qkv_bias)
      throw InputError("export: a bias on o_proj without q/k/v biases has no transformers architecture "
                       "(Llama's attention_bias sets all four)");
    HfConfigOut out;
    out.config = write_llama_block(c, "LlamaForCausalLM", model_type(), out.note);
    out.config["attention_bias"] = c.qkv_bias;
    out.config["mlp_bias"] = c.mlp_bias;
    return out;
  }

  const HfNameTable& names() const override { return llama_block_names(); }
};

}  // namespace

const Family& llama_family() {
  static const Llama family;
  return family;
}

}  // namespace segtrain::models
