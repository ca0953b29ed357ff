// Qwen2ForCausalLM: Llama's block with biases on q, k and v always (never on o).
// Its sliding window applies to the layers listed as sliding_attention in
// layer_types (transformers 5 writes them), or else to the layers from
// max_window_layers on when use_sliding_window is true; segtrain keeps it and
// refuses longer sequences.
#include "models/families/family.h"
#include "models/families/hf_config_fields.h"
#include "models/families/llama_blocks.h"

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
    if (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null()) {
      bool slides = field_or<bool>(cfg, "use_sliding_window", false, source) &&
                    field_or<int64_t>(cfg, "max_window_layers", 28, source) < c.n_layers;
      if (cfg.contains("layer_types") && cfg["layer_types"].is_array()) {
        slides = false;
        for (const auto& layer : cfg["layer_types"]) slides = slides || layer == "sliding_attention";
      }
      if (slides) c.sliding_window = field<int64_t>(cfg, "sliding_window", source);
    }
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
