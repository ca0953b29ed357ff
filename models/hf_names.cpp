#include "models/hf_names.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace segtrain::models {

namespace {

// Rows are written out in full so a name can be found by grepping for it; only
// the block naming GPT-NeoX and BLOOM share is generated (megatron_blocks).
constexpr bool kPrefixed = true, kUnprefixed = false, kTranspose = true;

// GPT2LMHeadModel: the head is tied to wte; Conv1D weights are transposed.
const HfNameTable kGpt2 = {
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

// The block naming GPT-NeoX and BLOOM both kept from Megatron-LM; they differ
// only in what the layer list and the attention module are called.
std::vector<HfTensorName> megatron_blocks(const std::string& layers, const std::string& attention) {
  const std::pair<std::string, std::string> modules[] = {
      {"ln1", "input_layernorm"}, {"ln2", "post_attention_layernorm"},
      {"qkv", attention + ".query_key_value"}, {"proj", attention + ".dense"},
      {"fc", "mlp.dense_h_to_4h"}, {"fc_out", "mlp.dense_4h_to_h"}};
  std::vector<HfTensorName> rows;
  for (const auto& [ours, hf] : modules)
    for (const std::string param : {".weight", ".bias"})
      rows.push_back({"blocks.{}." + ours + param, layers + ".{}." + hf + param});
  return rows;
}

HfNameTable with_blocks(HfNameTable table, const std::vector<HfTensorName>& blocks) {
  table.tensors.insert(table.tensors.end(), blocks.begin(), blocks.end());
  return table;
}

// GPTNeoXForCausalLM: an untied head, "embed_out", outside the base model.
const HfNameTable kGptNeox = with_blocks(
    {"gpt_neox.",
     {{"wte.weight", "embed_in.weight"},
      {"ln_f.weight", "final_layer_norm.weight"},
      {"ln_f.bias", "final_layer_norm.bias"},
      {"lm_head.weight", "embed_out.weight", kUnprefixed}},
     {"attention.bias", "attention.masked_bias", "rotary_emb.inv_freq"}},
    megatron_blocks("layers", "attention"));

// BloomForCausalLM: a LayerNorm after the embedding; the head is tied to wte.
const HfNameTable kBloom = with_blocks(
    {"transformer.",
     {{"wte.weight", "word_embeddings.weight"},
      {"emb_ln.weight", "word_embeddings_layernorm.weight"},
      {"emb_ln.bias", "word_embeddings_layernorm.bias"},
      {"ln_f.weight", "ln_f.weight"},
      {"ln_f.bias", "ln_f.bias"}},
     {"lm_head.weight"}},
    megatron_blocks("h", "self_attention"));

// LlamaForCausalLM, and MistralForCausalLM / Qwen2ForCausalLM, which name their
// tensors the same way. Bias rows apply when the config has them (attention_bias,
// Qwen2's q/k/v, mlp_bias); an untied head, "lm_head", is outside the base model,
// and a tied one is not saved (an extra copy is ignored).
std::vector<HfTensorName> llama_blocks() {
  std::vector<HfTensorName> rows = {{"blocks.{}.ln1.weight", "layers.{}.input_layernorm.weight"},
                                    {"blocks.{}.ln2.weight", "layers.{}.post_attention_layernorm.weight"}};
  for (const std::string proj : {"q_proj", "k_proj", "v_proj", "o_proj"})
    for (const std::string param : {".weight", ".bias"})
      rows.push_back({"blocks.{}." + proj + param, "layers.{}.self_attn." + proj + param});
  for (const std::string proj : {"gate_proj", "up_proj", "down_proj"})
    for (const std::string param : {".weight", ".bias"})
      rows.push_back({"blocks.{}." + proj + param, "layers.{}.mlp." + proj + param});
  return rows;
}

const HfNameTable kLlama = with_blocks(
    {"model.",
     {{"wte.weight", "embed_tokens.weight"},
      {"ln_f.weight", "norm.weight"},
      {"lm_head.weight", "lm_head.weight", kUnprefixed}},
     {"rotary_emb.inv_freq"}},
    llama_blocks());

}  // namespace

const HfNameTable& hf_names(Arch arch) {
  switch (arch) {
    case Arch::gpt2: return kGpt2;
    case Arch::gpt_neox: return kGptNeox;
    case Arch::bloom: return kBloom;
    case Arch::llama: return kLlama;
  }
  throw std::logic_error("no HF name table for this arch");
}

std::optional<std::string> rename_slot(const std::string& from, const std::string& to, const std::string& name) {
  const auto slot = from.find("{}");
  if (slot == std::string::npos) return name == from ? std::optional<std::string>(to) : std::nullopt;
  const std::string head = from.substr(0, slot), tail = from.substr(slot + 2);
  if (name.size() <= head.size() + tail.size() || !name.starts_with(head) || !name.ends_with(tail))
    return std::nullopt;
  const std::string layer = name.substr(head.size(), name.size() - head.size() - tail.size());
  const bool index = std::all_of(layer.begin(), layer.end(), [](unsigned char ch) { return std::isdigit(ch); });
  if (!index || (layer.size() > 1 && layer[0] == '0')) return std::nullopt;  // "h.01" is not layer 1
  std::string out = to;
  return out.replace(out.find("{}"), 2, layer);
}

}  // namespace segtrain::models
