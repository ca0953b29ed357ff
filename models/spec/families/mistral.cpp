// MistralForCausalLM: Llama's block without biases; every layer slides when
// sliding_window is set. segtrain does not implement the window: it keeps it
// (ModelConfig::sliding_window) and refuses longer sequences, never ignores it.
#include "models/spec/families/family.h"
#include "models/spec/families/hf_config_fields.h"
#include "models/spec/families/llama_blocks.h"

namespace segtrain::models {
namespace {

using namespace hf;  // NOLINT(google-build-using-namespace): the readers' helpers

class Mistral final : public Family {
 public:
  const char* model_type() const override { return "mistral"; }
  Arch arch() const override { return Arch::llama; }

  ModelConfig read_config(const json& cfg, const std::string& source) const override {
    ModelConfig c;
    read_llama_block(cfg, model_type(), 4096 * 32, c, source);
    if (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null())
      c.sliding_window = field<int64_t>(cfg, "sliding_window", source);
    return c;
  }

  // A model that carries a window is exported as Mistral, the family that has one.
  bool exports(const ModelConfig& c) const override { return c.arch == Arch::llama && c.sliding_window; }

  HfConfigOut write_config(const ModelConfig& c) const override {
    if (c.qkv_bias || c.o_bias || c.mlp_bias)
      throw InputError("export: a sliding window is exported as MistralForCausalLM, which has no biases");
    HfConfigOut out;
    out.config = write_llama_block(c, "MistralForCausalLM", model_type(), out.note);
    out.config["sliding_window"] = *c.sliding_window;
    return out;
  }

  const HfNameTable& names() const override { return llama_block_names(); }
};

}  // namespace

const Family& mistral_family() {
  static const Mistral family;
  return family;
}

}  // namespace segtrain::models
